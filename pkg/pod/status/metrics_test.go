package status

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/metrics"
)

// Each container that terminates is counted once, by type, exit code and reason.
func TestTerminatedContainersCountedOnce(t *testing.T) {
	m, _ := testManager(nil)
	pod := testPod(v1.RestartPolicyAlways, "a", "b")
	completed := metrics.TerminatedContainersTotal.WithLabelValues(metrics.Container, "0", "Completed")
	failed := metrics.TerminatedContainersTotal.WithLabelValues(metrics.Container, "1", "Error")
	c0, f0 := testutil.ToFloat64(completed), testutil.ToFloat64(failed)

	m.SetPodStatus(pod, generate(pod, runtimeStatus(running("a", "id-a", 5), running("b", "id-b", 5)), v1.PodStatus{}, GenerateOptions{}))
	m.SetPodStatus(pod, generate(pod, runtimeStatus(exited("a", "id-a", 5, 0, "Completed"), running("b", "id-b", 5)), v1.PodStatus{}, GenerateOptions{}))
	m.SetPodStatus(pod, generate(pod, runtimeStatus(exited("a", "id-a", 5, 0, "Completed"), exited("b", "id-b", 5, 1, "Error")), v1.PodStatus{}, GenerateOptions{}))
	// The same terminations again (a resync): not counted again.
	st, _ := m.GetPodStatus(pod.UID)
	m.SetPodStatus(pod, st)

	if d := testutil.ToFloat64(completed) - c0; d != 1 {
		t.Errorf("Completed counted %v times, want 1", d)
	}
	if d := testutil.ToFloat64(failed) - f0; d != 1 {
		t.Errorf("Error counted %v times, want 1", d)
	}
}

// The sync duration runs from the first change the API server has not seen to its
// acknowledgement, across intervening changes.
func TestStatusSyncDuration(t *testing.T) {
	syncer := &fakeSyncer{synced: make(chan struct{}, 10)}
	m, now := testManager(syncer)
	pod := testPod(v1.RestartPolicyAlways, "a")
	n0, s0 := observed(metrics.PodStatusSyncDuration)

	*now = at(200)
	m.SetPodStatus(pod, runningPodStatus(pod))
	*now = at(201)
	changed := runningPodStatus(pod)
	changed.ContainerStatuses[0].RestartCount = 1
	m.SetPodStatus(pod, changed)
	*now = at(203)
	m.syncBatch(context.Background(), false)
	if n, s := observed(metrics.PodStatusSyncDuration); n != n0+1 || s-s0 != 3 {
		t.Fatalf("%d observations adding %vs, want 1 adding 3s", n-n0, s-s0)
	}

	// The next change starts the clock afresh.
	*now = at(210)
	changed.ContainerStatuses[0].RestartCount = 2
	m.SetPodStatus(pod, changed)
	*now = at(210).Add(500 * time.Millisecond)
	m.syncBatch(context.Background(), false)
	if n, s := observed(metrics.PodStatusSyncDuration); n != n0+2 || s-s0 != 3.5 {
		t.Errorf("%d observations adding %vs, want 2 adding 3.5s", n-n0, s-s0)
	}
}

func observed(h prometheus.Histogram) (uint64, float64) {
	var m dto.Metric
	_ = h.Write(&m)
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}
