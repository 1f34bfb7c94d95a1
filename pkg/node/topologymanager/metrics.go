package topologymanager

import "github.com/prometheus/client_golang/prometheus"

// AdmissionRequestsTotal is upstream's kubelet_topology_manager_admission_requests_total:
// every pod the topology manager admitted or rejected.
var AdmissionRequestsTotal = prometheus.NewCounter(prometheus.CounterOpts{
	Subsystem: "kubelet",
	Name:      "topology_manager_admission_requests_total",
	Help:      "[ALPHA] The number of admission requests where resources have to be aligned.",
})

// AdmissionErrorsTotal is upstream's kubelet_topology_manager_admission_errors_total:
// pods rejected by the policy or by a provider's Allocate (not under the none policy).
var AdmissionErrorsTotal = prometheus.NewCounter(prometheus.CounterOpts{
	Subsystem: "kubelet",
	Name:      "topology_manager_admission_errors_total",
	Help:      "[ALPHA] The number of admission request failures where resources could not be aligned.",
})

// AdmissionDuration is upstream's kubelet_topology_manager_admission_duration_ms.
var AdmissionDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
	Subsystem: "kubelet",
	Name:      "topology_manager_admission_duration_ms",
	Help:      "[ALPHA] Duration in milliseconds to serve a pod admission request.",
	Buckets:   prometheus.ExponentialBuckets(.05, 2, 15),
})

// Collectors returns the topology manager's metrics, for the kubelet's /metrics registry.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{AdmissionRequestsTotal, AdmissionErrorsTotal, AdmissionDuration}
}
