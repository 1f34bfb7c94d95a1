package podresources

import "github.com/prometheus/client_golang/prometheus"

// Label values of server_api_version.
const (
	apiV1       = "v1"
	apiV1alpha1 = "v1alpha1"
)

// Metrics are upstream's kubelet_pod_resources_endpoint_* counters
// (pkg/kubelet/metrics/metrics.go), with their names, help texts and label.
type Metrics struct {
	requestsTotal          *prometheus.CounterVec
	requestsList           *prometheus.CounterVec
	requestsGetAllocatable *prometheus.CounterVec
	requestsGet            *prometheus.CounterVec
	// Upstream registers the error counters although no handler ever fails List or
	// GetAllocatableResources; they stay at zero here too.
	errorsList           *prometheus.CounterVec
	errorsGetAllocatable *prometheus.CounterVec
	errorsGet            *prometheus.CounterVec
}

// NewMetrics builds the counters, unregistered.
func NewMetrics() *Metrics {
	return &Metrics{
		requestsTotal: endpointCounter("pod_resources_endpoint_requests_total",
			"Cumulative number of requests to the PodResource endpoint. Broken down by server api version."),
		requestsList: endpointCounter("pod_resources_endpoint_requests_list",
			"Number of requests to the PodResource List endpoint. Broken down by server api version."),
		requestsGetAllocatable: endpointCounter("pod_resources_endpoint_requests_get_allocatable",
			"Number of requests to the PodResource GetAllocatableResources endpoint. Broken down by server api version."),
		requestsGet: endpointCounter("pod_resources_endpoint_requests_get",
			"Number of requests to the PodResource Get endpoint. Broken down by server api version."),
		errorsList: endpointCounter("pod_resources_endpoint_errors_list",
			"Number of requests to the PodResource List endpoint which returned error. Broken down by server api version."),
		errorsGetAllocatable: endpointCounter("pod_resources_endpoint_errors_get_allocatable",
			"Number of requests to the PodResource GetAllocatableResources endpoint which returned error. Broken down by server api version."),
		errorsGet: endpointCounter("pod_resources_endpoint_errors_get",
			"Number of requests to the PodResource Get endpoint which returned error. Broken down by server api version."),
	}
}

// orNew returns m, or unregistered counters when m is nil, so a server built without
// metrics still counts somewhere instead of panicking.
func (m *Metrics) orNew() *Metrics {
	if m == nil {
		return NewMetrics()
	}
	return m
}

// endpointCounter is an ALPHA kubelet counter by server_api_version; the "[ALPHA] " help
// prefix is what upstream's component-base metrics show once registered.
func endpointCounter(name, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "kubelet",
		Name:      name,
		Help:      "[ALPHA] " + help,
	}, []string{"server_api_version"})
}

// Collectors returns the counters, for the caller to register on /metrics.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.requestsTotal, m.requestsList, m.requestsGetAllocatable, m.requestsGet,
		m.errorsList, m.errorsGetAllocatable, m.errorsGet,
	}
}
