package pleg

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// containerStates are the states kubelet_running_containers reports, zero included so a
// state that empties out does not keep its last count.
var containerStates = []container.State{
	container.ContainerStateCreated, container.ContainerStateRunning,
	container.ContainerStateExited, container.ContainerStateUnknown,
}

// recordRunning updates kubelet_running_pods (pods with a running sandbox) and
// kubelet_running_containers from a relist: nothing else lists the runtime that often.
func recordRunning(pods []*container.Pod) {
	count := map[container.State]int{}
	sandboxes := 0
	for _, pod := range pods {
		for _, c := range pod.Containers {
			count[c.State]++
		}
		if hasRunningSandbox(pod) {
			sandboxes++
		}
	}
	for _, s := range containerStates {
		metrics.RunningContainerCount.WithLabelValues(string(s)).Set(float64(count[s]))
	}
	metrics.RunningPodCount.Set(float64(sandboxes))
}

func hasRunningSandbox(pod *container.Pod) bool {
	for _, s := range pod.Sandboxes {
		if s.State == container.ContainerStateRunning {
			return true
		}
	}
	return false
}

// The evented PLEG's metrics, with upstream's names and help texts. pkg/app registers
// them at start whichever PLEG runs, as upstream v1.37 does (its Register() no longer
// looks at the EventedPLEG gate); they have samples only with the evented PLEG.
var (
	eventedConnErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Subsystem: "kubelet", Name: "evented_pleg_connection_error_count",
		Help: "[ALPHA] The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
	})
	eventedConnSuccesses = prometheus.NewCounter(prometheus.CounterOpts{
		Subsystem: "kubelet", Name: "evented_pleg_connection_success_count",
		Help: "[ALPHA] The number of times a streaming client was obtained to receive CRI Events.",
	})
	eventedConnLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: "kubelet", Name: "evented_pleg_connection_latency_seconds",
		Help:    "[ALPHA] The latency of streaming connection with the CRI runtime, measured in seconds.",
		Buckets: prometheus.DefBuckets,
	})
)

// EventedMetrics returns the kubelet_evented_pleg_* metrics, for the /metrics registry.
func EventedMetrics() []prometheus.Collector {
	return []prometheus.Collector{eventedConnErrors, eventedConnSuccesses, eventedConnLatency}
}
