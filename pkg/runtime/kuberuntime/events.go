package kuberuntime

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Event reasons, as upstream's pkg/kubelet/events.
const (
	eventCreatedContainer       = "Created"
	eventStartedContainer       = "Started"
	eventFailedToCreate         = "Failed"
	eventFailedToStart          = "Failed"
	eventKillingContainer       = "Killing"
	eventBackOffStartContainer  = "BackOff"
	eventFailedPostStartHook    = "FailedPostStartHook"
	eventFailedPreStopHook      = "FailedPreStopHook"
	eventSandboxChanged         = "SandboxChanged"
	eventFailedCreatePodSandbox = "FailedCreatePodSandBox"
	eventFailedStatusPodSandbox = "FailedPodSandBoxStatus"
	eventLifecycleHTTPFallback  = "LifecycleHTTPFallback"
)

// recordContainerEvent records an event on a container. The container ID is replaced by
// the container name in the message: runtime errors often quote the ID, and distinct IDs
// would defeat event deduplication.
func (m *Manager) recordContainerEvent(pod *v1.Pod, c *v1.Container, containerID, eventType, reason, format string, args ...any) {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	if containerID != "" {
		msg = strings.ReplaceAll(msg, containerID, c.Name)
	}
	m.recorder.Event(container.ContainerRef(pod, c), eventType, reason, msg)
}

// recordPodEvent records an event on a pod.
func (m *Manager) recordPodEvent(pod *v1.Pod, eventType, reason, format string, args ...any) {
	if pod == nil {
		klog.V(4).InfoS("Dropping event for a nil pod", "reason", reason)
		return
	}
	m.recorder.Eventf(container.PodRef(pod), eventType, reason, format, args...)
}
