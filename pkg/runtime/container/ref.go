package container

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// PodRef is the event reference of a pod.
func PodRef(pod *v1.Pod) *v1.ObjectReference {
	return &v1.ObjectReference{
		Kind:            "Pod",
		APIVersion:      "v1",
		Name:            pod.Name,
		Namespace:       pod.Namespace,
		UID:             pod.UID,
		ResourceVersion: pod.ResourceVersion,
	}
}

// ContainerRef is the event reference of a container: the pod plus the field path of the
// container in its spec (upstream's GenerateContainerRef).
func ContainerRef(pod *v1.Pod, c *v1.Container) *v1.ObjectReference {
	ref := PodRef(pod)
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
