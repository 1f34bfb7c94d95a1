package outage

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	clocktesting "k8s.io/utils/clock/testing"
)

// lines records what a gate logs.
type lines struct {
	mu     sync.Mutex
	errors []string
	infos  []string
}

func (l *lines) count() (errs, infos int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.errors), len(l.infos)
}

func (l *lines) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := append(append([]string(nil), l.errors...), l.infos...)
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1]
}

func newTestGate() (*Gate, *clocktesting.FakeClock, *lines) {
	clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
	g := New(clock)
	l := &lines{}
	g.logError = func(_ int, err error, msg string, kv ...any) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.errors = append(l.errors, fmt.Sprintf("%s err=%v %v", msg, err, kv))
	}
	g.logInfo = func(_ int, msg string, kv ...any) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.infos = append(l.infos, fmt.Sprintf("%s %v", msg, kv))
	}
	return g, clock, l
}

var unavailable = status.Error(codes.Unavailable, "connection error: dial unix /run/containerd.sock: connect: no such file or directory")

func TestGateLogsAnOutageOnceWhateverFails(t *testing.T) {
	g, clock, l := newTestGate()
	g.Observe(nil)
	g.ErrorS(errors.New("image not found"), "Pull failed")
	if e, _ := l.count(); e != 1 || g.Down() {
		t.Fatalf("while the runtime is up errors must pass: %d lines, down=%v", e, g.Down())
	}

	g.Observe(errors.New("container runtime is down: " + unavailable.Error()))
	if !g.Down() {
		t.Fatal("a failed health check must start an outage")
	}
	// 20 pods × probes, workers and the PLEG failing for 30 s.
	for range 30 {
		for range 60 {
			g.ErrorS(unavailable, "ExecSync cmd from runtime service failed")
			g.ErrorS(errors.New("sync failed: rpc error"), "Error syncing pod, skipping")
		}
		clock.Step(time.Second)
		g.Observe(errors.New("container runtime is down"))
	}
	if e, _ := l.count(); e != 2 {
		t.Fatalf("a 30 s outage logged %d error lines, want 2 (one before it, its start): %v", e, l.errors)
	}
	g.Observe(nil)
	if g.Down() {
		t.Fatal("a good health check must end the outage")
	}
	e, i := l.count()
	if e != 2 || i != 1 {
		t.Fatalf("got %d error and %d info lines, want 2 and 1", e, i)
	}
	if end := l.last(); !strings.Contains(end, "Container runtime is ready") || !strings.Contains(end, "downFor 30s") ||
		!strings.Contains(end, "suppressedErrors 3600") {
		t.Fatalf("end line %q must say how long the outage lasted and what it left out", end)
	}
	g.ErrorS(errors.New("later"), "Something else failed")
	if e, _ := l.count(); e != 3 {
		t.Fatal("after the outage errors must pass again")
	}
}

func TestGateSummarisesALongOutageOncePerMinute(t *testing.T) {
	g, clock, l := newTestGate()
	g.Observe(errors.New("down"))
	for range 10 * 60 { // ten minutes, a health check each second
		g.ErrorS(unavailable, "ListPodSandbox failed")
		clock.Step(time.Second)
		g.Observe(errors.New("down"))
	}
	// The start, then one summary a minute.
	if e, _ := l.count(); e != 11 {
		t.Fatalf("a 10 min outage logged %d error lines, want 11: %v", e, l.errors)
	}
	if !strings.Contains(l.errors[1], "Container runtime is still not ready") || !strings.Contains(l.errors[1], "suppressedErrors 60") {
		t.Fatalf("summary %q", l.errors[1])
	}
}

func TestGateStartsAnOutageAtTheFirstUnreachableCall(t *testing.T) {
	g, _, l := newTestGate()
	// Without a health check to end it, nothing may start an outage.
	g.ErrorS(unavailable, "ListContainers failed")
	if g.Down() {
		t.Fatal("a gate no health check feeds declared an outage")
	}
	g.Observe(nil)
	g.ErrorS(errors.New("not found"), "ContainerStatus failed")
	if g.Down() {
		t.Fatal("an ordinary error started an outage")
	}
	g.ErrorS(fmt.Errorf("listing pods: %w", unavailable), "GenericPLEG: Unable to retrieve pods")
	if !g.Down() {
		t.Fatal("an unreachable runtime must start the outage before the next health check")
	}
	for range 20 {
		g.ErrorS(unavailable, "ExecSync cmd from runtime service failed")
	}
	e, _ := l.count()
	if e != 3 || !strings.Contains(l.errors[2], "Container runtime is not ready") {
		t.Fatalf("want the two errors before the outage and its start, got %v", l.errors)
	}
}

func TestGateLoggerDropsErrorsDuringAnOutage(t *testing.T) {
	g, _, _ := newTestGate()
	var out []string
	base := funcr.New(func(prefix, args string) { out = append(out, args) }, funcr.Options{})
	logger := g.Logger(base).WithValues("client", "cri").WithName("runtime")
	g.Observe(nil)
	logger.Error(errors.New("deadline exceeded"), "Version failed")
	g.Observe(errors.New("down"))
	logger.Error(unavailable, "Status failed")
	logger.Info("still informative")
	if len(out) != 2 || !strings.Contains(out[0], "Version failed") || !strings.Contains(out[0], `"client"="cri"`) ||
		!strings.Contains(out[1], "still informative") {
		t.Fatalf("logged %q", out)
	}
	if g.Logger(logr.Discard()).GetSink() != nil {
		t.Fatal("a discarding logger must stay one")
	}
}
