package kubelet

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

func observations(o prometheus.Observer) uint64 {
	var m dto.Metric
	_ = o.(prometheus.Metric).Write(&m)
	return m.GetHistogram().GetSampleCount()
}

// A resize is counted when requested, shows as pending while deferred, and once other
// pods leave is accepted, timed and in progress, as upstream's metrics follow it.
func TestResizeMetrics(t *testing.T) {
	k, rt, resize, _ := resizeKubelet(t)
	requested := func(requirement string) float64 {
		return testutil.ToFloat64(metrics.ContainerRequestedResizes.WithLabelValues("cpu", requirement, "increase"))
	}
	requests, limits := requested("requests"), requested("limits")
	accepted := testutil.ToFloat64(metrics.PodDeferredAcceptedResizes.WithLabelValues("pods_removed"))
	deferredFor := metrics.PodDeferredResizeDurationSeconds.WithLabelValues(metrics.ResizeAccepted, "normal")
	timed := observations(deferredFor)

	pod, filler := cpuTestPod("a", "500m", 1), cpuTestPod("filler", "1400m", 1)
	k.handlePodAdditions([]*v1.Pod{pod, filler})
	eventually(t, "the pods synced", func() bool { return syncedCPU(rt, "a") == 500 && syncedCPU(rt, "filler") == 1400 })
	k.handlePodUpdates([]*v1.Pod{cpuTestPod("a", "800m", 2)})
	if requested("requests")-requests != 1 || requested("limits")-limits != 1 {
		t.Errorf("requested resizes: requests +%v, limits +%v; want +1 each", requested("requests")-requests, requested("limits")-limits)
	}
	if got := testutil.ToFloat64(metrics.PodPendingResizes.WithLabelValues("deferred", "normal")); got != 1 {
		t.Errorf("pending deferred resizes = %v, want 1", got)
	}

	resize.mu.Lock()
	resize.inProgress = true
	resize.mu.Unlock()
	k.handlePodRemoves([]*v1.Pod{filler})
	eventually(t, "the resize actuated", func() bool { return syncedCPU(rt, "a") == 800 })
	if got := testutil.ToFloat64(metrics.PodDeferredAcceptedResizes.WithLabelValues("pods_removed")) - accepted; got != 1 {
		t.Errorf("deferred resizes accepted on pods_removed: +%v, want +1", got)
	}
	if got := observations(deferredFor) - timed; got != 1 {
		t.Errorf("%d deferred durations observed, want 1", got)
	}
	if n := testutil.CollectAndCount(metrics.PodPendingResizes); n != 0 {
		t.Errorf("%d pending resize series left, want none", n)
	}
	if got := testutil.ToFloat64(metrics.PodInProgressResizes); got != 1 {
		t.Errorf("in-progress resizes = %v, want 1", got)
	}
}

// A sync that created the sandbox of a pod with hostUsers: false is counted, and its
// failure too; other pods and syncs are not.
func TestRecordUserNamespacedStart(t *testing.T) {
	hostUsers := func(v *bool) *v1.Pod { p := testPod("u", "u"); p.Spec.HostUsers = v; return p }
	no, yes := false, true
	created := container.PodSyncResult{SyncResults: []*container.SyncResult{container.NewSyncResult(container.CreatePodSandbox, "u")}}
	failed := container.PodSyncResult{SyncResults: []*container.SyncResult{container.NewSyncResult(container.CreatePodSandbox, "u")}}
	failed.Fail(errors.New("creating a container failed"))
	for _, c := range []struct {
		name          string
		pod           *v1.Pod
		result        container.PodSyncResult
		started, errs float64
	}{
		{"hostUsers false, sandbox created", hostUsers(&no), created, 1, 0},
		{"hostUsers false, sandbox created, sync failed", hostUsers(&no), failed, 1, 1},
		{"hostUsers false, no new sandbox", hostUsers(&no), container.PodSyncResult{}, 0, 0},
		{"hostUsers true", hostUsers(&yes), failed, 0, 0},
		{"hostUsers unset", hostUsers(nil), created, 0, 0},
	} {
		started, errs := testutil.ToFloat64(metrics.StartedUserNamespacedPodsTotal), testutil.ToFloat64(metrics.StartedUserNamespacedPodsErrorsTotal)
		recordUserNamespacedStart(c.pod, c.result)
		if got := testutil.ToFloat64(metrics.StartedUserNamespacedPodsTotal) - started; got != c.started {
			t.Errorf("%s: started +%v, want +%v", c.name, got, c.started)
		}
		if got := testutil.ToFloat64(metrics.StartedUserNamespacedPodsErrorsTotal) - errs; got != c.errs {
			t.Errorf("%s: errors +%v, want +%v", c.name, got, c.errs)
		}
	}
}
