package status

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// testManager is a manager with a settable clock.
func testManager(syncer PodStatusSyncer) (*manager, *time.Time) {
	m := NewManager(syncer, nil).(*manager)
	now := at(200)
	m.now = func() time.Time { return now }
	return m, &now
}

func version(m *manager, uid types.UID) uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.statuses[uid].version
}

// runningPodStatus is the generated status of pod a running in pod p.
func runningPodStatus(pod *v1.Pod) v1.PodStatus {
	return generate(pod, runtimeStatus(running("a", "id-a", 5)), v1.PodStatus{}, GenerateOptions{})
}

func TestStatusVersions(t *testing.T) {
	m, now := testManager(nil)
	pod := testPod(v1.RestartPolicyAlways, "a")
	status := runningPodStatus(pod)

	m.SetPodStatus(pod, status)
	if v := version(m, pod.UID); v != 1 {
		t.Fatalf("first version %d", v)
	}
	*now = at(300)
	m.SetPodStatus(pod, status)
	if v := version(m, pod.UID); v != 1 {
		t.Errorf("an identical status must not bump the version: %d", v)
	}
	changed := status.DeepCopy()
	changed.ContainerStatuses[0].RestartCount = 1
	m.SetPodStatus(pod, *changed)
	if v := version(m, pod.UID); v != 2 {
		t.Errorf("a changed status bumps the version: %d", v)
	}
	deleting := pod.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: at(300)}
	m.SetPodStatus(deleting, *changed)
	if v := version(m, pod.UID); v != 3 {
		t.Errorf("a pod being deleted always gets a new version: %d", v)
	}
}

func TestTransitionAndStartTimes(t *testing.T) {
	m, now := testManager(nil)
	pod := testPod(v1.RestartPolicyAlways, "a")
	pending := generate(pod, runtimeStatus(), v1.PodStatus{}, GenerateOptions{})
	pending.StartTime = nil
	m.SetPodStatus(pod, pending)
	first, _ := m.GetPodStatus(pod.UID)
	if first.StartTime == nil || !first.StartTime.Time.Equal(at(200)) {
		t.Errorf("start time %v, want the manager's now", first.StartTime)
	}
	if c := getCondition(first, v1.PodReady); !c.LastTransitionTime.Time.Equal(at(200)) {
		t.Errorf("Ready transition time %v", c.LastTransitionTime)
	}

	*now = at(260)
	m.SetPodStatus(pod, runningPodStatus(pod))
	second, _ := m.GetPodStatus(pod.UID)
	if !second.StartTime.Time.Equal(at(200)) {
		t.Errorf("start time changed to %v", second.StartTime)
	}
	if c := getCondition(second, v1.PodReady); !c.LastTransitionTime.Time.Equal(at(260)) || c.Status != v1.ConditionTrue {
		t.Errorf("Ready turned True at %v, want %v", c.LastTransitionTime, at(260))
	}
	if c := getCondition(second, v1.PodScheduled); !c.LastTransitionTime.Time.Equal(at(200)) {
		t.Errorf("PodScheduled did not change, its time must not: %v", c.LastTransitionTime)
	}
}

type mirrorsOf map[types.UID]*v1.Pod

func (m mirrorsOf) GetMirrorPodByPod(pod *v1.Pod) (*v1.Pod, bool) {
	mirror, ok := m[pod.UID]
	return mirror, ok
}

// A kubelet that starts (after a restart, or in place of another kubelet) takes a static
// pod's start and transition times from its mirror pod, as upstream does: the manifest
// carries no status.
func TestStaticPodKeepsMirrorTimes(t *testing.T) {
	m, now := testManager(nil)
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: kubetypes.FileSource}
	mirror := pod.DeepCopy()
	mirror.Status = runningPodStatus(pod)
	mirror.Status.StartTime = &metav1.Time{Time: at(10)}
	for i := range mirror.Status.Conditions {
		mirror.Status.Conditions[i].LastTransitionTime = metav1.Time{Time: at(20)}
	}
	m.mirrors = mirrorsOf{pod.UID: mirror}

	*now = at(500)
	m.SetPodStatus(pod, runningPodStatus(pod))
	got, _ := m.GetPodStatus(pod.UID)
	if !got.StartTime.Time.Equal(at(10)) {
		t.Errorf("start time %v, want the mirror pod's %v", got.StartTime, at(10))
	}
	if c := getCondition(got, v1.PodReady); !c.LastTransitionTime.Time.Equal(at(20)) {
		t.Errorf("Ready transition time %v, want the mirror pod's %v", c.LastTransitionTime, at(20))
	}
}

func TestNormalizeStatus(t *testing.T) {
	m, _ := testManager(nil)
	pod := testPod(v1.RestartPolicyNever, "a", "b")
	cs := exited("a", "id-a", 5, 1, "Error")
	cs.StartedAt = cs.StartedAt.Add(123456789 * time.Nanosecond)
	cs.Message = strings.Repeat("x", 10000)
	status := generate(pod, runtimeStatus(cs, running("b", "id-b", 5)), v1.PodStatus{}, GenerateOptions{})
	m.SetPodStatus(pod, status)
	got, _ := m.GetPodStatus(pod.UID)
	term := findContainer(got, "a").State.Terminated
	if term.StartedAt.Nanosecond() != 0 {
		t.Errorf("startedAt %v not truncated to seconds", term.StartedAt)
	}
	if len(term.Message) != maxPodTerminationMessageLogLength/2 {
		t.Errorf("message length %d, want %d", len(term.Message), maxPodTerminationMessageLogLength/2)
	}
}

func TestSetContainerReadiness(t *testing.T) {
	m, _ := testManager(nil)
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{}
	m.SetPodStatus(pod, runningPodStatus(pod)) // probe not run yet: unready
	before, _ := m.GetPodStatus(pod.UID)
	checkCondition(t, getCondition(before, v1.PodReady), v1.PodReady, v1.ConditionFalse, ContainersNotReady, "containers with unready status: [a]")

	id := container.BuildContainerID("containerd", "id-a")
	m.SetContainerReadiness(pod.UID, id, true)
	after, _ := m.GetPodStatus(pod.UID)
	if !findContainer(after, "a").Ready {
		t.Errorf("container not ready")
	}
	checkCondition(t, getCondition(after, v1.PodReady), v1.PodReady, v1.ConditionTrue, "", "")
	checkCondition(t, getCondition(after, v1.ContainersReady), v1.ContainersReady, v1.ConditionTrue, "", "")
	if v := version(m, pod.UID); v != 2 {
		t.Errorf("version %d, want 2", v)
	}

	m.SetContainerReadiness(pod.UID, id, true)
	m.SetContainerReadiness(pod.UID, container.BuildContainerID("containerd", "gone"), false)
	m.SetContainerReadiness("other-pod", id, false)
	if v := version(m, pod.UID); v != 2 {
		t.Errorf("no-op readiness updates changed the version to %d", v)
	}
}

func TestSetContainerStartup(t *testing.T) {
	m, _ := testManager(nil)
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Spec.Containers[0].StartupProbe = &v1.Probe{}
	m.SetPodStatus(pod, runningPodStatus(pod))
	id := container.BuildContainerID("containerd", "id-a")
	m.SetContainerStartup(pod.UID, id, true)
	got, _ := m.GetPodStatus(pod.UID)
	if s := findContainer(got, "a").Started; s == nil || !*s {
		t.Errorf("started = %v", s)
	}
}

func TestTerminatePod(t *testing.T) {
	m, _ := testManager(nil)
	pod := testPod(v1.RestartPolicyAlways, "run", "done", "wait")
	ps := runtimeStatus(running("run", "id-r", 5), exited("done", "id-d", 5, 0, "Completed"))
	m.SetPodStatus(pod, generate(pod, ps, v1.PodStatus{}, GenerateOptions{}))

	m.TerminatePod(pod)
	got, _ := m.GetPodStatus(pod.UID)
	lost := &v1.ContainerStateTerminated{Reason: "ContainerStatusUnknown", Message: "The container could not be located when the pod was terminated", ExitCode: 137}
	for _, name := range []string{"run", "wait"} {
		if term := findContainer(got, name).State.Terminated; term == nil || *term != *lost {
			t.Errorf("%s: %+v, want %+v", name, findContainer(got, name).State, lost)
		}
	}
	if term := findContainer(got, "done").State.Terminated; term == nil || term.Reason != "Completed" || term.ExitCode != 0 {
		t.Errorf("done keeps its own termination: %+v", term)
	}
	if got.Phase != v1.PodFailed {
		t.Errorf("phase %s, want Failed", got.Phase)
	}
	m.mu.RLock()
	finished := m.statuses[pod.UID].podIsFinished
	m.mu.RUnlock()
	if !finished {
		t.Errorf("podIsFinished not set")
	}

	// Later updates cannot unfinish the pod.
	m.SetPodStatus(pod, got)
	m.mu.RLock()
	finished = m.statuses[pod.UID].podIsFinished
	m.mu.RUnlock()
	if !finished {
		t.Errorf("podIsFinished reset")
	}
}

func TestTerminatePodKeepsSucceededAndStaticPhases(t *testing.T) {
	m, _ := testManager(nil)
	pod := testPod(v1.RestartPolicyNever, "a")
	m.SetPodStatus(pod, generate(pod, runtimeStatus(exited("a", "id-a", 5, 0, "Completed")), v1.PodStatus{}, GenerateOptions{}))
	m.TerminatePod(pod)
	if got, _ := m.GetPodStatus(pod.UID); got.Phase != v1.PodSucceeded {
		t.Errorf("phase %s, want Succeeded kept", got.Phase)
	}

	static := testPod(v1.RestartPolicyAlways, "a")
	static.UID = "static"
	static.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: "file"}
	m.SetPodStatus(static, runningPodStatus(static))
	m.TerminatePod(static)
	got, _ := m.GetPodStatus(static.UID)
	if got.Phase != v1.PodRunning {
		t.Errorf("static pod phase %s, want unchanged (upstream TODO #116484)", got.Phase)
	}
	if findContainer(got, "a").State.Terminated == nil {
		t.Errorf("static pod containers are still marked terminated")
	}
}

func TestTerminatePodInitContainers(t *testing.T) {
	m, _ := testManager(nil)
	pod := withInit(testPod(v1.RestartPolicyAlways, "a"), "i0", "i1", "i2")
	ps := runtimeStatus(exited("i0", "id-0", 1, 0, "Completed"), running("i1", "id-1", 5))
	m.SetPodStatus(pod, generate(pod, ps, v1.PodStatus{}, GenerateOptions{}))
	m.TerminatePod(pod)
	got, _ := m.GetPodStatus(pod.UID)
	if term := findContainer(got, "i1").State.Terminated; term == nil || term.Reason != ContainerStatusUnknown {
		t.Errorf("started init container i1: %+v", findContainer(got, "i1").State)
	}
	if findContainer(got, "i2").State.Waiting == nil {
		t.Errorf("never started init container i2 stays waiting: %+v", findContainer(got, "i2").State)
	}
	// The pod never initialized (per its status): regular containers stay waiting.
	if findContainer(got, "a").State.Waiting == nil {
		t.Errorf("regular container of an uninitialized pod stays waiting: %+v", findContainer(got, "a").State)
	}
}

// A pod from a file has no API status: whether it initialized must be read from the
// cached status, or its regular containers would be left running in a terminated pod.
func TestTerminatePodInitializedPerCachedStatus(t *testing.T) {
	m, _ := testManager(nil)
	pod := withInit(testPod(v1.RestartPolicyAlways, "a"), "i0")
	ps := runtimeStatus(exited("i0", "id-0", 1, 0, "Completed"), running("a", "id-a", 5))
	m.SetPodStatus(pod, generate(pod, ps, v1.PodStatus{}, GenerateOptions{}))
	m.TerminatePod(pod)
	got, _ := m.GetPodStatus(pod.UID)
	if term := findContainer(got, "a").State.Terminated; term == nil || term.Reason != ContainerStatusUnknown {
		t.Errorf("regular container of an initialized pod: %+v, want terminated", findContainer(got, "a").State)
	}
}

func TestIllegalTransitionIsRefused(t *testing.T) {
	m, _ := testManager(nil)
	pod := testPod(v1.RestartPolicyNever, "a")
	m.SetPodStatus(pod, generate(pod, runtimeStatus(exited("a", "id-a", 5, 0, "Completed")), v1.PodStatus{}, GenerateOptions{}))
	m.SetPodStatus(pod, runningPodStatus(pod))
	got, _ := m.GetPodStatus(pod.UID)
	if findContainer(got, "a").State.Terminated == nil || version(m, pod.UID) != 1 {
		t.Errorf("a Never container went from terminated to running")
	}

	always := testPod(v1.RestartPolicyAlways, "a")
	always.UID = "always"
	m.SetPodStatus(always, generate(always, runtimeStatus(exited("a", "id-a", 5, 0, "Completed")), v1.PodStatus{}, GenerateOptions{}))
	m.SetPodStatus(always, runningPodStatus(always))
	if version(m, always.UID) != 2 {
		t.Errorf("an Always container may restart")
	}
}

func TestRemoveOrphanedStatuses(t *testing.T) {
	m, _ := testManager(nil)
	keep, drop := testPod(v1.RestartPolicyAlways, "a"), testPod(v1.RestartPolicyAlways, "a")
	drop.UID = "drop"
	m.SetPodStatus(keep, runningPodStatus(keep))
	m.SetPodStatus(drop, runningPodStatus(drop))
	m.RemoveOrphanedStatuses(map[types.UID]bool{keep.UID: true})
	if _, ok := m.GetPodStatus(keep.UID); !ok {
		t.Errorf("kept pod lost")
	}
	if _, ok := m.GetPodStatus(drop.UID); ok {
		t.Errorf("orphan kept")
	}
}

func TestGetPodStatusReturnsACopy(t *testing.T) {
	m, _ := testManager(nil)
	pod := testPod(v1.RestartPolicyAlways, "a")
	m.SetPodStatus(pod, runningPodStatus(pod))
	got, _ := m.GetPodStatus(pod.UID)
	got.ContainerStatuses[0].Name = "changed"
	if again, _ := m.GetPodStatus(pod.UID); again.ContainerStatuses[0].Name != "a" {
		t.Errorf("caller modified the cache")
	}
}

func TestSubscribe(t *testing.T) {
	m, _ := testManager(nil)
	updates, cancel := m.Subscribe()
	pod := testPod(v1.RestartPolicyAlways, "a")
	m.SetPodStatus(pod, runningPodStatus(pod))
	m.SetContainerReadiness(pod.UID, container.BuildContainerID("containerd", "id-a"), false)
	for want := uint64(1); want <= 2; want++ {
		select {
		case u := <-updates:
			if u.UID != pod.UID || u.Name != "p" || u.Namespace != "ns" || u.Version != want {
				t.Errorf("update %+v, want version %d", u, want)
			}
		case <-time.After(time.Second):
			t.Fatalf("no update %d", want)
		}
	}
	cancel()
	cancel()
	if _, open := <-updates; open {
		t.Errorf("channel open after cancel")
	}
	// A new version after cancel must not be sent on the closed channel.
	deleting := pod.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: at(300)}
	m.SetPodStatus(deleting, runningPodStatus(pod))
	if v := version(m, pod.UID); v != 3 {
		t.Errorf("version %d, want 3", v)
	}
}

// fakeSyncer records updates and fails while failing is set.
type fakeSyncer struct {
	mu      sync.Mutex
	got     []PodStatusUpdate
	failing bool
	synced  chan struct{}
}

func (f *fakeSyncer) SyncPodStatus(_ context.Context, u PodStatusUpdate) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, u)
	select {
	case f.synced <- struct{}{}:
	default:
	}
	if f.failing {
		return false, errors.New("API down")
	}
	return false, nil
}

func (f *fakeSyncer) NeedsReconcile(PodStatusUpdate) (bool, string) { return false, "" }

// consistentSyncer acknowledges every update and finds every status consistent with "rv",
// recording what each NeedsReconcile was passed.
type consistentSyncer struct{ passed []string }

func (c *consistentSyncer) SyncPodStatus(context.Context, PodStatusUpdate) (bool, error) {
	return false, nil
}

func (c *consistentSyncer) NeedsReconcile(u PodStatusUpdate) (bool, string) {
	c.passed = append(c.passed, u.ConsistentWith)
	return false, "rv"
}

// What NeedsReconcile found a status consistent with is passed back on the next full
// pass, and only for the same version of the status.
func TestNeedsReconcileAnswerKeptForTheSameStatusVersion(t *testing.T) {
	syncer := &consistentSyncer{}
	m, _ := testManager(syncer)
	pod := testPod(v1.RestartPolicyAlways, "a")
	ctx := context.Background()
	m.SetPodStatus(pod, runningPodStatus(pod))
	m.syncBatch(ctx, false)
	m.syncBatch(ctx, true)
	m.syncBatch(ctx, true)
	m.TerminatePod(pod) // a new version
	m.syncBatch(ctx, false)
	m.syncBatch(ctx, true)
	if want := []string{"", "rv", ""}; !slices.Equal(syncer.passed, want) {
		t.Errorf("NeedsReconcile was passed %q, want %q", syncer.passed, want)
	}
}

func TestSyncerGetsUpdatesAndRetries(t *testing.T) {
	syncer := &fakeSyncer{failing: true, synced: make(chan struct{}, 10)}
	m, _ := testManager(syncer)
	pod := testPod(v1.RestartPolicyAlways, "a")
	m.SetPodStatus(pod, runningPodStatus(pod))

	if n := m.syncBatch(context.Background(), false); n != 1 {
		t.Fatalf("offered %d updates, want 1", n)
	}
	if n := m.syncBatch(context.Background(), true); n != 1 {
		t.Errorf("a failed update is offered again: %d", n)
	}
	syncer.failing = false
	m.syncBatch(context.Background(), true)
	if n := m.syncBatch(context.Background(), true); n != 0 {
		t.Errorf("an acknowledged update is offered again: %d", n)
	}
	m.TerminatePod(pod)
	m.syncBatch(context.Background(), false)
	last := syncer.got[len(syncer.got)-1]
	if last.Version != 2 || !last.PodIsFinished || last.Status.Phase != v1.PodFailed {
		t.Errorf("last update %+v", last)
	}

	// The loop itself syncs right after a change. It is stopped, and waited for, before
	// the test ends: a loop left running would sync (and count in the global metrics)
	// during the next tests.
	ctx, cancel := context.WithCancel(context.Background())
	loopDone := make(chan struct{})
	go func() { m.syncLoop(ctx); close(loopDone) }()
	defer func() { cancel(); <-loopDone }()
	changed := runningPodStatus(pod)
	other := testPod(v1.RestartPolicyAlways, "a")
	other.UID = "other"
	m.SetPodStatus(other, changed)
	select {
	case <-syncer.synced:
	case <-time.After(2 * time.Second):
		t.Fatal("the sync loop did not pick up the change")
	}
}

func TestGetPodPhase(t *testing.T) {
	m, _ := testManager(nil)
	pod := testPod(v1.RestartPolicyAlways, "a")
	if _, ok := m.GetPodPhase(pod.UID); ok {
		t.Fatal("phase of a pod without status")
	}
	m.SetPodStatus(pod, runningPodStatus(pod))
	if phase, ok := m.GetPodPhase(pod.UID); !ok || phase != v1.PodRunning {
		t.Errorf("phase %q, %t; want Running", phase, ok)
	}
}
