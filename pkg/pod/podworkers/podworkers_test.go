package podworkers

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/pod/podcache"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// fakeSyncer records calls and can block or fail on demand.
type fakeSyncer struct {
	mu        sync.Mutex
	calls     []string
	inFlight  map[types.UID]int
	overlap   bool
	block     chan struct{} // when non-nil, SyncPod waits on it (or on ctx)
	syncErr   error
	terminal  bool
	killGrace []int64
	// termFailures makes the next SyncTerminatingPod calls fail.
	termFailures int
	// termBlock, when non-nil, makes SyncTerminatingPod wait on it.
	termBlock chan struct{}
	// onTerminating runs at the start of SyncTerminatingPod.
	onTerminating func()
}

func (f *fakeSyncer) record(uid types.UID, what string) func() {
	f.mu.Lock()
	f.calls = append(f.calls, string(uid)+":"+what)
	f.inFlight[uid]++
	if f.inFlight[uid] > 1 {
		f.overlap = true
	}
	f.mu.Unlock()
	return func() { f.mu.Lock(); f.inFlight[uid]--; f.mu.Unlock() }
}

func (f *fakeSyncer) SyncPod(ctx context.Context, _ SyncPodType, pod *v1.Pod, _ *container.PodStatus) (bool, func(), error) {
	defer f.record(pod.UID, "sync")()
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return false, nil, ctx.Err()
		}
	}
	postSync := func() { f.record(pod.UID, "post-sync")() }
	return f.terminal, postSync, f.syncErr
}

func (f *fakeSyncer) SyncTerminatingPod(_ context.Context, pod *v1.Pod, _ *container.PodStatus, grace *int64, _ func(*v1.PodStatus)) error {
	defer f.record(pod.UID, "terminating")()
	if f.onTerminating != nil {
		f.onTerminating()
	}
	if f.termBlock != nil {
		<-f.termBlock
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killGrace = append(f.killGrace, *grace)
	if f.termFailures > 0 {
		f.termFailures--
		return errors.New("container still running")
	}
	return nil
}

func (f *fakeSyncer) SyncTerminatingRuntimePod(_ context.Context, rp *container.Pod) error {
	defer f.record(rp.ID, "terminating-runtime")()
	return nil
}

func (f *fakeSyncer) SyncTerminatedPod(_ context.Context, pod *v1.Pod, _ *container.PodStatus) error {
	defer f.record(pod.UID, "terminated")()
	return nil
}

func (f *fakeSyncer) count(uid types.UID, what string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == string(uid)+":"+what {
			n++
		}
	}
	return n
}

func setup(t *testing.T) (*PodWorkers, *fakeSyncer, podcache.Cache) {
	t.Helper()
	f := &fakeSyncer{inFlight: map[types.UID]int{}}
	cache := podcache.New()
	cache.UpdateTime(time.Now())
	w := New(f, cache, NewWorkQueue(clock.RealClock{}), clock.RealClock{}, time.Minute)
	// Keep the cache fresh as a PLEG would, so GetNewerThan never waits long.
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				cache.UpdateTime(time.Now())
			}
		}
	}()
	t.Cleanup(func() { close(stop) })
	return w, f, cache
}

func testPod(uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: uid, Namespace: "ns"},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](30)}}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestSyncsOfOnePodNeverOverlapAndPodsRunConcurrently(t *testing.T) {
	w, f, _ := setup(t)
	f.block = make(chan struct{})
	a, b := testPod("a"), testPod("b")
	w.UpdatePod(UpdatePodOptions{Pod: a, UpdateType: SyncPodCreate})
	w.UpdatePod(UpdatePodOptions{Pod: b, UpdateType: SyncPodCreate})
	// Both pods are inside SyncPod at once: different pods are concurrent.
	eventually(t, "both pods syncing", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.inFlight["a"] == 1 && f.inFlight["b"] == 1
	})
	for i := 0; i < 5; i++ {
		w.UpdatePod(UpdatePodOptions{Pod: a, UpdateType: SyncPodUpdate})
	}
	close(f.block)
	eventually(t, "the queued update for a", func() bool { return f.count("a", "sync") == 2 })
	time.Sleep(20 * time.Millisecond)
	if f.overlap {
		t.Fatal("two syncs of one pod overlapped")
	}
	if n := f.count("a", "sync"); n != 2 {
		t.Errorf("five updates during one sync should coalesce into one more sync, got %d syncs", n)
	}
}

func TestKillGoesThroughTerminatingThenTerminated(t *testing.T) {
	w, f, _ := setup(t)
	pod := testPod("k")
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	eventually(t, "first sync", func() bool { return f.count("k", "sync") == 1 })
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodKill})
	eventually(t, "terminated", func() bool { return f.count("k", "terminated") == 1 })
	if f.count("k", "terminating") != 1 {
		t.Errorf("calls: %v", f.calls)
	}
	if got := f.killGrace[0]; got != 30 {
		t.Errorf("grace period %d, want the pod's 30", got)
	}
	if !w.IsPodKnownTerminated("k") || w.CouldHaveRunningContainers("k") {
		t.Error("pod should be known terminated")
	}
	eventually(t, "worker finished", func() bool { return w.ShouldPodContentBeRemoved("k") })
	// A terminated pod is not restarted by more updates.
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodSync})
	time.Sleep(20 * time.Millisecond)
	if f.count("k", "sync") != 1 {
		t.Error("a terminated pod was synced again")
	}
	// Housekeeping forgets it once it is no longer desired.
	if states := w.SyncKnownPods(nil); len(states) != 0 {
		t.Errorf("known pods after forgetting: %v", states)
	}
}

func TestShorterGracePeriodOverrides(t *testing.T) {
	w, f, _ := setup(t)
	f.block = make(chan struct{})
	pod := testPod("g")
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	eventually(t, "syncing", func() bool { return f.count("g", "sync") == 1 })
	// The kill cancels the blocked sync and terminates with the override.
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodKill, KillPodOptions: &KillPodOptions{GracePeriodOverride: ptr.To[int64](5)}})
	eventually(t, "terminated", func() bool { return f.count("g", "terminated") == 1 })
	if f.killGrace[0] != 5 {
		t.Errorf("grace %v, want 5", f.killGrace)
	}
}

func TestTerminalPodTerminatesByItself(t *testing.T) {
	w, f, _ := setup(t)
	f.terminal = true
	w.UpdatePod(UpdatePodOptions{Pod: testPod("t"), UpdateType: SyncPodCreate})
	eventually(t, "terminated", func() bool { return f.count("t", "terminated") == 1 })
}

func TestOrphanRuntimePodIsKilled(t *testing.T) {
	w, f, _ := setup(t)
	w.UpdatePod(UpdatePodOptions{RunningPod: &container.Pod{ID: "o", Name: "o", Namespace: "ns"}, UpdateType: SyncPodKill})
	eventually(t, "runtime pod killed", func() bool { return f.count("o", "terminating-runtime") == 1 })
}

func TestErrorsRequeueWithBackOffAndBackOffWaitRetriesSoon(t *testing.T) {
	w, f, _ := setup(t)
	f.syncErr = errors.New("boom")
	w.UpdatePod(UpdatePodOptions{Pod: testPod("e"), UpdateType: SyncPodCreate})
	eventually(t, "sync", func() bool { return f.count("e", "sync") == 1 })
	time.Sleep(10 * time.Millisecond)
	w.queue.mu.Lock()
	due := w.queue.queue["e"]
	w.queue.mu.Unlock()
	if until := time.Until(due); until < 4*time.Second || until > 16*time.Second {
		t.Errorf("error requeue in %v, want about 10s", until)
	}
	f.syncErr = ErrBackOffWait
	w.UpdatePod(UpdatePodOptions{Pod: testPod("e"), UpdateType: SyncPodSync})
	eventually(t, "second sync", func() bool { return f.count("e", "sync") == 2 })
	time.Sleep(10 * time.Millisecond)
	w.queue.mu.Lock()
	due = w.queue.queue["e"]
	w.queue.mu.Unlock()
	if until := time.Until(due); until > 1100*time.Millisecond {
		t.Errorf("back-off wait requeue in %v, want about 1s", until)
	}
}

func TestPodRecreatedWithSameUIDWhileTerminatingRestartsAfterHousekeeping(t *testing.T) {
	w, f, _ := setup(t)
	f.termBlock = make(chan struct{})
	pod := testPod("s")
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	eventually(t, "first sync", func() bool { return f.count("s", "sync") == 1 })
	// A static pod removed and restored unchanged: same UID, kill then create.
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodKill})
	eventually(t, "terminating", func() bool { return f.count("s", "terminating") == 1 })
	w.UpdatePod(UpdatePodOptions{Pod: testPod("s"), UpdateType: SyncPodCreate})
	close(f.termBlock)
	eventually(t, "old pod finished", func() bool { return f.count("s", "terminated") == 1 && w.ShouldPodContentBeRemoved("s") })

	states := w.SyncKnownPods([]*v1.Pod{pod})
	if _, known := states["s"]; known {
		t.Fatalf("a re-created pod must be forgotten so that it can start again, states %v", states)
	}
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	eventually(t, "the re-created pod synced", func() bool { return f.count("s", "sync") == 2 })
	if st, _ := w.State("s"); st != SyncPod {
		t.Errorf("re-created pod in state %v, want syncing", st)
	}
}

func TestPodRecreatedWithSameUIDAfterFinishingRestartsAfterHousekeeping(t *testing.T) {
	w, f, _ := setup(t)
	pod := testPod("f")
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodKill})
	eventually(t, "finished", func() bool { return f.count("f", "terminated") == 1 && w.ShouldPodContentBeRemoved("f") })
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	if states := w.SyncKnownPods([]*v1.Pod{pod}); len(states) != 0 {
		t.Fatalf("known after re-creation: %v", states)
	}
}

func TestFinishedTerminalPodStaysKnownWhileDesired(t *testing.T) {
	w, f, _ := setup(t)
	f.terminal = true
	pod := testPod("d")
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	eventually(t, "finished", func() bool { return f.count("d", "terminated") == 1 && w.ShouldPodContentBeRemoved("d") })
	// Without a re-creation, a pod that completed is not restarted.
	if st := w.SyncKnownPods([]*v1.Pod{pod}); st["d"] != TerminatedPod {
		t.Fatalf("states %v, want d terminated", st)
	}
}

func TestFailedTerminationOfRemovedPodIsRetriedByHousekeeping(t *testing.T) {
	w, f, _ := setup(t)
	f.termFailures = 1
	pod := testPod("r")
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	eventually(t, "first sync", func() bool { return f.count("r", "sync") == 1 })
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodKill})
	eventually(t, "first kill attempt", func() bool { return f.count("r", "terminating") == 1 })
	time.Sleep(20 * time.Millisecond)
	// The pod is no longer desired, so the sync ticker never resyncs it: housekeeping must.
	if st := w.SyncKnownPods(nil); st["r"] != TerminatingPod {
		t.Fatalf("states %v, want r terminating; calls %v", st, f.calls)
	}
	eventually(t, "the retried kill and cleanup", func() bool { return f.count("r", "terminated") == 1 })
}

func TestPodNoLongerDesiredIsTerminatedByHousekeeping(t *testing.T) {
	w, f, _ := setup(t)
	pod := testPod("o")
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	eventually(t, "first sync", func() bool { return f.count("o", "sync") == 1 })
	w.SyncKnownPods(nil)
	eventually(t, "terminated", func() bool { return f.count("o", "terminated") == 1 })
	if f.killGrace[0] != 30 {
		t.Errorf("grace %v, want the pod's 30", f.killGrace)
	}
	eventually(t, "forgotten", func() bool { return len(w.SyncKnownPods(nil)) == 0 })
}

func TestWorkerGoroutinesExitOnceTerminatedAndForgotten(t *testing.T) {
	w, f, _ := setup(t)
	before := runtime.NumGoroutine()
	var pods []*v1.Pod
	for i := 0; i < 50; i++ {
		pod := testPod(fmt.Sprintf("p%d", i))
		pods = append(pods, pod)
		w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	}
	eventually(t, "all synced", func() bool { return f.count("p49", "sync") == 1 })
	for _, pod := range pods {
		w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodKill})
	}
	eventually(t, "all forgotten", func() bool { return len(w.SyncKnownPods(nil)) == 0 })
	eventually(t, "the workers' goroutines gone", func() bool { return runtime.NumGoroutine() <= before })
}

func TestPodWithoutWorkerHasNoContainersOnceKnownPodsAreSynced(t *testing.T) {
	w, _, _ := setup(t)
	if !w.CouldHaveRunningContainers("never-started") {
		t.Error("before housekeeping, an unknown pod may still have containers from a previous run")
	}
	w.SyncKnownPods(nil)
	if w.CouldHaveRunningContainers("never-started") {
		t.Error("after housekeeping, a pod without a worker (e.g. rejected) cannot have containers")
	}
}

func TestPostSyncRunsAfterTheSyncAndTerminationDoesNotWaitForARelist(t *testing.T) {
	f := &fakeSyncer{inFlight: map[types.UID]int{}}
	cache := podcache.New()
	cache.UpdateTime(time.Now())
	w := New(f, cache, NewWorkQueue(clock.RealClock{}), clock.RealClock{}, time.Minute)
	pod := testPod("p")
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodCreate})
	eventually(t, "post-sync after the sync", func() bool { return f.count("p", "post-sync") == 1 })
	cache.UpdateTime(time.Now()) // the relist post-sync asks for

	// No relist refreshes the cache from here on; the terminating phase stores the status
	// it read after the kill, as the kubelet does, and the terminated phase uses it.
	f.onTerminating = func() { cache.Set("p", &container.PodStatus{ID: "p"}, nil, time.Now()) }
	w.UpdatePod(UpdatePodOptions{Pod: pod, UpdateType: SyncPodKill})
	eventually(t, "terminated without a relist", func() bool { return f.count("p", "terminated") == 1 })
}

// staticPod is a static pod (file source) named "web" with uid.
func staticPod(uid string) *v1.Pod {
	p := testPod(uid)
	p.Name = "web"
	p.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	return p
}

// An edited static pod manifest gives the pod a new UID: the new pod does not start until
// the old one of the same full name has terminated, whatever its grace period takes, and
// then starts at once; other pods are not held up.
func TestStaticPodWaitsForThePreviousPodOfItsName(t *testing.T) {
	w, f, _ := setup(t)
	f.termBlock = make(chan struct{})
	old, edited, other := staticPod("old"), staticPod("edited"), testPod("other")
	w.UpdatePod(UpdatePodOptions{Pod: old, UpdateType: SyncPodCreate})
	eventually(t, "the old pod running", func() bool { return f.count("old", "sync") == 1 })
	w.UpdatePod(UpdatePodOptions{Pod: old, UpdateType: SyncPodKill})
	w.UpdatePod(UpdatePodOptions{Pod: edited, UpdateType: SyncPodCreate})
	w.UpdatePod(UpdatePodOptions{Pod: other, UpdateType: SyncPodCreate})
	eventually(t, "the old pod terminating", func() bool { return f.count("old", "terminating") == 1 })
	eventually(t, "an unrelated pod syncing", func() bool { return f.count("other", "sync") == 1 })
	time.Sleep(50 * time.Millisecond)
	if n := f.count("edited", "sync"); n != 0 {
		t.Fatalf("the edited pod synced %d times while the old one was still terminating", n)
	}
	close(f.termBlock)
	eventually(t, "the old pod terminated", func() bool { return f.count("old", "terminated") == 1 })
	eventually(t, "the edited pod started", func() bool { return f.count("edited", "sync") == 1 })
	f.mu.Lock()
	defer f.mu.Unlock()
	terminated, started := slices.Index(f.calls, "old:terminated"), slices.Index(f.calls, "edited:sync")
	if terminated > started {
		t.Errorf("calls %v: the edited pod started before the old one had terminated", f.calls)
	}
}

// A static pod removed before it could start never starts, and does not hold up the pod
// of its name that comes after it.
func TestStaticPodRemovedWhileWaitingNeverStarts(t *testing.T) {
	w, f, _ := setup(t)
	f.termBlock = make(chan struct{})
	first, second, third := staticPod("first"), staticPod("second"), staticPod("third")
	w.UpdatePod(UpdatePodOptions{Pod: first, UpdateType: SyncPodCreate})
	eventually(t, "the first pod running", func() bool { return f.count("first", "sync") == 1 })
	w.UpdatePod(UpdatePodOptions{Pod: first, UpdateType: SyncPodKill})
	w.UpdatePod(UpdatePodOptions{Pod: second, UpdateType: SyncPodCreate})
	w.UpdatePod(UpdatePodOptions{Pod: second, UpdateType: SyncPodKill})
	w.UpdatePod(UpdatePodOptions{Pod: third, UpdateType: SyncPodCreate})
	close(f.termBlock)
	eventually(t, "the third pod started", func() bool { return f.count("third", "sync") == 1 })
	if n := f.count("second", "sync"); n != 0 {
		t.Errorf("a pod removed before it started was synced %d times", n)
	}
}
