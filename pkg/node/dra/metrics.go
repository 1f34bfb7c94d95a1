package dra

import (
	"github.com/prometheus/client_golang/prometheus"
)

// anyDriver is dra_resource_claims_in_use's driver_name for all claims, whatever their
// drivers.
const anyDriver = "<any>"

// durationBuckets are upstream's DRADurationBuckets.
var durationBuckets = prometheus.ExponentialBucketsRange(.1, 40, 15)

// metrics are upstream's DRA metrics (pkg/kubelet/metrics), one set per manager so that
// tests do not share them. The help texts carry the "[ALPHA] " prefix that upstream's
// metrics framework adds.
type metrics struct {
	operationsDuration *prometheus.HistogramVec
	grpcDuration       *prometheus.HistogramVec
	prepareSkips       *prometheus.CounterVec
	unprepareSkips     *prometheus.CounterVec
	claimsInUse        *claimsInUseCollector
}

func newMetrics(cache *claimCache) *metrics {
	return &metrics{
		operationsDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "dra",
			Name:      "operations_duration_seconds",
			Help:      "[ALPHA] Latency histogram in seconds for the duration of handling all ResourceClaims referenced by a pod when the pod starts or stops. Identified by the name of the operation (PrepareResources or UnprepareResources) and separated by the success of the operation. The number of failed operations is provided through the histogram's overall count.",
			Buckets:   durationBuckets,
		}, []string{"operation_name", "is_error"}),
		grpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "dra",
			Name:      "grpc_operations_duration_seconds",
			Help:      "[ALPHA] Duration in seconds of the DRA gRPC operations",
			Buckets:   durationBuckets,
		}, []string{"driver_name", "method_name", "grpc_status_code"}),
		prepareSkips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "dra",
			Name:      "node_prepare_skips_total",
			Help:      "[ALPHA] Cumulative number of times NodePrepareResources gRPC calls were skipped due to SkipNodeOperations.",
		}, []string{"driver_name"}),
		unprepareSkips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "dra",
			Name:      "node_unprepare_skips_total",
			Help:      "[ALPHA] Cumulative number of times NodeUnprepareResources gRPC calls were skipped due to SkipNodeOperations.",
		}, []string{"driver_name"}),
		claimsInUse: &claimsInUseCollector{cache: cache},
	}
}

// claimsInUseDesc is upstream's dra_resource_claims_in_use.
var claimsInUseDesc = prometheus.NewDesc("dra_resource_claims_in_use",
	"[ALPHA] The number of ResourceClaims that are currently in use on the node, by driver name (driver_name label value) and across all drivers (special value <any> for driver_name). Note that the sum of all by-driver counts is not the total number of in-use ResourceClaims because the same ResourceClaim might use devices from different drivers. Instead, use the count for the <any> driver_name.",
	[]string{"driver_name"}, nil)

// claimsInUseCollector reports the prepared claims at scrape time, so that drivers
// that are gone stop being listed.
type claimsInUseCollector struct {
	cache *claimCache
}

func (c *claimsInUseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- claimsInUseDesc }

func (c *claimsInUseCollector) Collect(ch chan<- prometheus.Metric) {
	c.cache.RLock()
	counts := c.cache.claimsInUse()
	c.cache.RUnlock()
	for driver, n := range counts {
		ch <- prometheus.MustNewConstMetric(claimsInUseDesc, prometheus.GaugeValue, float64(n), driver)
	}
}

// Collectors returns the manager's metrics, for the kubelet's /metrics registry.
func (m *Manager) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.metrics.operationsDuration, m.metrics.grpcDuration,
		m.metrics.prepareSkips, m.metrics.unprepareSkips, m.metrics.claimsInUse,
	}
}
