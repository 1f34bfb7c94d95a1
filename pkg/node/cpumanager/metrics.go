package cpumanager

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/node/cpumanager/topology"
)

// metrics are upstream's kubelet_cpu_manager_* families (pkg/kubelet/metrics), names,
// help texts and labels included. The gauges are recomputed from the state after each
// change rather than adjusted by each allocation as upstream adjusts them, so that
// they stay exact when init containers' CPUs are reused.
type metrics struct {
	pinningRequests   prometheus.Counter
	pinningErrors     prometheus.Counter
	sharedPool        prometheus.Gauge
	exclusiveCPUs     prometheus.Gauge
	allocationPerNUMA *prometheus.GaugeVec
}

func newMetrics() *metrics {
	return &metrics{
		pinningRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "cpu_manager_pinning_requests_total",
			Help: "[ALPHA] The number of cpu core allocations which required pinning.",
		}),
		pinningErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "cpu_manager_pinning_errors_total",
			Help: "[ALPHA] The number of cpu core allocations which required pinning failed.",
		}),
		sharedPool: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "cpu_manager_shared_pool_size_millicores",
			Help: "[ALPHA] The size of the shared CPU pool for non-guaranteed QoS pods, in millicores.",
		}),
		exclusiveCPUs: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "cpu_manager_exclusive_cpu_allocation_count",
			Help: "[ALPHA] The total number of CPUs exclusively allocated to containers running on this node",
		}),
		allocationPerNUMA: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "cpu_manager_allocation_per_numa",
			Help: "[ALPHA] Number of CPUs allocated per NUMA node",
		}, []string{"numa_node"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.pinningRequests, m.pinningErrors, m.sharedPool, m.exclusiveCPUs, m.allocationPerNUMA}
}

// update sets the gauges: the shared pool is the default set less the reserved CPUs
// (what upstream calls the available CPUs), and every NUMA node with CPUs is reported,
// at zero when none of its CPUs is exclusive.
func (m *metrics) update(topo *topology.CPUTopology, shared, exclusive cpuset.CPUSet) {
	m.sharedPool.Set(float64(shared.Size() * 1000))
	m.exclusiveCPUs.Set(float64(exclusive.Size()))
	perNUMA := map[int]int{}
	for _, numa := range topo.CPUDetails.NUMANodes().List() {
		perNUMA[numa] = 0
	}
	for _, cpu := range exclusive.List() {
		if numa, err := topo.CPUNUMANodeID(cpu); err == nil {
			perNUMA[numa]++
		}
	}
	for numa, n := range perNUMA {
		m.allocationPerNUMA.WithLabelValues(strconv.Itoa(numa)).Set(float64(n))
	}
}
