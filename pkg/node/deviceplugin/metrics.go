package deviceplugin

import "github.com/prometheus/client_golang/prometheus"

// RegistrationTotal is upstream's kubelet_device_plugin_registration_total: every
// Register call, valid or not, by the resource name it asked for.
var RegistrationTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Subsystem: "kubelet",
	Name:      "device_plugin_registration_total",
	Help:      "[ALPHA] Cumulative number of device plugin registrations. Broken down by resource name.",
}, []string{"resource_name"})

// AllocationDuration is upstream's kubelet_device_plugin_alloc_duration_seconds: how
// long a plugin's Allocate RPC took, failed ones included.
var AllocationDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Subsystem: "kubelet",
	Name:      "device_plugin_alloc_duration_seconds",
	Help:      "[ALPHA] Duration in seconds to serve a device plugin Allocation request. Broken down by resource name.",
	Buckets:   prometheus.DefBuckets,
}, []string{"resource_name"})

// Collectors returns the device manager's metrics, for the kubelet's /metrics registry.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{RegistrationTotal, AllocationDuration}
}
