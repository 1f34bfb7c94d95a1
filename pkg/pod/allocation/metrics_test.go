package allocation

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/pkg/metrics"
)

func observations(o prometheus.Observer) uint64 {
	var m dto.Metric
	_ = o.(prometheus.Metric).Write(&m)
	return m.GetHistogram().GetSampleCount()
}

// A pod-level resize with InPlacePodLevelResourcesVerticalScaling off counts as
// infeasible with upstream's reason detail.
func TestInfeasiblePodLevelResizeIsCounted(t *testing.T) {
	tm := newTestManager(t, false)
	pod := cpuPod("a", "500m")
	pod.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}
	tm.add(t, pod)
	next := pod.DeepCopy()
	next.Spec.Resources.Limits[v1.ResourceCPU] = resource.MustParse("2")
	tm.pods[pod.UID] = next
	infeasible := metrics.PodInfeasibleResizes.WithLabelValues("plr_feature_gate_off")
	before := testutil.ToFloat64(infeasible)
	tm.PushPendingResize(pod.UID)
	tm.RetryPendingResizes(TriggerPodUpdated)
	if got := testutil.ToFloat64(infeasible) - before; got != 1 {
		t.Errorf("infeasible resizes +%v, want +1", got)
	}
}

// A deferred resize that is reverted ends as "reverted"; one that fits later is
// accepted, counted by the trigger that let it through.
func TestDeferredResizeResolutions(t *testing.T) {
	reverted := metrics.PodDeferredResizeDurationSeconds.WithLabelValues(metrics.ResizeReverted, "unknown")
	acceptedTimed := metrics.PodDeferredResizeDurationSeconds.WithLabelValues(metrics.ResizeAccepted, "unknown")
	accepted := metrics.PodDeferredAcceptedResizes.WithLabelValues(TriggerPodsRemoved)
	revertedBefore, timedBefore, acceptedBefore := observations(reverted), observations(acceptedTimed), testutil.ToFloat64(accepted)

	tm := newTestManager(t, true)
	pod, filler := cpuPod("a", "500m"), cpuPod("filler", "3")
	tm.add(t, pod)
	tm.add(t, filler)
	tm.resize(pod, "2")
	tm.resize(pod, "500m")
	if got := observations(reverted) - revertedBefore; got != 1 {
		t.Errorf("%d reverted deferrals observed, want 1", got)
	}

	tm.resize(pod, "2")
	delete(tm.pods, filler.UID)
	tm.RemovePod(filler.UID)
	tm.RetryPendingResizes(TriggerPodsRemoved)
	if c := tm.conds.Pending(pod.UID); c != nil {
		t.Fatalf("still pending: %+v", c)
	}
	if got := testutil.ToFloat64(accepted) - acceptedBefore; got != 1 {
		t.Errorf("deferred resizes accepted on pods_removed +%v, want +1", got)
	}
	if got := observations(acceptedTimed) - timedBefore; got != 1 {
		t.Errorf("%d accepted deferrals observed, want 1", got)
	}
}
