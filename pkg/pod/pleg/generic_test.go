package pleg

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/pod/podcache"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	running = container.ContainerStateRunning
	exited  = container.ContainerStateExited
	created = container.ContainerStateCreated
	unknown = container.ContainerStateUnknown
)

// testPLEG is a GenericPLEG over a fake runtime, a fake clock and a real pod cache.
type testPLEG struct {
	*GenericPLEG
	runtime *fakeRuntime
	clock   *testingclock.FakeClock
	cache   podcache.Cache
	events  chan *PodLifecycleEvent
}

func newTestPLEG(capacity int) *testPLEG {
	p := &testPLEG{
		runtime: newFakeRuntime(),
		clock:   testingclock.NewFakeClock(t0),
		cache:   podcache.New(),
		events:  make(chan *PodLifecycleEvent, capacity),
	}
	p.GenericPLEG = NewGenericPLEG(p.runtime, p.events, nil, p.cache, p.clock).(*GenericPLEG)
	return p
}

// relistAgain steps the clock one period and relists, as the loop would.
func (p *testPLEG) relistAgain() {
	p.clock.Step(RelistPeriod)
	p.Relist()
}

// drain returns the events waiting in the channel.
func (p *testPLEG) drain() []PodLifecycleEvent {
	var got []PodLifecycleEvent
	for {
		select {
		case e := <-p.events:
			got = append(got, *e)
		default:
			return got
		}
	}
}

func ctr(id string, state container.State) *container.Container {
	return &container.Container{ID: container.ContainerID{Type: "containerd", ID: id}, State: state}
}

func pod(uid types.UID, containers ...*container.Container) *container.Pod {
	return &container.Pod{ID: uid, Name: "pod-" + string(uid), Namespace: "ns", Containers: containers}
}

func sandboxPod(uid types.UID, sandboxes ...*container.Container) *container.Pod {
	return &container.Pod{ID: uid, Name: "pod-" + string(uid), Namespace: "ns", Sandboxes: sandboxes}
}

func ev(uid types.UID, t PodLifeCycleEventType, id string) PodLifecycleEvent {
	return PodLifecycleEvent{ID: uid, Type: t, Data: id}
}

// assertEvents compares events ignoring the order of pods (a relist visits them in map
// order) but not the order within a pod (a container's Died must precede its Removed).
func assertEvents(t *testing.T, got, want []PodLifecycleEvent) {
	t.Helper()
	byPod := func(events []PodLifecycleEvent) {
		sort.SliceStable(events, func(i, j int) bool { return events[i].ID < events[j].ID })
	}
	byPod(got)
	byPod(want)
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events:\n got %v\nwant %v", got, want)
	}
}

func assertInspections(t *testing.T, got, want map[types.UID]int) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GetPodStatus calls per pod = %v, want %v", got, want)
	}
}

func TestRelistEventsForContainerTransitions(t *testing.T) {
	const uid = "p1"
	cases := []struct {
		name          string
		before, after *container.Pod // nil: the runtime has nothing of the pod
		want          []PodLifeCycleEventType
		// wantInspected: the pod's status is read (a vanished pod is dropped from the cache
		// instead).
		wantInspected bool
	}{
		{"first seen running", nil, pod(uid, ctr("c1", running)), []PodLifeCycleEventType{ContainerStarted}, true},
		{"first seen exited", nil, pod(uid, ctr("c1", exited)), []PodLifeCycleEventType{ContainerDied}, true},
		{"first seen created: changed, not sent", nil, pod(uid, ctr("c1", created)), nil, true},
		{"created to running", pod(uid, ctr("c1", created)), pod(uid, ctr("c1", running)), []PodLifeCycleEventType{ContainerStarted}, true},
		{"running to exited", pod(uid, ctr("c1", running)), pod(uid, ctr("c1", exited)), []PodLifeCycleEventType{ContainerDied}, true},
		{"exited to removed", pod(uid, ctr("c1", exited), ctr("c2", running)), pod(uid, ctr("c2", running)), []PodLifeCycleEventType{ContainerRemoved}, true},
		{"running to removed", pod(uid, ctr("c1", running), ctr("c2", running)), pod(uid, ctr("c2", running)), []PodLifeCycleEventType{ContainerDied, ContainerRemoved}, true},
		{"running to unknown: changed, not sent", pod(uid, ctr("c1", running)), pod(uid, ctr("c1", unknown)), nil, true},
		{"unknown to removed", pod(uid, ctr("c1", unknown), ctr("c2", running)), pod(uid, ctr("c2", running)), []PodLifeCycleEventType{ContainerDied, ContainerRemoved}, true},
		{"pod gone while running", pod(uid, ctr("c1", running)), nil, []PodLifeCycleEventType{ContainerDied, ContainerRemoved}, false},
		{"pod gone after exit", pod(uid, ctr("c1", exited)), nil, []PodLifeCycleEventType{ContainerRemoved}, false},
		{"unchanged running", pod(uid, ctr("c1", running)), pod(uid, ctr("c1", running)), nil, false},
		{"unchanged exited", pod(uid, ctr("c1", exited)), pod(uid, ctr("c1", exited)), nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPLEG(ChannelCapacity)
			if tc.before != nil {
				p.runtime.setPods(tc.before)
			}
			p.Relist()
			p.drain()
			p.runtime.inspections()

			p.runtime.setPods()
			if tc.after != nil {
				p.runtime.setPods(tc.after)
			}
			p.relistAgain()

			var want []PodLifecycleEvent
			for _, typ := range tc.want {
				want = append(want, ev(uid, typ, "c1"))
			}
			assertEvents(t, p.drain(), want)
			var wantCalls map[types.UID]int
			if tc.wantInspected {
				wantCalls = map[types.UID]int{uid: 1}
			}
			assertInspections(t, p.runtime.inspections(), wantCalls)
		})
	}
}

func TestEventsForReportsUnreliableStatesAsChanged(t *testing.T) {
	cases := []struct {
		old, current plegState
		want         []PodLifeCycleEventType
	}{
		{plegNonExistent, plegUnknown, []PodLifeCycleEventType{ContainerChanged}},
		{plegRunning, plegUnknown, []PodLifeCycleEventType{ContainerChanged}},
		{plegExited, plegUnknown, []PodLifeCycleEventType{ContainerChanged}},
		{plegUnknown, plegRunning, []PodLifeCycleEventType{ContainerStarted}},
		{plegUnknown, plegExited, []PodLifeCycleEventType{ContainerDied}},
		{plegUnknown, plegNonExistent, []PodLifeCycleEventType{ContainerDied, ContainerRemoved}},
		{plegUnknown, plegUnknown, nil},
	}
	for _, tc := range cases {
		var got []PodLifeCycleEventType
		for _, e := range eventsFor("p", "c", tc.old, tc.current) {
			if e.ID != "p" || e.Data != "c" {
				t.Errorf("%s -> %s: event %+v is not about pod p, container c", tc.old, tc.current, e)
			}
			got = append(got, e.Type)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s -> %s: events %v, want %v", tc.old, tc.current, got, tc.want)
		}
	}
}

func TestToPLEGStateFoldsCreatedIntoUnknown(t *testing.T) {
	cases := map[container.State]plegState{
		running: plegRunning, exited: plegExited, created: plegUnknown, unknown: plegUnknown,
		"paused": plegUnknown,
	}
	for in, want := range cases {
		if got := toPLEGState(in); got != want {
			t.Errorf("toPLEGState(%q) = %q, want %q", in, got, want)
		}
	}
}

// relistingScenario is upstream's TestRelisting, run with containers or with sandboxes.
func relistingScenario(t *testing.T, build func(types.UID, ...*container.Container) *container.Pod) {
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setPods(
		build("1234", ctr("c1", exited), ctr("c2", running), ctr("c3", unknown)),
		build("4567", ctr("c1", exited)),
	)
	p.Relist()
	assertEvents(t, p.drain(), []PodLifecycleEvent{
		ev("1234", ContainerDied, "c1"), ev("1234", ContainerStarted, "c2"),
		ev("4567", ContainerDied, "c1"),
	})

	p.relistAgain()
	assertEvents(t, p.drain(), nil)

	p.runtime.setPods(
		build("1234", ctr("c2", exited), ctr("c3", running)),
		build("4567", ctr("c4", running)),
	)
	p.relistAgain()
	// Within a pod, in listing order: the old listing's entries first, then the new ones.
	assertEvents(t, p.drain(), []PodLifecycleEvent{
		ev("1234", ContainerRemoved, "c1"), ev("1234", ContainerDied, "c2"), ev("1234", ContainerStarted, "c3"),
		ev("4567", ContainerRemoved, "c1"), ev("4567", ContainerStarted, "c4"),
	})
}

func TestRelistContainers(t *testing.T) { relistingScenario(t, pod) }

func TestRelistSandboxes(t *testing.T) { relistingScenario(t, sandboxPod) }

func TestRelistSandboxAndContainersTogether(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setPods(&container.Pod{ID: "a", Sandboxes: []*container.Container{ctr("s1", running)}})
	p.Relist()
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev("a", ContainerStarted, "s1")})

	p.runtime.setPods(&container.Pod{ID: "a",
		Sandboxes:  []*container.Container{ctr("s1", running)},
		Containers: []*container.Container{ctr("c1", running)},
	})
	p.relistAgain()
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev("a", ContainerStarted, "c1")})

	// The pod is killed: the sandbox stops after its container; both are seen in one relist.
	p.runtime.setPods(&container.Pod{ID: "a",
		Sandboxes:  []*container.Container{ctr("s1", exited)},
		Containers: []*container.Container{ctr("c1", exited)},
	})
	p.relistAgain()
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev("a", ContainerDied, "c1"), ev("a", ContainerDied, "s1")})

	// Garbage collection removes everything.
	p.runtime.setPods()
	p.relistAgain()
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev("a", ContainerRemoved, "c1"), ev("a", ContainerRemoved, "s1")})
}

func TestRelistDetectsDeathsBetweenRelists(t *testing.T) {
	// Several relists before the change must not disturb the PLEG's records.
	for _, relists := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d relists", relists), func(t *testing.T) {
			p := newTestPLEG(ChannelCapacity)
			p.runtime.setPods(pod("a", ctr("c1", running), ctr("c2", running), ctr("c3", exited)), pod("b", ctr("c4", running)))
			p.Relist()
			for i := 1; i < relists; i++ {
				p.relistAgain()
			}
			p.drain()

			// c2 stopped and was removed, c3 was garbage collected, pod b vanished whole.
			p.runtime.setPods(pod("a", ctr("c1", running)))
			p.relistAgain()
			assertEvents(t, p.drain(), []PodLifecycleEvent{
				ev("a", ContainerDied, "c2"), ev("a", ContainerRemoved, "c2"), ev("a", ContainerRemoved, "c3"),
				ev("b", ContainerDied, "c4"), ev("b", ContainerRemoved, "c4"),
			})
		})
	}
}

func TestRelistInspectsOnlyChangedPods(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	uid := func(i int) types.UID { return types.UID(fmt.Sprintf("pod-%d", i)) }
	pods := make([]*container.Pod, 100)
	for i := range pods {
		pods[i] = pod(uid(i), ctr(fmt.Sprintf("c%d", i), running))
	}
	p.runtime.setPods(pods...)
	p.Relist()
	all := map[types.UID]int{}
	for i := range pods {
		all[uid(i)] = 1
	}
	assertInspections(t, p.runtime.inspections(), all)
	if got := len(p.drain()); got != 100 {
		t.Fatalf("first relist sent %d events, want 100 ContainerStarted", got)
	}

	for i := 0; i < 3; i++ {
		p.relistAgain()
		assertInspections(t, p.runtime.inspections(), nil)
		assertEvents(t, p.drain(), nil)
	}

	changed := append([]*container.Pod(nil), pods...)
	changed[42] = pod(uid(42), ctr("c42", exited))
	p.runtime.setPods(changed...)
	p.relistAgain()
	assertInspections(t, p.runtime.inspections(), map[types.UID]int{uid(42): 1})
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev(uid(42), ContainerDied, "c42")})
}

func TestRelistReinspectsPodWhoseStatusFailed(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	boom := errors.New("unable to get status")
	p.runtime.setPods(pod("a", ctr("c1", running)), pod("b", ctr("c2", running)))
	p.runtime.setStatusErr("b", boom)

	p.Relist()
	// No event for b: its sync would have no status to act on.
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev("a", ContainerStarted, "c1")})
	if _, err := p.cache.Get("b"); err != boom {
		t.Errorf("cache error for b = %v, want %v", err, boom)
	}
	if s, err := p.cache.Get("a"); err != nil || s.ID != "a" || s.Name != "pod-a" {
		t.Errorf("cache for a = %+v, %v; want its status", s, err)
	}
	p.runtime.inspections()

	// Nothing changed, yet b is inspected again; still failing, still no event.
	p.relistAgain()
	assertInspections(t, p.runtime.inspections(), map[types.UID]int{"b": 1})
	assertEvents(t, p.drain(), nil)

	// The runtime answers now: b's event, held back so far, goes out.
	p.runtime.setStatusErr("b", nil)
	p.relistAgain()
	assertInspections(t, p.runtime.inspections(), map[types.UID]int{"b": 1})
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev("b", ContainerStarted, "c2")})
	if s, err := p.cache.Get("b"); err != nil || s.ID != "b" {
		t.Errorf("cache for b = %+v, %v; want its status and no error", s, err)
	}

	p.relistAgain()
	assertInspections(t, p.runtime.inspections(), nil)
}

// Upstream's TestRelistWithReinspection: a change seen while inspection fails and undone
// before the next relist still gets the pod reinspected, and sends nothing.
func TestRelistReinspectsAfterTransientChange(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("infra", running)))
	p.Relist()
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev("a", ContainerStarted, "infra")})

	boom := errors.New("inspection error")
	p.runtime.setPods(pod("a", ctr("infra", running), ctr("transient", unknown)))
	p.runtime.setStatusErr("a", boom)
	p.relistAgain()
	assertEvents(t, p.drain(), nil)
	if _, err := p.cache.Get("a"); err != boom {
		t.Fatalf("cache error = %v, want %v", err, boom)
	}
	p.runtime.inspections()

	p.runtime.setPods(pod("a", ctr("infra", running)))
	p.runtime.setStatusErr("a", nil)
	p.relistAgain()
	assertInspections(t, p.runtime.inspections(), map[types.UID]int{"a": 1})
	assertEvents(t, p.drain(), nil)
	if _, err := p.cache.Get("a"); err != nil {
		t.Fatalf("cache error after reinspection = %v, want nil", err)
	}
}

func TestRelistStoresStatusAndDropsVanishedPods(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	status := &container.PodStatus{
		ID: "a", Name: "pod-a", Namespace: "ns", IPs: []string{"10.88.0.7"},
		ContainerStatuses: []*container.Status{{ID: container.ContainerID{Type: "containerd", ID: "c1"}, State: running}},
	}
	p.runtime.setStatus(status)
	p.runtime.setPods(pod("a", ctr("c1", running)))
	p.Relist()
	if got, err := p.cache.Get("a"); err != nil || !reflect.DeepEqual(got, status) {
		t.Fatalf("cache = %+v, %v; want %+v", got, err, status)
	}

	p.runtime.inspections()

	p.runtime.setPods()
	p.relistAgain()
	if got, err := p.cache.Get("a"); err != nil || len(got.IPs) != 0 || len(got.ContainerStatuses) != 0 {
		t.Fatalf("cache after the pod vanished = %+v, %v; want the empty status", got, err)
	}
	assertInspections(t, p.runtime.inspections(), nil) // nothing left to inspect
}

func TestRelistKeepsIPsOfPodWhoseSandboxExited(t *testing.T) {
	sandbox := func(state runtimeapi.PodSandboxState) []*runtimeapi.PodSandboxStatus {
		return []*runtimeapi.PodSandboxStatus{{Id: "s1", State: state}}
	}
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setStatus(&container.PodStatus{ID: "a", IPs: []string{"10.88.0.5", "fd00::5"},
		SandboxStatuses: sandbox(runtimeapi.PodSandboxState_SANDBOX_READY)})
	p.runtime.setPods(pod("a", ctr("c1", running)))
	p.Relist()

	// Torn down: the network (and the IP in the status) is gone, the API keeps showing it.
	p.runtime.setStatus(&container.PodStatus{ID: "a", SandboxStatuses: sandbox(runtimeapi.PodSandboxState_SANDBOX_NOTREADY)})
	p.runtime.setPods(pod("a", ctr("c1", exited)))
	p.relistAgain()
	if got, _ := p.cache.Get("a"); !reflect.DeepEqual(got.IPs, []string{"10.88.0.5", "fd00::5"}) {
		t.Fatalf("IPs after the sandbox exited = %v, want the old ones", got.IPs)
	}

	// A ready sandbox without an IP is believed: the old IP is not carried over.
	p.runtime.setStatus(&container.PodStatus{ID: "a", SandboxStatuses: sandbox(runtimeapi.PodSandboxState_SANDBOX_READY)})
	p.runtime.setPods(pod("a", ctr("c1", exited), ctr("c2", running)))
	p.relistAgain()
	if got, _ := p.cache.Get("a"); len(got.IPs) != 0 {
		t.Fatalf("IPs with a ready sandbox = %v, want none", got.IPs)
	}
}

// newerThan runs cache.GetNewerThan in the background: a pod worker waiting for a status
// newer than its last sync.
func newerThan(c podcache.Cache, uid types.UID, minTime time.Time) <-chan *container.PodStatus {
	ch := make(chan *container.PodStatus, 1)
	go func() {
		s, _ := c.GetNewerThan(uid, minTime)
		ch <- s
	}()
	return ch
}

func assertWaiting(t *testing.T, ch <-chan *container.PodStatus, why string) {
	t.Helper()
	select {
	case s := <-ch:
		t.Fatalf("GetNewerThan returned %+v %s", s, why)
	case <-time.After(50 * time.Millisecond):
	}
}

func assertWoken(t *testing.T, ch <-chan *container.PodStatus, uid types.UID) {
	t.Helper()
	select {
	case s := <-ch:
		if s == nil || s.ID != uid {
			t.Fatalf("GetNewerThan returned %+v, want pod %s's status", s, uid)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("GetNewerThan still waiting after a relist")
	}
}

func TestRelistAdvancesCacheTime(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("c1", running)))
	p.Relist()
	p.drain()
	p.runtime.inspections()

	// A pod worker synced after that relist; nothing changes in the runtime since, so only
	// the cache's global time can wake it.
	p.clock.Step(RelistPeriod / 2)
	waiting := newerThan(p.cache, "a", p.clock.Now())
	assertWaiting(t, waiting, "before any relist after the sync")
	p.relistAgain()
	assertInspections(t, p.runtime.inspections(), nil)
	assertWoken(t, waiting, "a")

	// A failed relist proves nothing about the runtime: the cache time stays.
	p.runtime.setPodsErr(errors.New("runtime down"))
	p.clock.Step(RelistPeriod / 2)
	waiting = newerThan(p.cache, "a", p.clock.Now())
	p.relistAgain()
	assertWaiting(t, waiting, "after a relist that could not list the runtime")
	p.runtime.setPodsErr(nil)
	p.relistAgain()
	assertWoken(t, waiting, "a")
	assertInspections(t, p.runtime.inspections(), nil)
}

func TestHealthy(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	assertHealth := func(wantOK bool, wantErr string) {
		t.Helper()
		ok, err := p.Healthy()
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if ok != wantOK || gotErr != wantErr {
			t.Fatalf("Healthy() = %v, %q; want %v, %q", ok, gotErr, wantOK, wantErr)
		}
	}
	assertHealth(false, "pleg has yet to be successful")
	p.clock.Step(10 * time.Minute)
	assertHealth(false, "pleg has yet to be successful")

	p.Relist()
	p.clock.Step(time.Minute)
	assertHealth(true, "")
	p.clock.Step(2 * time.Minute) // exactly the threshold is still fine
	assertHealth(true, "")
	p.clock.Step(time.Second)
	assertHealth(false, "pleg was last seen active 3m1s ago; threshold is 3m0s")
	if got := testutil.ToFloat64(metrics.PLEGLastSeen); got != float64(t0.Add(10*time.Minute).Unix()) {
		t.Errorf("kubelet_pleg_last_seen_seconds = %v, want the last relist's time", got)
	}

	// Only a relist that listed the runtime counts.
	p.runtime.setPodsErr(errors.New("runtime down"))
	p.Relist()
	assertHealth(false, "pleg was last seen active 3m1s ago; threshold is 3m0s")
	p.runtime.setPodsErr(nil)
	p.Relist()
	assertHealth(true, "")

	// A longer threshold (an evented PLEG's fallback) applies at once.
	p.Update(&RelistDuration{RelistPeriod: EventedRelistPeriod, RelistThreshold: EventedRelistThreshold})
	p.clock.Step(9 * time.Minute)
	assertHealth(true, "")
}

func TestEventChannelFullDiscardsEvents(t *testing.T) {
	p := newTestPLEG(2)
	discardedBefore := testutil.ToFloat64(metrics.PLEGDiscardEvents)
	// Three events to send; c4's ContainerChanged is never sent so cannot be discarded.
	p.runtime.setPods(pod("a", ctr("c1", running), ctr("c2", running)), pod("b", ctr("c3", running), ctr("c4", unknown)))

	done := make(chan struct{})
	go func() {
		p.Relist()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Relist blocked on the full event channel")
	}

	all := []PodLifecycleEvent{ev("a", ContainerStarted, "c1"), ev("a", ContainerStarted, "c2"), ev("b", ContainerStarted, "c3")}
	got := p.drain()
	if len(got) != 2 {
		t.Fatalf("channel held %d events, want 2 (its capacity)", len(got))
	}
	for _, e := range got {
		if !containsEvent(all, e) {
			t.Errorf("unexpected event %v", e)
		}
	}
	if d := testutil.ToFloat64(metrics.PLEGDiscardEvents) - discardedBefore; d != 1 {
		t.Errorf("kubelet_pleg_discard_events rose by %v, want 1", d)
	}
	// The relist was still complete: both pods are cached and nothing is sent again.
	assertInspections(t, p.runtime.inspections(), map[types.UID]int{"a": 1, "b": 1})
	p.relistAgain()
	assertEvents(t, p.drain(), nil)
}

func containsEvent(events []PodLifecycleEvent, e PodLifecycleEvent) bool {
	for _, x := range events {
		if x == e {
			return true
		}
	}
	return false
}

// waitFor polls cond: the relist loop runs on its own goroutine.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestStartStop(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("c1", running)))
	p.Stop() // before Start: harmless

	p.Start()
	p.Start() // a second loop would relist twice per period
	defer p.Stop()
	waitFor(t, "the first relist", func() bool { return p.clock.Waiters() > 0 })
	time.Sleep(20 * time.Millisecond) // give a wrongly started second loop time to show
	if n, w := p.runtime.lists(), p.clock.Waiters(); n != 1 || w != 1 {
		t.Fatalf("after Start twice: %d relists and %d loops waiting, want 1 and 1", n, w)
	}
	select {
	case e := <-p.events:
		if *e != ev("a", ContainerStarted, "c1") {
			t.Fatalf("event %v, want a's ContainerStarted", *e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event from the first relist")
	}
	if ok, err := p.Healthy(); !ok {
		t.Fatalf("unhealthy after a relist: %v", err)
	}

	p.clock.Step(RelistPeriod)
	// Wait for the loop to be back waiting, so Stop finds it there.
	waitFor(t, "the relist one period later", func() bool { return p.runtime.lists() == 2 && p.clock.Waiters() == 1 })

	p.Stop()
	p.Stop()
	waitFor(t, "the loop to stop", func() bool { return p.clock.Waiters() == 0 })
	p.clock.Step(10 * RelistPeriod)
	time.Sleep(20 * time.Millisecond)
	if n := p.runtime.lists(); n != 2 {
		t.Fatalf("%d relists after Stop, want 2", n)
	}

	p.Start() // restartable
	waitFor(t, "a relist after restart", func() bool { return p.runtime.lists() == 3 })
}

func TestUpdateCache(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	if err, updated := p.UpdateCache(nil, "a"); err == nil || err.Error() != "pod cannot be nil" || updated {
		t.Fatalf("UpdateCache(nil) = %v, %v; want the error and false", err, updated)
	}

	p.runtime.setStatus(&container.PodStatus{ID: "a", IPs: []string{"10.88.0.9"}})
	if err, updated := p.UpdateCache(pod("a", ctr("c1", running)), "a"); err != nil || !updated {
		t.Fatalf("UpdateCache = %v, %v; want nil, true", err, updated)
	}
	if s, _ := p.cache.Get("a"); len(s.IPs) != 1 || s.IPs[0] != "10.88.0.9" {
		t.Fatalf("cache after UpdateCache = %+v", s)
	}

	// An entry read later (say by a relist racing with the caller) is kept.
	p.cache.Set("a", &container.PodStatus{ID: "a", Name: "newer"}, nil, t0.Add(time.Hour))
	if err, updated := p.UpdateCache(pod("a", ctr("c1", running)), "a"); err != nil || updated {
		t.Fatalf("UpdateCache over a newer entry = %v, %v; want nil, false", err, updated)
	}
	if s, _ := p.cache.Get("a"); s.Name != "newer" {
		t.Fatalf("the newer entry was overwritten: %+v", s)
	}

	boom := errors.New("boom")
	p.runtime.setStatusErr("b", boom)
	if err, updated := p.UpdateCache(pod("b", ctr("c2", running)), "b"); err != boom || !updated {
		t.Fatalf("UpdateCache of a failing pod = %v, %v; want %v, true", err, updated, boom)
	}
	if _, err := p.cache.Get("b"); err != boom {
		t.Fatalf("cache error = %v, want %v", err, boom)
	}
	assertEvents(t, p.drain(), nil) // UpdateCache only fills the cache
}

func TestRelistCountsRunningPodsAndContainers(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setPods(
		&container.Pod{ID: "a",
			Containers: []*container.Container{ctr("c1", running), ctr("c2", running), ctr("c3", unknown), ctr("c4", created)},
			Sandboxes:  []*container.Container{ctr("s1", running), ctr("s2", exited)},
		},
		&container.Pod{ID: "b",
			Containers: []*container.Container{ctr("c5", exited)},
			Sandboxes:  []*container.Container{ctr("s3", exited)},
		},
	)
	p.Relist()
	assertGauge := func(name string, g prometheus.Gauge, want float64) {
		t.Helper()
		if got := testutil.ToFloat64(g); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	assertGauge("running_pods", metrics.RunningPodCount, 1)
	for state, want := range map[container.State]float64{running: 2, unknown: 1, created: 1, exited: 1} {
		assertGauge("running_containers/"+string(state), metrics.RunningContainerCount.WithLabelValues(string(state)), want)
	}

	// Emptied states go to zero instead of keeping their last count.
	p.runtime.setPods()
	p.relistAgain()
	assertGauge("running_pods", metrics.RunningPodCount, 0)
	assertGauge("running_containers/running", metrics.RunningContainerCount.WithLabelValues(string(running)), 0)
}

func TestRequestRelistRelistsOnePodBetweenPeriods(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("c1", running)), pod("b", ctr("c2", running)))
	p.Start()
	defer p.Stop()
	waitFor(t, "the first relist", func() bool { return p.runtime.lists() == 1 && p.clock.Waiters() == 1 })
	p.drain()

	// A request from before the last full relist is stale: nothing happens.
	p.ask(func(w *askedWork) { w.pods = map[types.UID]time.Time{"a": t0.Add(-time.Second)} })
	time.Sleep(20 * time.Millisecond)
	if n := p.runtime.lists(); n != 1 {
		t.Fatalf("a stale request relisted (%d lists)", n)
	}

	// a's container exits and b's too, but only a is asked for.
	p.runtime.setPods(pod("a", ctr("c1", exited)), pod("b", ctr("c2", exited)))
	waiting := newerThan(p.cache, "a", t0) // newer than the first relist
	p.clock.Step(time.Millisecond)
	p.RequestRelist("a")
	waitFor(t, "the one-pod relist", func() bool { return p.runtime.lists() == 2 })
	assertWoken(t, waiting, "a")
	var got []PodLifecycleEvent
	waitFor(t, "a's event", func() bool { got = append(got, p.drain()...); return len(got) > 0 })
	assertEvents(t, got, []PodLifecycleEvent{ev("a", ContainerDied, "c1")})

	// The next full relist still finds b's change (its record was left alone) and not a's
	// again.
	p.clock.Step(RelistPeriod)
	waitFor(t, "the periodic relist", func() bool { return p.runtime.lists() == 3 })
	got = nil
	waitFor(t, "b's event", func() bool { got = append(got, p.drain()...); return len(got) > 0 })
	assertEvents(t, got, []PodLifecycleEvent{ev("b", ContainerDied, "c2")})
}
