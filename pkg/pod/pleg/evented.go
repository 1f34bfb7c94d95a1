package pleg

// EventedPLEG is nodelet's evented PLEG. It watches the runtime's CRI container events
// (GetContainerEvents) and relists the pod of each event at once, through the
// GenericPLEG's one-pod relist. So the GenericPLEG stays the only writer of the pod
// cache and the only source of PodLifecycleEvents, as in upstream v1.37 (where the
// evented PLEG only asks for relists): both PLEGs emit the same events from the same
// comparison, and no status is ever built from an event.
//
// Unlike upstream v1.37, which keeps relisting every second beside the events, nodelet
// stretches the periodic relist to EventedRelistPeriod while the stream works, as
// upstream's evented PLEG did until v1.36: that is what saves the CPU. Two things the
// 1 s relist did must then come from elsewhere:
//   - pod workers wait (GetNewerThan) for the cache to be fresher than their last sync;
//     every second the evented PLEG marks it fresh, behind the relists its events asked
//     for (markFresh; at once from the stream goroutine when none is pending);
//   - a pod whose status could not be read is read again after a second (reinspectLater).
//
// The stream counts as working once it has stayed open for streamSettle and a full
// relist has succeeded since: from then on every change is seen by an event or was seen
// by that relist. When it breaks, the relist period is back to 1 s at once (with a
// relist at once), and the stream is reopened with back-off, forever: a containerd
// restart is routine. Only a runtime that does not implement the stream (Unimplemented,
// containerd 1.6) turns the watching off for good.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pod/podcache"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Upstream's settings for the relisting fallback of an evented PLEG.
const (
	EventedRelistPeriod    = 300 * time.Second
	EventedRelistThreshold = 10 * time.Minute
)

// EventedPLEGGate is the feature gate that switches the evented PLEG on or off.
const EventedPLEGGate = "EventedPLEG"

const (
	// containerEventsCapacity is upstream's buffer between the stream and the PLEG.
	containerEventsCapacity = 1000
	// streamSettle is how long a new stream must stay open before it is trusted: long
	// enough for the runtime to have subscribed it to its events, and for a runtime that
	// lacks the call to have said so.
	streamSettle = time.Second
	// Back-off between attempts to reopen the stream.
	minStreamBackoff = 500 * time.Millisecond
	maxStreamBackoff = 30 * time.Second
)

// ContainerEventSource is the runtime's CRI container event stream; the CRI runtime
// service (internalapi.RuntimeService) is one.
type ContainerEventSource interface {
	GetContainerEvents(ctx context.Context, ch chan *runtimeapi.ContainerEventResponse, connected func(runtimeapi.RuntimeService_GetContainerEventsClient)) error
}

// EventedPLEGEnabled reads the EventedPLEG gate from a KubeletConfiguration's
// featureGates. Upstream's gate is alpha and off by default; nodelet's default is on:
// its evented PLEG only asks the relisting PLEG for relists, and turns itself off on a
// runtime without the stream, so it cannot leave the node with a worse view of the
// runtime than relisting alone. EventedPLEG: false keeps relisting only.
func EventedPLEGEnabled(featureGates map[string]bool) bool {
	enabled, set := featureGates[EventedPLEGGate]
	return enabled || !set
}

// New returns the PLEG nodelet runs: an EventedPLEG watching source when featureGates
// leave the EventedPLEG gate on (see EventedPLEGEnabled), else a GenericPLEG relisting
// every second. eventChannel should be ChannelCapacity big.
func New(featureGates map[string]bool, runtime container.Runtime, source ContainerEventSource,
	eventChannel chan *PodLifecycleEvent, cache podcache.Cache, clock clock.Clock) PodLifecycleEventGenerator {
	if source == nil || !EventedPLEGEnabled(featureGates) {
		klog.V(2).InfoS("Evented PLEG is off; relisting only", "relistPeriod", RelistPeriod)
		return NewGenericPLEG(runtime, eventChannel, DefaultRelistDuration(), cache, clock)
	}
	return NewEventedPLEG(runtime, source, eventChannel, cache, clock)
}

// EventedPLEG relists pods as the runtime's container events ask; see the top of this file.
type EventedPLEG struct {
	relister     *GenericPLEG
	source       ContainerEventSource
	eventChannel chan *PodLifecycleEvent
	clock        clock.Clock

	// Timing: upstream's and the constants above; tests shorten them.
	relisting, evented     RelistDuration
	settle                 time.Duration
	minBackoff, maxBackoff time.Duration

	// runMu guards cancel and done, the watch goroutine's.
	runMu  sync.Mutex
	cancel context.CancelFunc // nil while stopped
	done   chan struct{}

	// streaming is set while the stream is trusted and the relist period stretched.
	streaming atomic.Bool
	// Only the watch goroutine uses these. brokeAt is when the stream last broke or
	// first failed to open (zero while it works); streamedBefore is set once it has.
	brokeAt        time.Time
	streamedBefore bool
}

var _ PodLifecycleEventGenerator = (*EventedPLEG)(nil)

// NewEventedPLEG returns an evented PLEG over a GenericPLEG of its own, writing statuses
// into cache and events into eventChannel.
func NewEventedPLEG(runtime container.Runtime, source ContainerEventSource, eventChannel chan *PodLifecycleEvent,
	cache podcache.Cache, clock clock.Clock) *EventedPLEG {
	return &EventedPLEG{
		relister:     NewGenericPLEG(runtime, eventChannel, DefaultRelistDuration(), cache, clock).(*GenericPLEG),
		source:       source,
		eventChannel: eventChannel,
		clock:        clock,
		relisting:    *DefaultRelistDuration(),
		evented:      RelistDuration{RelistPeriod: EventedRelistPeriod, RelistThreshold: EventedRelistThreshold},
		settle:       streamSettle,
		minBackoff:   minStreamBackoff,
		maxBackoff:   maxStreamBackoff,
	}
}

// Start relists every second and starts watching the runtime's events.
func (e *EventedPLEG) Start() {
	e.runMu.Lock()
	defer e.runMu.Unlock()
	if e.cancel != nil {
		return
	}
	e.relister.Update(&e.relisting)
	e.relister.Start()
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan struct{})
	go e.watch(ctx, e.done)
}

// Stop stops watching and relisting.
func (e *EventedPLEG) Stop() {
	e.runMu.Lock()
	defer e.runMu.Unlock()
	if e.cancel == nil {
		return
	}
	e.cancel()
	<-e.done
	e.cancel = nil
	e.streaming.Store(false)
	e.relister.Stop()
}

// Watch returns the channel the events arrive on.
func (e *EventedPLEG) Watch() chan *PodLifecycleEvent { return e.eventChannel }

// UpdateCache reads the pod's status now and stores it (see GenericPLEG.UpdateCache).
func (e *EventedPLEG) UpdateCache(pod *container.Pod, pid types.UID) (error, bool) {
	return e.relister.UpdateCache(pod, pid)
}

// RequestRelist asks for one pod to be relisted soon; it never blocks.
func (e *EventedPLEG) RequestRelist(uid types.UID) { e.relister.RequestRelist(uid) }

// Healthy checks the relisting PLEG against its current threshold (10 min while events
// flow, 3 min otherwise), and, while events flow, that the event channel has room, as
// upstream's two checks for an evented PLEG did.
func (e *EventedPLEG) Healthy() (bool, error) {
	if ok, err := e.relister.Healthy(); !ok {
		return false, err
	}
	if e.streaming.Load() && cap(e.eventChannel) > 0 && len(e.eventChannel) == cap(e.eventChannel) {
		return false, errors.New("EventedPLEG: pleg event channel out of capacity")
	}
	return true, nil
}

// watch keeps a stream open until ctx ends or the runtime says it has none.
func (e *EventedPLEG) watch(ctx context.Context, done chan struct{}) {
	defer close(done)
	delay := e.minBackoff
	for {
		opened := e.clock.Now()
		trusted, err := e.watchStream(ctx)
		if ctx.Err() != nil {
			return
		}
		eventedConnErrors.Inc()
		if trusted {
			e.fallBack(err)
			if e.clock.Since(opened) >= e.maxBackoff {
				delay = e.minBackoff // a stream that lasted is a fresh start
			}
		}
		if status.Code(err) == codes.Unimplemented {
			klog.InfoS("Evented PLEG: the container runtime does not implement GetContainerEvents; relisting only",
				"relistPeriod", e.relisting.RelistPeriod)
			return
		}
		e.noteFailure(err, trusted)
		if !e.sleep(ctx, delay) {
			return
		}
		delay = min(2*delay, e.maxBackoff)
	}
}

// watchStream opens the stream and relists the pod of each event until the stream ends,
// reporting whether it was trusted (the relist period stretched) by then.
func (e *EventedPLEG) watchStream(ctx context.Context) (trusted bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := make(chan *runtimeapi.ContainerEventResponse, containerEventsCapacity)
	opened := make(chan time.Time, 1)
	ended := make(chan error, 1)
	go func() {
		ended <- e.source.GetContainerEvents(ctx, events, func(runtimeapi.RuntimeService_GetContainerEventsClient) {
			eventedConnSuccesses.Inc()
			opened <- e.clock.Now()
		})
	}()
	tick := e.clock.NewTimer(e.relisting.RelistPeriod)
	defer tick.Stop()
	var trustAfter time.Time // zero until the stream is open
	for {
		select {
		case <-ctx.Done():
			return trusted, ctx.Err()
		case err := <-ended:
			e.handlePending(events)
			if err == nil {
				err = errors.New("container event stream closed without an error")
			}
			return trusted, err
		case at := <-opened:
			trustAfter = at.Add(e.settle)
		case ev := <-events:
			e.handle(ev)
		case now := <-tick.C():
			tick.Reset(e.relisting.RelistPeriod)
			switch {
			case trusted:
				// Every change before now that an event reported is asked for: the
				// cache is fresh up to now once those relists are done (at once when
				// none is waiting).
				e.handlePending(events)
				if !e.relister.markFreshIfIdle(now) {
					e.relister.requestFresh(now)
				}
			case !trustAfter.IsZero() && e.relister.lastRelistTime().After(trustAfter):
				e.startStreaming()
				trusted = true
			}
		}
	}
}

// handlePending handles the events already received.
func (e *EventedPLEG) handlePending(events chan *runtimeapi.ContainerEventResponse) {
	for {
		select {
		case ev := <-events:
			e.handle(ev)
		default:
			return
		}
	}
}

// handle asks for a relist of the event's pod. The pod comes from the sandbox status the
// event carries; a sandbox's deletion carries none, and then the pod is the one the
// relists saw the container in (or, unknown, all pods are relisted).
func (e *EventedPLEG) handle(ev *runtimeapi.ContainerEventResponse) {
	if ev.CreatedAt > 0 {
		eventedConnLatency.Observe(e.clock.Since(time.Unix(0, ev.CreatedAt)).Seconds())
	}
	uid, ok := e.podOf(ev)
	if !ok {
		klog.V(4).InfoS("Evented PLEG: event for a container of no known pod; relisting all pods",
			"containerID", ev.ContainerId, "eventType", ev.ContainerEventType)
		e.relister.requestFullRelist()
		return
	}
	klog.V(4).InfoS("Evented PLEG: relisting pod after a container event",
		"podUID", uid, "containerID", ev.ContainerId, "eventType", ev.ContainerEventType)
	e.relister.RequestRelist(uid)
}

func (e *EventedPLEG) podOf(ev *runtimeapi.ContainerEventResponse) (types.UID, bool) {
	if uid := ev.GetPodSandboxStatus().GetMetadata().GetUid(); uid != "" {
		return types.UID(uid), true
	}
	return e.relister.podOfContainer(ev.ContainerId)
}

// startStreaming stretches the relist period: the stream is trusted.
func (e *EventedPLEG) startStreaming() {
	// A relist has just succeeded (the stream is trusted after one): the next is due in
	// a period.
	e.relister.switchDuration(&e.evented, false)
	e.streaming.Store(true)
	if e.streamedBefore {
		klog.InfoS("Evented PLEG: container event stream is back", "after", e.clock.Since(e.brokeAt).Round(time.Millisecond),
			"relistPeriod", e.evented.RelistPeriod)
	} else {
		klog.InfoS("Evented PLEG: watching the container runtime's events", "relistPeriod", e.evented.RelistPeriod)
	}
	e.brokeAt, e.streamedBefore = time.Time{}, true
}

// fallBack relists every second again, starting now: the stream broke.
func (e *EventedPLEG) fallBack(err error) {
	e.streaming.Store(false)
	e.relister.switchDuration(&e.relisting, true)
	e.brokeAt = e.clock.Now()
	klog.ErrorS(err, "Evented PLEG: container event stream broke; relisting until it is back",
		"relistPeriod", e.relisting.RelistPeriod)
}

// noteFailure logs the first failure to open a stream at start-up (one line); a broken
// stream was logged by fallBack, and the retries after either only at V(4).
func (e *EventedPLEG) noteFailure(err error, justBroke bool) {
	if justBroke {
		return
	}
	if e.brokeAt.IsZero() {
		e.brokeAt = e.clock.Now()
		klog.InfoS("Evented PLEG: cannot watch the container runtime's events yet; relisting until it can",
			"err", err, "relistPeriod", e.relisting.RelistPeriod)
		return
	}
	klog.V(4).InfoS("Evented PLEG: container event stream failed; retrying", "err", err)
}

// sleep waits d, or until ctx ends (false).
func (e *EventedPLEG) sleep(ctx context.Context, d time.Duration) bool {
	t := e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
