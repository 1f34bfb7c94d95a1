package pleg

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/pod/podcache"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// fakeEvents is a runtime's container event stream that the test feeds and breaks.
type fakeEvents struct {
	mu sync.Mutex
	// refuse, when set, fails every attempt to open the stream.
	refuse  error
	opens   int
	current *fakeStream
}

type fakeStream struct {
	events chan *runtimeapi.ContainerEventResponse
	broken chan error
}

func (f *fakeEvents) GetContainerEvents(ctx context.Context, ch chan *runtimeapi.ContainerEventResponse, connected func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	f.mu.Lock()
	f.opens++
	refuse := f.refuse
	s := &fakeStream{events: make(chan *runtimeapi.ContainerEventResponse, 100), broken: make(chan error, 1)}
	if refuse == nil {
		f.current = s
	}
	f.mu.Unlock()
	if connected != nil {
		connected(nil) // as gRPC: the stream opens before the runtime answers
	}
	if refuse != nil {
		return refuse
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-s.broken:
			return err
		case ev := <-s.events:
			select {
			case ch <- ev:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

func (f *fakeEvents) setRefuse(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = err
}

func (f *fakeEvents) stream() *fakeStream {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current
}

func (f *fakeEvents) openCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opens
}

// send delivers an event on the open stream.
func (f *fakeEvents) send(ev *runtimeapi.ContainerEventResponse) { f.stream().events <- ev }

// breakStream ends the open stream with err.
func (f *fakeEvents) breakStream(err error) { f.stream().broken <- err }

// testEvented is an EventedPLEG over fakes with a real clock and short timings: relisting
// every 10 ms, "stretched" to an hour while events flow.
type testEvented struct {
	*EventedPLEG
	runtime *fakeRuntime
	source  *fakeEvents
	cache   podcache.Cache
	events  chan *PodLifecycleEvent
}

func newTestEvented(t *testing.T, capacity int) *testEvented {
	p := &testEvented{runtime: newFakeRuntime(), source: &fakeEvents{}, cache: podcache.New(),
		events: make(chan *PodLifecycleEvent, capacity)}
	p.EventedPLEG = NewEventedPLEG(p.runtime, p.source, p.events, p.cache, clock.RealClock{})
	p.relisting = RelistDuration{RelistPeriod: 10 * time.Millisecond, RelistThreshold: time.Minute}
	p.evented = RelistDuration{RelistPeriod: time.Hour, RelistThreshold: 2 * time.Hour}
	p.settle = 20 * time.Millisecond
	p.minBackoff, p.maxBackoff = 10*time.Millisecond, 40*time.Millisecond
	t.Cleanup(p.Stop)
	return p
}

func (p *testEvented) waitStreaming(t *testing.T, want bool) {
	t.Helper()
	waitFor(t, "streaming to be "+map[bool]string{true: "on", false: "off"}[want], func() bool { return p.streaming.Load() == want })
}

// nextEvents waits for n lifecycle events.
func (p *testEvented) nextEvents(t *testing.T, n int) []PodLifecycleEvent {
	t.Helper()
	var got []PodLifecycleEvent
	timeout := time.After(5 * time.Second)
	for len(got) < n {
		select {
		case e := <-p.events:
			got = append(got, *e)
		case <-timeout:
			t.Fatalf("got events %v, want %d", got, n)
		}
	}
	return got
}

// assertNoRelists checks that the runtime is not listed for a while: the periodic
// relist is stretched.
func (p *testEvented) assertNoRelists(t *testing.T) {
	t.Helper()
	// A relist whose timer fired just before the stream was up may still run: let it.
	time.Sleep(20 * time.Millisecond)
	before := p.runtime.lists()
	time.Sleep(60 * time.Millisecond) // six normal periods
	if n := p.runtime.lists() - before; n != 0 {
		t.Fatalf("%d relists in 60 ms while events flow; the period was not stretched", n)
	}
}

func containerEvent(uid types.UID, id string, typ runtimeapi.ContainerEventType) *runtimeapi.ContainerEventResponse {
	return &runtimeapi.ContainerEventResponse{
		ContainerId: id, ContainerEventType: typ, CreatedAt: time.Now().UnixNano(),
		PodSandboxStatus: &runtimeapi.PodSandboxStatus{Metadata: &runtimeapi.PodSandboxMetadata{Uid: string(uid), Name: "pod-" + string(uid), Namespace: "ns"}},
	}
}

func exitedStatus(uid types.UID, id string, code int) *container.PodStatus {
	return &container.PodStatus{ID: uid, ContainerStatuses: []*container.Status{{
		ID: container.ContainerID{Type: "containerd", ID: id}, State: exited, ExitCode: code}}}
}

func TestEventedEventsReachCacheAndChannel(t *testing.T) {
	p := newTestEvented(t, ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("c1", running)), pod("b", ctr("c2", running)))
	p.Start()
	assertEvents(t, p.nextEvents(t, 2), []PodLifecycleEvent{ev("a", ContainerStarted, "c1"), ev("b", ContainerStarted, "c2")})
	p.waitStreaming(t, true)
	p.assertNoRelists(t)

	// c1 is killed from outside: its stop event alone gets it seen, with the status the
	// relisting PLEG would have stored.
	p.runtime.setPods(pod("a", ctr("c1", exited)), pod("b", ctr("c2", running)))
	p.runtime.setStatus(exitedStatus("a", "c1", 137))
	p.runtime.inspections()
	p.source.send(containerEvent("a", "c1", runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT))
	assertEvents(t, p.nextEvents(t, 1), []PodLifecycleEvent{ev("a", ContainerDied, "c1")})
	if s, err := p.cache.Get("a"); err != nil || len(s.ContainerStatuses) != 1 || s.ContainerStatuses[0].ExitCode != 137 {
		t.Fatalf("cached status of a = %+v, %v; want c1 exited with 137", s, err)
	}
	assertInspections(t, p.runtime.inspections(), map[types.UID]int{"a": 1}) // b is left alone

	// A new pod's sandbox starts; later it is removed, and containerd's deletion event
	// carries no sandbox status: the pod is the one the relists saw the sandbox in.
	p.runtime.setPods(pod("a", ctr("c1", exited)), pod("b", ctr("c2", running)), sandboxPod("c", ctr("sb1", running)))
	p.source.send(containerEvent("c", "sb1", runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT))
	assertEvents(t, p.nextEvents(t, 1), []PodLifecycleEvent{ev("c", ContainerStarted, "sb1")})
	p.runtime.setPods(pod("a", ctr("c1", exited)), pod("b", ctr("c2", running)))
	deleted := containerEvent("c", "sb1", runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	deleted.PodSandboxStatus = nil
	p.source.send(deleted)
	assertEvents(t, p.nextEvents(t, 2), []PodLifecycleEvent{ev("c", ContainerDied, "sb1"), ev("c", ContainerRemoved, "sb1")})

	// An event about a container no relist has seen: every pod is relisted.
	lists := p.runtime.lists()
	stray := containerEvent("", "zz", runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT)
	stray.PodSandboxStatus = nil
	p.source.send(stray)
	waitFor(t, "a full relist", func() bool { return p.runtime.lists() == lists+1 })
	select {
	case e := <-p.events:
		t.Fatalf("unexpected event %v", *e)
	case <-time.After(20 * time.Millisecond):
	}
	if got := testutil.CollectAndCount(eventedConnLatency); got != 1 {
		t.Errorf("kubelet_evented_pleg_connection_latency_seconds: %d series", got)
	}
}

func TestEventedMarksCacheFreshWithoutRelisting(t *testing.T) {
	p := newTestEvented(t, ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("c1", running)))
	p.Start()
	p.waitStreaming(t, true)
	lists := p.runtime.lists()
	// A pod worker synced now and nothing changes: it must not wait for the next
	// (stretched) relist to learn that its status is current.
	assertWoken(t, newerThan(p.cache, "a", time.Now()), "a")
	if n := p.runtime.lists(); n != lists {
		t.Errorf("the runtime was listed %d times to wake the worker", n-lists)
	}
}

// logLines collects what klog writes (V(0) only) for the test's duration.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func captureLogs(t *testing.T) *logLines {
	l := &logLines{}
	klog.SetLogger(funcr.New(func(_, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{}))
	t.Cleanup(klog.ClearLogger)
	return l
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

func (l *logLines) count(substr string) int {
	n := 0
	for _, line := range l.all() {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

func TestEventedStreamBreakFallsBackAndReconnects(t *testing.T) {
	logs := captureLogs(t)
	p := newTestEvented(t, ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("c1", running)))
	p.Start()
	p.waitStreaming(t, true)
	p.nextEvents(t, 1)
	p.assertNoRelists(t)
	errorsBefore := testutil.ToFloat64(eventedConnErrors)

	// The runtime restarts: the stream breaks and it cannot be reopened for a while.
	p.source.setRefuse(status.Error(codes.Unavailable, "connection refused"))
	p.source.breakStream(status.Error(codes.Unavailable, "error reading from server: EOF"))
	p.waitStreaming(t, false)
	lists := p.runtime.lists()
	waitFor(t, "relisting every period again", func() bool { return p.runtime.lists() >= lists+3 })
	waitFor(t, "attempts to reopen the stream", func() bool { return p.source.openCount() >= 4 })
	if ok, err := p.Healthy(); !ok {
		t.Errorf("unhealthy while relisting: %v", err)
	}

	// What changes meanwhile is seen by relisting.
	p.runtime.setPods(pod("a", ctr("c1", exited)))
	assertEvents(t, p.nextEvents(t, 1), []PodLifecycleEvent{ev("a", ContainerDied, "c1")})

	// The runtime is back: the stream is reopened and trusted again.
	p.source.setRefuse(nil)
	p.waitStreaming(t, true)
	p.assertNoRelists(t)
	p.runtime.setPods(pod("a", ctr("c1", exited), ctr("c2", running)))
	p.source.send(containerEvent("a", "c2", runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT))
	assertEvents(t, p.nextEvents(t, 1), []PodLifecycleEvent{ev("a", ContainerStarted, "c2")})

	if d := testutil.ToFloat64(eventedConnErrors) - errorsBefore; d < 4 {
		t.Errorf("kubelet_evented_pleg_connection_error_count rose by %v, want one per failed attempt", d)
	}
	// One line when it broke and one when it came back; the failed attempts are quiet.
	if n := logs.count("container event stream broke"); n != 1 {
		t.Errorf("%d lines about the break, want 1", n)
	}
	if n := logs.count("container event stream is back"); n != 1 {
		t.Errorf("%d lines about the recovery, want 1", n)
	}
	if lines := logs.all(); len(lines) != 3 {
		t.Errorf("log lines %q; want the start, the break and the recovery", lines)
	}
}

func TestEventedUnimplementedRelistsOnly(t *testing.T) {
	logs := captureLogs(t)
	p := newTestEvented(t, ChannelCapacity)
	p.source.setRefuse(status.Error(codes.Unimplemented, "unknown method GetContainerEvents"))
	p.runtime.setPods(pod("a", ctr("c1", running)))
	p.Start()
	p.runMu.Lock()
	done := p.done
	p.runMu.Unlock()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("still watching a runtime that has no event stream")
	}
	lists := p.runtime.lists()
	waitFor(t, "relisting every period", func() bool { return p.runtime.lists() >= lists+3 })
	if n := p.source.openCount(); n != 1 {
		t.Errorf("%d attempts to open the stream, want 1", n)
	}
	if p.streaming.Load() {
		t.Error("streaming without a stream")
	}
	if lines := logs.all(); len(lines) != 1 || !strings.Contains(lines[0], "does not implement GetContainerEvents") {
		t.Errorf("log lines %q; want one saying the runtime has no event stream", lines)
	}
	if ok, err := p.Healthy(); !ok {
		t.Errorf("unhealthy while relisting: %v", err)
	}
}

func TestEventedHealthy(t *testing.T) {
	p := newTestEvented(t, 2)
	if ok, err := p.Healthy(); ok || err == nil || err.Error() != "pleg has yet to be successful" {
		t.Fatalf("before any relist: Healthy() = %v, %v", ok, err)
	}
	p.runtime.setPods(pod("a", ctr("c1", running)))
	p.Start()
	p.waitStreaming(t, true)
	if ok, err := p.Healthy(); !ok {
		t.Fatalf("streaming: Healthy() = %v, %v", ok, err)
	}

	// The kubelet loop stops reading: a full event channel makes the evented PLEG
	// unhealthy, as upstream's.
	for len(p.events) < cap(p.events) {
		p.events <- &PodLifecycleEvent{ID: "x", Type: PodSync}
	}
	if ok, err := p.Healthy(); ok || err == nil || err.Error() != "EventedPLEG: pleg event channel out of capacity" {
		t.Fatalf("full channel: Healthy() = %v, %v", ok, err)
	}
	p.nextEvents(t, 1)
	if ok, err := p.Healthy(); !ok {
		t.Fatalf("room again: Healthy() = %v, %v", ok, err)
	}

	// Relisting only (the runtime lost its stream), only the relist age counts.
	p.source.setRefuse(status.Error(codes.Unimplemented, "no"))
	p.source.breakStream(errors.New("broken"))
	p.waitStreaming(t, false)
	for len(p.events) < cap(p.events) {
		p.events <- &PodLifecycleEvent{ID: "x", Type: PodSync}
	}
	if ok, err := p.Healthy(); !ok {
		t.Fatalf("relisting with a full channel: Healthy() = %v, %v", ok, err)
	}
}

func TestEventedPLEGEnabled(t *testing.T) {
	cases := []struct {
		gates map[string]bool
		want  bool
	}{
		{nil, true},
		{map[string]bool{"Other": true}, true},
		{map[string]bool{EventedPLEGGate: true}, true},
		{map[string]bool{EventedPLEGGate: false}, false},
	}
	for _, c := range cases {
		if got := EventedPLEGEnabled(c.gates); got != c.want {
			t.Errorf("EventedPLEGEnabled(%v) = %v, want %v", c.gates, got, c.want)
		}
	}
}

func TestNewChoosesByGate(t *testing.T) {
	rt, ch, cache, clk := newFakeRuntime(), make(chan *PodLifecycleEvent, 1), podcache.New(), testingclock.NewFakeClock(t0)
	if _, ok := New(nil, rt, &fakeEvents{}, ch, cache, clk).(*EventedPLEG); !ok {
		t.Error("default: not an EventedPLEG")
	}
	if _, ok := New(map[string]bool{EventedPLEGGate: false}, rt, &fakeEvents{}, ch, cache, clk).(*GenericPLEG); !ok {
		t.Error("EventedPLEG=false: not a GenericPLEG")
	}
	if _, ok := New(nil, rt, nil, ch, cache, clk).(*GenericPLEG); !ok {
		t.Error("no event source: not a GenericPLEG")
	}
}
