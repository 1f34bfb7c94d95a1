package kuberuntime

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
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
	eventFailedMountVolume      = "FailedMount"
	eventLifecycleHTTPFallback  = "LifecycleHTTPFallback"
)

// podRef is the event reference of a pod.
func podRef(pod *v1.Pod) *v1.ObjectReference {
	return &v1.ObjectReference{
		Kind:            "Pod",
		APIVersion:      "v1",
		Name:            pod.Name,
		Namespace:       pod.Namespace,
		UID:             pod.UID,
		ResourceVersion: pod.ResourceVersion,
	}
}

// containerRef is the event reference of a container: the pod plus the field path of the
// container in its spec (upstream's GenerateContainerRef).
func containerRef(pod *v1.Pod, c *v1.Container) *v1.ObjectReference {
	ref := podRef(pod)
	ref.FieldPath = containerFieldPath(pod, c)
	return ref
}

func containerFieldPath(pod *v1.Pod, c *v1.Container) string {
	for _, list := range []struct {
		field string
		names []string
	}{
		{"spec.containers", containerNames(pod.Spec.Containers)},
		{"spec.initContainers", containerNames(pod.Spec.InitContainers)},
		{"spec.ephemeralContainers", ephemeralNames(pod.Spec.EphemeralContainers)},
	} {
		for i, name := range list.names {
			if name != c.Name {
				continue
			}
			if name == "" {
				return fmt.Sprintf("%s[%d]", list.field, i)
			}
			return fmt.Sprintf("%s{%s}", list.field, name)
		}
	}
	return "implicitly required container " + c.Name
}

func containerNames(cs []v1.Container) []string {
	out := make([]string, len(cs))
	for i := range cs {
		out[i] = cs[i].Name
	}
	return out
}

func ephemeralNames(cs []v1.EphemeralContainer) []string {
	out := make([]string, len(cs))
	for i := range cs {
		out[i] = cs[i].Name
	}
	return out
}

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
	m.recorder.Event(containerRef(pod, c), eventType, reason, msg)
}

// recordPodEvent records an event on a pod.
func (m *Manager) recordPodEvent(pod *v1.Pod, eventType, reason, format string, args ...any) {
	if pod == nil {
		klog.V(4).InfoS("Dropping event for a nil pod", "reason", reason)
		return
	}
	m.recorder.Eventf(podRef(pod), eventType, reason, format, args...)
}
