// Package outage keeps a container runtime outage to a few log lines: one when it starts,
// one when it ends (saying how long it lasted), and at most one summary a minute in
// between, however many pods, probes and workers fail meanwhile.
//
// Everything that talks to the runtime logs its failures through the Gate (ErrorS, or a
// Logger wrapped by it); the runtime health check feeds it (Observe). While the runtime is
// known to be down, the gate counts error lines instead of writing them, and Down tells
// probes and the PLEG to hold off. A failure that shows the runtime unreachable (gRPC
// Unavailable: the socket is gone or refuses connections) starts the outage at once, so
// that the calls failing before the next health check are quiet too; only a successful
// health check ends it.
//
// Upstream's kubelet has no such gate: its remote runtime client, PLEG, probers and pod
// workers each log every failure, many times a second on a busy node.
package outage

import (
	"sync"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// SummaryPeriod is how often a long outage is summarised.
const SummaryPeriod = time.Minute

// Gate decides which runtime-related error lines reach the log.
type Gate struct {
	clock clock.PassiveClock
	// logError and logInfo write a line, depth frames above their caller; klog by
	// default, tests replace them.
	logError func(depth int, err error, msg string, keysAndValues ...any)
	logInfo  func(depth int, msg string, keysAndValues ...any)

	mu sync.Mutex
	// watched is set by the first health check: only a gate fed by one may declare an
	// outage from a failed call, since only a health check can end it.
	watched bool
	down    bool
	since   time.Time // when the outage started
	// lastLine is when the outage was last logged (start or summary); suppressed counts
	// the error lines left out since then, and total those of the whole outage.
	lastLine   time.Time
	suppressed int
	total      int
}

// Default is the process's gate: there is one container runtime.
var Default = New(clock.RealClock{})

// New returns a gate that considers the runtime up until told otherwise.
func New(c clock.PassiveClock) *Gate {
	return &Gate{
		clock: c,
		logError: func(depth int, err error, msg string, kv ...any) {
			klog.ErrorSDepth(depth+1, err, msg, kv...)
		},
		logInfo: func(depth int, msg string, kv ...any) {
			klog.InfoSDepth(depth+1, msg, kv...)
		},
	}
}

// Observe records a runtime health check: nil when the runtime answered and is ready.
// It logs the start and the end of an outage, and a summary every SummaryPeriod while
// it lasts.
func (g *Gate) Observe(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.watched = true
	now := g.clock.Now()
	switch {
	case err != nil && !g.down:
		g.startLocked(now, err)
	case err != nil && now.Sub(g.lastLine) >= SummaryPeriod:
		g.logError(1, err, "Container runtime is still not ready", "downFor", roundDuration(now.Sub(g.since)),
			"suppressedErrors", g.suppressed)
		g.lastLine, g.suppressed = now, 0
	case err == nil && g.down:
		g.down = false
		g.logInfo(1, "Container runtime is ready",
			"downFor", roundDuration(now.Sub(g.since)), "suppressedErrors", g.total)
	}
}

func (g *Gate) startLocked(now time.Time, err error) {
	g.down, g.since, g.lastLine, g.suppressed, g.total = true, now, now, 0, 0
	g.logError(2, err, "Container runtime is not ready")
}

// Down reports whether the runtime is known to be down.
func (g *Gate) Down() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.down
}

// ErrorS logs like klog.ErrorS unless the runtime is known to be down, or err shows that
// it just went down; such a line is only counted.
func (g *Gate) ErrorS(err error, msg string, keysAndValues ...any) {
	if g.suppress(err) {
		return
	}
	g.logError(1, err, msg, keysAndValues...)
}

// suppress reports whether an error line is left out, counting it if so.
func (g *Gate) suppress(err error) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.down && g.watched && Unreachable(err) {
		g.startLocked(g.clock.Now(), err)
	}
	if !g.down {
		return false
	}
	g.suppressed++
	g.total++
	return true
}

// Unreachable reports whether err says the runtime could not be reached at all: gRPC's
// Unavailable, which the client returns when the socket is missing, refuses connections
// or closes mid-call.
func Unreachable(err error) bool {
	return err != nil && status.Code(err) == codes.Unavailable
}

// roundDuration keeps a logged duration readable.
func roundDuration(d time.Duration) string {
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// Logger returns base with its error lines going through the gate; info lines are
// untouched. The CRI clients log through it.
func (g *Gate) Logger(base logr.Logger) logr.Logger {
	sink := base.GetSink()
	if sink == nil {
		return base
	}
	if withDepth, ok := sink.(logr.CallDepthLogSink); ok {
		sink = withDepth.WithCallDepth(1) // the gate's own frame
	}
	return logr.New(&gatedSink{LogSink: sink, gate: g})
}

// gatedSink is a logr.LogSink that drops the error lines the gate suppresses.
type gatedSink struct {
	logr.LogSink
	gate *Gate
}

// Init does nothing: the wrapped sink was initialised by its own logger.
func (s *gatedSink) Init(logr.RuntimeInfo) {}

func (s *gatedSink) Error(err error, msg string, keysAndValues ...any) {
	if s.gate.suppress(err) {
		return
	}
	s.LogSink.Error(err, msg, keysAndValues...)
}

func (s *gatedSink) WithValues(keysAndValues ...any) logr.LogSink {
	return &gatedSink{LogSink: s.LogSink.WithValues(keysAndValues...), gate: s.gate}
}

func (s *gatedSink) WithName(name string) logr.LogSink {
	return &gatedSink{LogSink: s.LogSink.WithName(name), gate: s.gate}
}

// ErrorS logs through the Default gate (see Gate.ErrorS).
func ErrorS(err error, msg string, keysAndValues ...any) {
	if Default.suppress(err) {
		return
	}
	Default.logError(1, err, msg, keysAndValues...)
}

// Down reports whether the Default gate knows the runtime to be down.
func Down() bool { return Default.Down() }
