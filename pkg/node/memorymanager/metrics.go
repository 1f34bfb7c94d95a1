package memorymanager

import "github.com/prometheus/client_golang/prometheus"

// metrics are upstream's memory manager metrics (pkg/kubelet/metrics), one set per
// manager so that tests do not share them. The help texts carry the "[ALPHA] " prefix
// upstream's metrics framework adds. Upstream's resource_manager_* metrics are only
// registered with the PodLevelResourceManagers feature, which nodelet does not have.
type metrics struct {
	pinningRequests prometheus.Counter
	pinningErrors   prometheus.Counter
}

func newMetrics() *metrics {
	return &metrics{
		pinningRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "memory_manager_pinning_requests_total",
			Help:      "[ALPHA] The number of memory pages allocations which required pinning.",
		}),
		pinningErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "memory_manager_pinning_errors_total",
			Help:      "[ALPHA] The number of memory pages allocations which required pinning that failed.",
		}),
	}
}

// Collectors returns the manager's metrics, for the kubelet's /metrics registry. They
// are there whatever the policy, as upstream registers them.
func (m *Manager) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.metrics.pinningRequests, m.metrics.pinningErrors}
}
