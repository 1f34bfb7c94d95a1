package eviction

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/metrics"
)

func histogram(o prometheus.Observer) (uint64, float64) {
	var m dto.Metric
	_ = o.(prometheus.Metric).Write(&m)
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// An eviction records how old the stats behind the threshold met are, by signal, and
// counts the eviction; a check that evicts nobody records nothing.
func TestEvictionRecordsStatsAgeAndCount(t *testing.T) {
	h := newHarness(t, Config{Thresholds: mustThresholds(t, map[string]string{"memory.available": "1Gi"}, nil, nil, nil)})
	memoryPods(h)
	// The stats are 3s old by the time the manager acts on them.
	h.mgr.deps.Summary = func(ctx context.Context) (*statsapi.Summary, error) {
		s, err := h.buildSummary(ctx)
		h.step(3 * time.Second)
		return s, err
	}
	age := metrics.EvictionStatsAge.WithLabelValues(string(SignalMemoryAvailable))
	evictions := metrics.Evictions.WithLabelValues(string(SignalMemoryAvailable))
	countBefore, sumBefore := histogram(age)
	evictedBefore := counter(evictions)

	if evicted := h.sync(); len(evicted) != 0 {
		t.Fatalf("evicted %v without pressure", h.killedNames())
	}
	if n, _ := histogram(age); n != countBefore {
		t.Fatal("stats age recorded without an eviction")
	}

	h.setNode(func(n *fakeNode) { n.memWorkingSet = n.memCapacity - 500*Mi })
	if evicted := h.sync(); len(evicted) != 1 {
		t.Fatalf("evicted %v, want one pod", h.killedNames())
	}
	n, sum := histogram(age)
	if n != countBefore+1 || sum-sumBefore != 3 {
		t.Errorf("stats age: %d observations summing %vs, want one of 3s", n-countBefore, sum-sumBefore)
	}
	if got := counter(evictions) - evictedBefore; got != 1 {
		t.Errorf("kubelet_evictions{memory.available} grew by %v, want 1", got)
	}
}

func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}
