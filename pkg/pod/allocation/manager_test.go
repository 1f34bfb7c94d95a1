package allocation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/pod/admission"
	"github.com/nodelet/nodelet/pkg/pod/status"
)

// testManager is an allocation manager over a 4-CPU node with pkg/pod/admission's admit
// handlers, the status package's resize conditions, and pods kept in a map.
type testManager struct {
	*Manager
	pods     map[types.UID]*v1.Pod
	conds    *status.ResizeConditions
	rec      *record.FakeRecorder
	synced   []types.UID
	now      time.Time
	notReady bool
}

func newTestManager(t *testing.T, podLevelResize bool) *testManager {
	t.Helper()
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{v1.LabelOSStable: "linux"}},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("4Gi"), v1.ResourcePods: resource.MustParse("10"),
		}},
	}
	admitter, err := admission.New(func() (*v1.Node, error) { return node, nil }, admission.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tm := &testManager{pods: map[types.UID]*v1.Pod{}, rec: record.NewFakeRecorder(100), now: time.Unix(1000, 0)}
	tm.conds = status.NewResizeConditions(func() time.Time { return tm.now })
	tm.Manager = NewManager(Options{
		Admit: func(pod *v1.Pod, others []*v1.Pod, resize bool) (bool, string, string) {
			r := admitter.Admit(pod, others)
			if resize {
				r = admitter.AdmitResize(pod, others)
			}
			return r.Admit, r.Reason, r.Message
		},
		Conditions: tm.conds, Recorder: tm.rec,
		ActivePods: func() []*v1.Pod {
			var out []*v1.Pod
			for _, p := range tm.pods {
				out = append(out, p)
			}
			return out
		},
		PodByUID:       func(uid types.UID) (*v1.Pod, bool) { p, ok := tm.pods[uid]; return p, ok },
		SourcesReady:   func() bool { return !tm.notReady },
		TriggerSync:    func(p *v1.Pod) { tm.synced = append(tm.synced, p.UID) },
		PodLevelResize: podLevelResize,
		Now:            func() time.Time { return tm.now },
	})
	return tm
}

// cpuPod is a pod whose container requests and limits cpu.
func cpuPod(name, cpu string) *v1.Pod {
	q := resource.MustParse(cpu)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name), Generation: 1},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: q}, Limits: v1.ResourceList{v1.ResourceCPU: q},
		}}}},
	}
}

// add admits pod as the kubelet does for a new pod.
func (tm *testManager) add(t *testing.T, pod *v1.Pod) {
	t.Helper()
	if ok, reason, msg := tm.AddPod(tm.ActivePodsNow(), pod); !ok {
		t.Fatalf("pod %s not admitted: %s %s", pod.Name, reason, msg)
	}
	tm.pods[pod.UID] = pod
}

func (tm *testManager) ActivePodsNow() []*v1.Pod { return tm.opts.ActivePods() }

// resize delivers a new version of the pod whose cpu is changed, as the kubelet does.
func (tm *testManager) resize(pod *v1.Pod, cpu string) *v1.Pod {
	q := resource.MustParse(cpu)
	next := pod.DeepCopy()
	next.Generation++
	next.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = q
	next.Spec.Containers[0].Resources.Limits[v1.ResourceCPU] = q
	tm.pods[next.UID] = next
	tm.PushPendingResize(next.UID)
	tm.RetryPendingResizes(TriggerPodUpdated)
	return next
}

func (tm *testManager) events() []string {
	var out []string
	for {
		select {
		case e := <-tm.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func allocatedCPU(m *Manager, pod *v1.Pod) int64 {
	allocated, _ := m.UpdatePodFromAllocation(pod)
	return allocated.Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
}

func TestResizeThatFitsIsAllocated(t *testing.T) {
	tm := newTestManager(t, true)
	pod := cpuPod("a", "500m")
	tm.add(t, pod)
	if _, differs := tm.UpdatePodFromAllocation(pod); differs {
		t.Fatal("a new pod's allocation differs from its spec")
	}
	resized := tm.resize(pod, "800m")
	if got := allocatedCPU(tm.Manager, resized); got != 800 {
		t.Fatalf("allocated cpu %dm, want 800m", got)
	}
	c := tm.conds.InProgress(pod.UID)
	if c == nil || c.Reason != "" || c.ObservedGeneration != 2 || tm.conds.Pending(pod.UID) != nil {
		t.Fatalf("conditions: in progress %+v, pending %+v", c, tm.conds.Pending(pod.UID))
	}
	want := `Normal ResizeStarted Pod resize started: {"containers":[{"name":"c","resources":{"limits":{"cpu":"800m"},"requests":{"cpu":"800m"}}}],"generation":2}`
	if ev := tm.events(); len(ev) != 1 || ev[0] != want {
		t.Fatalf("events %q\nwant %q", ev, want)
	}
	if len(tm.synced) != 1 || tm.HasPendingResizes() {
		t.Fatalf("synced %v, pending %v", tm.synced, tm.HasPendingResizes())
	}
}

func TestResizeBeyondFreeCapacityIsDeferredUntilCapacityFrees(t *testing.T) {
	tm := newTestManager(t, true)
	pod, filler := cpuPod("a", "500m"), cpuPod("filler", "3")
	tm.add(t, pod)
	tm.add(t, filler)
	resized := tm.resize(pod, "1500m")

	if got := allocatedCPU(tm.Manager, resized); got != 500 {
		t.Fatalf("a deferred resize was allocated: %dm", got)
	}
	msg := "Node didn't have enough resource: cpu, requested: 1500, used: 3000, capacity: 4000"
	c := tm.conds.Pending(pod.UID)
	if c == nil || c.Reason != v1.PodReasonDeferred || c.Message != msg || c.ObservedGeneration != 2 {
		t.Fatalf("pending condition %+v", c)
	}
	want := fmt.Sprintf(`Warning ResizeDeferred Pod resize OutOfcpu: {"containers":[{"name":"c","resources":{"limits":{"cpu":"1500m"},"requests":{"cpu":"1500m"}}}],"generation":2,"error":%q}`, msg)
	if ev := tm.events(); len(ev) != 1 || ev[0] != want {
		t.Fatalf("events %q\nwant %q", ev, want)
	}
	// Asked again, nothing changes: no new event, no sync.
	tm.synced = nil
	tm.RetryPendingResizes(TriggerPodUpdated)
	if ev := tm.events(); len(ev) != 0 || len(tm.synced) != 0 || !tm.HasPendingResizes() {
		t.Fatalf("retry with nothing new: events %q, synced %v", ev, tm.synced)
	}

	// The filler goes: the resize fits now.
	delete(tm.pods, filler.UID)
	tm.RemovePod(filler.UID)
	tm.RetryPendingResizes(TriggerPodsRemoved)
	if got := allocatedCPU(tm.Manager, resized); got != 1500 {
		t.Fatalf("allocated cpu %dm after capacity freed, want 1500m", got)
	}
	if tm.conds.Pending(pod.UID) != nil || tm.conds.InProgress(pod.UID) == nil || tm.HasPendingResizes() {
		t.Fatal("conditions not moved from pending to in progress")
	}
}

func TestPodLevelResizeIsInfeasibleWhenDisabled(t *testing.T) {
	tm := newTestManager(t, false)
	pod := cpuPod("a", "500m")
	pod.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}
	tm.add(t, pod)
	next := pod.DeepCopy()
	next.Spec.Resources.Limits[v1.ResourceCPU] = resource.MustParse("2")
	tm.pods[pod.UID] = next
	tm.PushPendingResize(pod.UID)
	tm.RetryPendingResizes(TriggerPodUpdated)

	c := tm.conds.Pending(pod.UID)
	if c == nil || c.Reason != v1.PodReasonInfeasible || c.Message != "InPlacePodLevelResourcesVerticalScaling is disabled" {
		t.Fatalf("pending condition %+v", c)
	}
	if ev := tm.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning ResizeInfeasible Pod resize Infeasible: ") {
		t.Fatalf("events %q", ev)
	}
	if tm.HasPendingResizes() {
		t.Fatal("an infeasible resize is retried")
	}
	if allocated, _ := tm.UpdatePodFromAllocation(next); allocated.Spec.Resources.Limits.Cpu().MilliValue() != 1000 {
		t.Fatal("an infeasible pod-level resize was allocated")
	}
}

func TestRevertedResizeClearsPending(t *testing.T) {
	tm := newTestManager(t, true)
	pod, filler := cpuPod("a", "500m"), cpuPod("filler", "3")
	tm.add(t, pod)
	tm.add(t, filler)
	tm.resize(pod, "2")
	if tm.conds.Pending(pod.UID) == nil {
		t.Fatal("want a pending resize")
	}
	tm.resize(pod, "500m")
	if tm.conds.Pending(pod.UID) != nil || tm.HasPendingResizes() {
		t.Fatal("a reverted resize stays pending")
	}
}

func TestAddPodUsesAllocationAfterRestart(t *testing.T) {
	tm := newTestManager(t, true)
	pod := cpuPod("a", "500m")
	if err := tm.store.Set(pod.UID, ResourceInfoForPod(pod)); err != nil {
		t.Fatal(err)
	}
	// The pod comes back with a resize that would not fit: admitted with its allocation.
	tm.add(t, cpuPod("filler", "3"))
	big := cpuPod("a", "2")
	if ok, reason, msg := tm.AddPod(tm.ActivePodsNow(), big); !ok {
		t.Fatalf("pod with a pending resize not admitted: %s %s", reason, msg)
	}
	if got := allocatedCPU(tm.Manager, big); got != 500 {
		t.Fatalf("allocation %dm, want the old 500m", got)
	}
}

func TestPendingResizesOrder(t *testing.T) {
	tm := newTestManager(t, true)
	high, low, shrink, guaranteed := cpuPod("high", "1"), cpuPod("low", "1"), cpuPod("shrink", "1"), cpuPod("guaranteed", "1")
	prio := int32(100)
	high.Spec.Priority = &prio
	burstable := func(p *v1.Pod) { delete(p.Spec.Containers[0].Resources.Limits, v1.ResourceCPU) }
	burstable(high)
	burstable(low)
	burstable(shrink)
	for _, list := range []v1.ResourceList{guaranteed.Spec.Containers[0].Resources.Requests, guaranteed.Spec.Containers[0].Resources.Limits} {
		list[v1.ResourceMemory] = resource.MustParse("64Mi")
	}
	for _, p := range []*v1.Pod{low, guaranteed, shrink, high} {
		if err := tm.store.Set(p.UID, ResourceInfoForPod(p)); err != nil {
			t.Fatal(err)
		}
	}
	grow := func(p *v1.Pod, cpu string) {
		next := p.DeepCopy()
		next.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse(cpu)
		if _, ok := next.Spec.Containers[0].Resources.Limits[v1.ResourceCPU]; ok {
			next.Spec.Containers[0].Resources.Limits[v1.ResourceCPU] = resource.MustParse(cpu)
		}
		tm.pods[p.UID] = next
		tm.PushPendingResize(p.UID)
	}
	grow(low, "2")
	grow(guaranteed, "2")
	grow(shrink, "500m")
	grow(high, "2")
	want := []types.UID{"shrink", "high", "guaranteed", "low"}
	if fmt.Sprint(tm.pending) != fmt.Sprint(want) {
		t.Fatalf("order %v, want %v", tm.pending, want)
	}
}

func TestPeriodicRetry(t *testing.T) {
	tm := newTestManager(t, true)
	pod, filler := cpuPod("a", "500m"), cpuPod("filler", "3")
	tm.add(t, pod)
	tm.add(t, filler)
	tm.notReady = true
	resized := tm.resize(pod, "1500m")
	if tm.conds.Pending(pod.UID) != nil {
		t.Fatal("a resize was decided before the sources were ready")
	}
	tm.notReady = false
	delete(tm.pods, filler.UID) // freed without a removal event

	tm.now = tm.now.Add(29 * time.Second)
	tm.RetryIfDue()
	if got := allocatedCPU(tm.Manager, resized); got != 500 {
		t.Fatal("retried before the initial delay")
	}
	tm.now = tm.now.Add(time.Second)
	tm.RetryIfDue()
	if got := allocatedCPU(tm.Manager, resized); got != 1500 {
		t.Fatalf("not retried after the initial delay: %dm", got)
	}
}

// Under the static CPU manager a Guaranteed pod's CPU cannot be resized in place: its
// CPUs are pinned. A Burstable pod's can.
func TestGuaranteedCPUResizeIsInfeasibleWithStaticCPUManager(t *testing.T) {
	tm := newTestManager(t, true)
	tm.opts.StaticCPUManager = true
	guaranteed := cpuPod("g", "1")
	for _, list := range []v1.ResourceList{guaranteed.Spec.Containers[0].Resources.Requests, guaranteed.Spec.Containers[0].Resources.Limits} {
		list[v1.ResourceMemory] = resource.MustParse("64Mi")
	}
	burstable := cpuPod("b", "500m")
	burstable.Spec.Containers[0].Resources.Limits[v1.ResourceCPU] = resource.MustParse("1")
	tm.add(t, guaranteed)
	tm.add(t, burstable)

	tm.resize(guaranteed, "2")
	c := tm.conds.Pending(guaranteed.UID)
	if c == nil || c.Reason != v1.PodReasonInfeasible || c.Message != `Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"` {
		t.Fatalf("pending condition %+v", c)
	}
	next := burstable.DeepCopy()
	next.Generation++
	next.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("600m")
	tm.pods[next.UID] = next
	tm.PushPendingResize(next.UID)
	tm.RetryPendingResizes(TriggerPodUpdated)
	if c := tm.conds.Pending(burstable.UID); c != nil {
		t.Fatalf("the Burstable pod's resize is pending: %+v", c)
	}
}
