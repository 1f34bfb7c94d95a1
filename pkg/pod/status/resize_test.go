package status

import (
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/metrics"
)

func TestResizeConditionsPending(t *testing.T) {
	now := at(0)
	r := NewResizeConditions(func() time.Time { return now })
	if !r.SetPending("u", "OutOfcpu", "Node didn't have enough resource: cpu", 2) {
		t.Fatal("a new condition is not reported as a change")
	}
	c := r.Pending("u")
	if c.Type != v1.PodResizePending || c.Status != v1.ConditionTrue || c.Reason != v1.PodReasonDeferred ||
		c.Message != "Node didn't have enough resource: cpu" || c.ObservedGeneration != 2 || !c.LastTransitionTime.Time.Equal(at(0)) {
		t.Fatalf("pending %+v", c)
	}
	now = at(5)
	if r.SetPending("u", "OutOfmemory", "other message", 2) {
		t.Fatal("same reason (Deferred) and generation reported as a change")
	}
	if c := r.Pending("u"); c.Message != "other message" || !c.LastTransitionTime.Time.Equal(at(0)) || !c.LastProbeTime.Time.Equal(at(5)) {
		t.Fatalf("pending after update %+v", c)
	}
	if !r.SetPending("u", v1.PodReasonInfeasible, "never", 2) || r.Pending("u").Reason != v1.PodReasonInfeasible {
		t.Fatal("Infeasible not kept or not a change")
	}
	if !r.SetPending("u", v1.PodReasonInfeasible, "never", 3) {
		t.Fatal("a new generation is not a change")
	}
	r.ClearPending("u", metrics.ResizeReverted)
	if r.Pending("u") != nil || len(r.List("u")) != 0 {
		t.Fatal("pending not cleared")
	}
}

func TestResizeConditionsInProgressKeepsGenerationAndError(t *testing.T) {
	r := NewResizeConditions(fixedNow)
	if gen, changed := r.SetInProgress("u", "", "", 2); gen != 2 || !changed {
		t.Fatalf("new: gen %d changed %v", gen, changed)
	}
	if gen, changed := r.SetInProgress("u", "", "", 3); gen != 2 || changed {
		t.Fatalf("again: gen %d changed %v, want the first generation and no change", gen, changed)
	}
	if _, changed := r.SetInProgress("u", v1.PodReasonError, "boom", 3); !changed {
		t.Fatal("an error is a change")
	}
	if _, changed := r.SetInProgress("u", "", "", 3); changed || r.InProgress("u").Message != "boom" {
		t.Fatal("a sync still in progress lost the error")
	}
	if gen, cleared := r.ClearInProgress("u"); gen != 2 || !cleared {
		t.Fatalf("clear: gen %d cleared %v", gen, cleared)
	}
	if _, cleared := r.ClearInProgress("u"); cleared {
		t.Fatal("cleared twice")
	}
}

func TestResizeConditionsBackfillAndRetain(t *testing.T) {
	r := NewResizeConditions(fixedNow)
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Status.Conditions = []v1.PodCondition{
		{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: v1.PodReasonDeferred, Message: "m", ObservedGeneration: 4},
		{Type: v1.PodReady, Status: v1.ConditionTrue},
	}
	r.Backfill([]*v1.Pod{pod})
	if c := r.Pending(pod.UID); c == nil || c.Message != "m" || c.ObservedGeneration != 4 || r.InProgress(pod.UID) != nil {
		t.Fatalf("backfilled %+v", r.List(pod.UID))
	}
	r.Retain(map[types.UID]bool{"other": true})
	if len(r.List(pod.UID)) != 0 {
		t.Fatal("the conditions of a pod not retained stay")
	}
}

func TestResizeConditionsInGeneratedStatus(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Generation = 3
	pod.Status.Conditions = []v1.PodCondition{
		{Type: "example.com/gate", Status: v1.ConditionTrue},
		{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: "Deferred"}, // the API's old one: replaced
	}
	r := NewResizeConditions(fixedNow)
	r.SetInProgress(pod.UID, "", "", 3)
	got := generate(pod, runtimeStatus(running("a", "id-a", 5)), v1.PodStatus{}, GenerateOptions{ResizeConditions: r.List(pod.UID)})
	var types []v1.PodConditionType
	for _, c := range got.Conditions {
		types = append(types, c.Type)
	}
	want := []v1.PodConditionType{"example.com/gate", v1.PodResizeInProgress, v1.PodReadyToStartContainers, v1.PodInitialized, v1.PodReady, v1.ContainersReady, v1.PodScheduled}
	if !reflect.DeepEqual(types, want) {
		t.Fatalf("conditions %v, want %v", types, want)
	}
	if c := getCondition(got, v1.PodResizeInProgress); c.ObservedGeneration != 3 || c.Status != v1.ConditionTrue {
		t.Fatalf("in progress %+v", c)
	}
	// A static pod (no generation) shows none on the condition either.
	pod.Generation = 0
	got = generate(pod, runtimeStatus(running("a", "id-a", 5)), v1.PodStatus{}, GenerateOptions{ResizeConditions: r.List(pod.UID)})
	if c := getCondition(got, v1.PodResizeInProgress); c.ObservedGeneration != 0 {
		t.Fatalf("static pod: in progress %+v", c)
	}
}

func TestRemovedResizeConditionIsAStatusChange(t *testing.T) {
	with := v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{
		{Type: v1.PodReady, Status: v1.ConditionTrue},
		{Type: v1.PodResizeInProgress, Status: v1.ConditionTrue},
	}}
	without := v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}
	if statusByKubeletEqual(&with, &without) || statusByKubeletEqual(&without, &with) {
		t.Fatal("a resize condition that comes or goes is not a change")
	}
	if !statusByKubeletEqual(&with, with.DeepCopy()) {
		t.Fatal("equal statuses differ")
	}
}

// Without resources from the runtime, a running container's status shows those the
// runtime manager applied (not the allocated ones); the memory request always comes
// from there.
func TestContainerStatusResourcesFromActuated(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("800m"), v1.ResourceMemory: resource.MustParse("96Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("800m"), v1.ResourceMemory: resource.MustParse("128Mi")},
	}
	actuated := func(name string) (v1.ResourceRequirements, bool) {
		return v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("128Mi")},
		}, name == "a"
	}
	check := func(r *v1.ResourceRequirements, cpuRequest, cpuLimit, memoryRequest string) {
		t.Helper()
		for name, c := range map[string]struct{ got, want resource.Quantity }{
			"cpu request": {r.Requests[v1.ResourceCPU], resource.MustParse(cpuRequest)},
			"cpu limit":   {r.Limits[v1.ResourceCPU], resource.MustParse(cpuLimit)},
			"mem request": {r.Requests[v1.ResourceMemory], resource.MustParse(memoryRequest)},
		} {
			if c.got.Cmp(c.want) != 0 {
				t.Errorf("%s = %s, want %s", name, c.got.String(), c.want.String())
			}
		}
	}
	opts := GenerateOptions{ActuatedResources: actuated}
	got := findContainer(generate(pod, runtimeStatus(running("a", "id-a", 5)), v1.PodStatus{}, opts), "a")
	check(got.Resources, "500m", "500m", "64Mi")
	if q := got.AllocatedResources[v1.ResourceCPU]; q.Cmp(resource.MustParse("800m")) != 0 {
		t.Errorf("allocated cpu %s, want the allocated 800m", q.String())
	}

	// The runtime's values win where it reports them.
	cs := running("a", "id-a", 5)
	cs.Resources = &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpuShares: 819, CpuQuota: 80000, CpuPeriod: 100000, MemoryLimitInBytes: 128 << 20}}
	got = findContainer(generate(pod, runtimeStatus(cs), v1.PodStatus{}, opts), "a")
	check(got.Resources, "800m", "800m", "64Mi")
}

// The conditions keep kubelet_pod_pending_resizes and kubelet_pod_in_progress_resizes
// current, and a deferred resize of a pod forgotten ends as terminated.
func TestResizeConditionsMetrics(t *testing.T) {
	now := at(0)
	r := NewResizeConditions(func() time.Time { return now })
	prio := int32(-5)
	pods := map[types.UID]*v1.Pod{"low": {Spec: v1.PodSpec{Priority: &prio}}, "normal": {}}
	r.SetPodLookup(func(uid types.UID) (*v1.Pod, bool) { p, ok := pods[uid]; return p, ok })
	terminated := metrics.PodDeferredResizeDurationSeconds.WithLabelValues(metrics.ResizeTerminated, "unknown")

	r.SetPending("low", "OutOfcpu", "", 1)
	r.SetPending("normal", v1.PodReasonInfeasible, "", 1)
	r.SetInProgress("normal", "", "", 1)
	for labels, want := range map[[2]string]float64{{"deferred", "low"}: 1, {"infeasible", "normal"}: 1} {
		if got := testutil.ToFloat64(metrics.PodPendingResizes.WithLabelValues(labels[0], labels[1])); got != want {
			t.Errorf("pending %v = %v, want %v", labels, got, want)
		}
	}
	if got := testutil.ToFloat64(metrics.PodInProgressResizes); got != 1 {
		t.Errorf("in progress = %v, want 1", got)
	}

	var m dto.Metric
	count := func() uint64 { _ = terminated.(prometheus.Metric).Write(&m); return m.GetHistogram().GetSampleCount() }
	observed := count()
	now = at(90)
	delete(pods, "low")
	r.Retain(map[types.UID]bool{"normal": true})
	if got := count() - observed; got != 1 {
		t.Errorf("%d terminated deferrals observed, want 1", got)
	}
	if n := testutil.CollectAndCount(metrics.PodPendingResizes); n != 1 {
		t.Errorf("%d pending series, want the infeasible one only", n)
	}
	r.ClearInProgress("normal")
	if got := testutil.ToFloat64(metrics.PodInProgressResizes); got != 0 {
		t.Errorf("in progress = %v, want 0", got)
	}
}
