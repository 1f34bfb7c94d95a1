package pleg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/pkg/container"
)

// The PLEG's metrics, with upstream's names so existing dashboards and alerts keep working.
// They are package-wide like upstream's (there is one PLEG per kubelet); Register exposes
// them on a registry.
var (
	relistDurationSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: "kubelet", Name: "pleg_relist_duration_seconds",
		Help:    "Duration in seconds for relisting pods in PLEG.",
		Buckets: prometheus.DefBuckets,
	})
	relistIntervalSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: "kubelet", Name: "pleg_relist_interval_seconds",
		Help:    "Interval in seconds between relisting in PLEG.",
		Buckets: prometheus.DefBuckets,
	})
	discardEvents = prometheus.NewCounter(prometheus.CounterOpts{
		Subsystem: "kubelet", Name: "pleg_discard_events",
		Help: "The number of discard events in PLEG.",
	})
	lastSeenSeconds = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: "kubelet", Name: "pleg_last_seen_seconds",
		Help: "Timestamp in seconds when PLEG was last seen active.",
	})
	// Upstream's relist also counts what it found; nothing else lists the runtime that often.
	runningPods = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: "kubelet", Name: "running_pods",
		Help: "Number of pods that have a running pod sandbox",
	})
	runningContainers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "kubelet", Name: "running_containers",
		Help: "Number of containers currently running",
	}, []string{"container_state"})
)

// Register exposes the PLEG metrics on reg: kubelet_pleg_relist_duration_seconds,
// kubelet_pleg_relist_interval_seconds, kubelet_pleg_discard_events,
// kubelet_pleg_last_seen_seconds, kubelet_running_pods and kubelet_running_containers.
// Registering twice on the same registry is harmless.
func Register(reg prometheus.Registerer) error {
	collectors := []prometheus.Collector{
		relistDurationSeconds, relistIntervalSeconds, discardEvents, lastSeenSeconds,
		runningPods, runningContainers,
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil && !isRegistered(err, c) {
			return err
		}
	}
	return nil
}

// isRegistered reports whether err says that c itself is already on the registry.
func isRegistered(err error, c prometheus.Collector) bool {
	var already prometheus.AlreadyRegisteredError
	return errors.As(err, &already) && already.ExistingCollector == c
}

// containerStates are the states kubelet_running_containers reports, zero included so a
// state that empties out does not keep its last count.
var containerStates = []container.State{
	container.ContainerStateCreated, container.ContainerStateRunning,
	container.ContainerStateExited, container.ContainerStateUnknown,
}

// recordRunning updates kubelet_running_pods (pods with a running sandbox) and
// kubelet_running_containers from a relist.
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
		runningContainers.WithLabelValues(string(s)).Set(float64(count[s]))
	}
	runningPods.Set(float64(sandboxes))
}

func hasRunningSandbox(pod *container.Pod) bool {
	for _, s := range pod.Sandboxes {
		if s.State == container.ContainerStateRunning {
			return true
		}
	}
	return false
}
