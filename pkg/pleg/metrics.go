package pleg

import (
	"github.com/nodelet/nodelet/pkg/container"
	"github.com/nodelet/nodelet/pkg/metrics"
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
