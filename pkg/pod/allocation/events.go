package allocation

import (
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// Event reasons of in-place resizes, as upstream's kubelet records them on the pod.
const (
	EventResizeDeferred   = "ResizeDeferred"
	EventResizeInfeasible = "ResizeInfeasible"
	EventResizeStarted    = "ResizeStarted"
	EventResizeCompleted  = "ResizeCompleted"
	EventResizeError      = "ResizeError"
)

// Message prefixes of the resize events.
const (
	ResizeStartedPrefix   = "Pod resize started"
	ResizeCompletedPrefix = "Pod resize completed"
	ResizeErrorPrefix     = "Pod resize error"
)

type containerAllocation struct {
	Name      string                  `json:"name"`
	Resources v1.ResourceRequirements `json:"resources,omitempty"`
}

// resourceSummary is the JSON that follows the prefix of a resize event: the pod's
// container resources, the generation they belong to and any error.
type resourceSummary struct {
	InitContainers []containerAllocation `json:"initContainers,omitempty"`
	Containers     []containerAllocation `json:"containers,omitempty"`
	Generation     int64                 `json:"generation"`
	Error          string                `json:"error,omitempty"`
}

// ResizeEventMessage is upstream's resize event message: prefix, then the resources of
// the pod's init and regular containers as JSON with the generation and errMsg.
func ResizeEventMessage(prefix string, pod *v1.Pod, generation int64, errMsg string) string {
	s := resourceSummary{Generation: generation, Error: errMsg}
	for _, c := range pod.Spec.InitContainers {
		s.InitContainers = append(s.InitContainers, containerAllocation{Name: c.Name, Resources: c.Resources})
	}
	for _, c := range pod.Spec.Containers {
		s.Containers = append(s.Containers, containerAllocation{Name: c.Name, Resources: c.Resources})
	}
	data, err := json.Marshal(s)
	if err != nil {
		return prefix
	}
	return fmt.Sprintf("%s: %s", prefix, data)
}

// resizePendingPrefix names the admission's reason (OutOfcpu, Infeasible, ...), as
// upstream does.
func resizePendingPrefix(reason string) string { return "Pod resize " + reason }
