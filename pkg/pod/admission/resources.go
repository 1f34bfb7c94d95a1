package admission

import (
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodelet/nodelet/pkg/resourcename"
)

// amounts are resource quantities in the units the fit check compares: millicores for
// cpu, plain integers (bytes, pages, devices) for everything else.
type amounts map[v1.ResourceName]int64

// toAmounts keeps the resources the fit check knows: cpu, memory, ephemeral-storage, and
// scalar resources (hugepages, extended, kubernetes.io/-prefixed, attachable volumes).
// pods is not a request; node allocatable's pods is read on its own.
func toAmounts(list v1.ResourceList) amounts {
	out := amounts{}
	for name, q := range list {
		switch {
		case name == v1.ResourceCPU:
			out[name] = q.MilliValue()
		case name == v1.ResourceMemory, name == v1.ResourceEphemeralStorage, isScalarResource(name):
			out[name] = q.Value()
		}
	}
	return out
}

// podRequests is what a pod being admitted asks for: containers summed, init containers
// as the peak of each one plus the restartable (sidecar) init containers before it,
// restartable init containers added to the total, pod-level requests replacing the
// containers' for cpu, memory and hugepages, then pod overhead.
func podRequests(pod *v1.Pod) amounts {
	return toAmounts(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}))
}

// heldBy is what an admitted pod holds. Like upstream's node info it also counts the
// resources in the pod's status, so that a pod being resized holds the larger of its
// desired, allocated and actual resources.
func heldBy(pod *v1.Pod) amounts {
	return toAmounts(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{
		UseStatusResources: true,
		InPlacePodLevelResourcesVerticalScalingEnabled: true,
	}))
}

// resourceFailures is the scheduler's noderesources.Fits as the kubelet runs it: the pod
// count first, then cpu, memory, ephemeral-storage and each scalar resource the pod
// requests, against allocatable minus what the other active pods hold. Upstream checks
// scalar resources in map order; here they are sorted by name so the reported one is
// stable.
func resourceFailures(pod *v1.Pod, others []*v1.Pod, node *v1.Node) []failure {
	var failures []failure
	allowedPods := node.Status.Allocatable.Pods().Value()
	if int64(len(others))+1 > allowedPods {
		failures = append(failures, insufficientResource(v1.ResourcePods, 1, int64(len(others)), allowedPods))
	}
	requested := podRequests(pod)
	if len(requested) == 0 {
		return failures
	}
	allocatable := toAmounts(node.Status.Allocatable)
	used := amounts{}
	for _, p := range others {
		for name, v := range heldBy(p) {
			used[name] += v
		}
	}
	names := []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage}
	var scalars []v1.ResourceName
	for name := range requested {
		if !slices.Contains(names, name) {
			scalars = append(scalars, name)
		}
	}
	slices.Sort(scalars)
	for _, name := range append(names, scalars...) {
		req := requested[name]
		if req > 0 && req > allocatable[name]-used[name] {
			failures = append(failures, insufficientResource(name, req, used[name], allocatable[name]))
		}
	}
	return failures
}

// withoutMissingExtendedResources returns a copy of pod whose containers and init
// containers no longer request the extended resources the node does not list in its
// allocatable (cluster-level resources), nor those a DRA claim provides. As upstream
// notes, a static pod asking for a node-level extended resource the node lacks is
// therefore admitted. Overhead and pod-level resources are left alone, as upstream.
func withoutMissingExtendedResources(pod *v1.Pod, node *v1.Node) *v1.Pod {
	drop := func(name v1.ResourceName, container string) bool {
		if resourcename.IsDRAExtended(name) && backedByDRA(pod, name, container) {
			return true
		}
		_, onNode := node.Status.Allocatable[name]
		return resourcename.IsExtended(name) && !onNode
	}
	filter := func(containers []v1.Container) {
		for i := range containers {
			kept := v1.ResourceList{}
			for name, q := range containers[i].Resources.Requests {
				if !drop(name, containers[i].Name) {
					kept[name] = q
				}
			}
			containers[i].Resources.Requests = kept
		}
	}
	out := pod.DeepCopy()
	filter(out.Spec.Containers)
	filter(out.Spec.InitContainers)
	return out
}

// backedByDRA reports whether a DRA claim of the pod provides the container's extended
// resource (status.extendedResourceClaimStatus, set by the scheduler).
func backedByDRA(pod *v1.Pod, name v1.ResourceName, container string) bool {
	claims := pod.Status.ExtendedResourceClaimStatus
	if claims == nil {
		return false
	}
	for _, m := range claims.RequestMappings {
		if v1.ResourceName(m.ResourceName) == name && m.ContainerName == container {
			return true
		}
	}
	return false
}

func isScalarResource(name v1.ResourceName) bool {
	return resourcename.IsExtended(name) ||
		strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) ||
		strings.Contains(string(name), v1.ResourceDefaultNamespacePrefix) ||
		strings.HasPrefix(string(name), v1.ResourceAttachableVolumesPrefix)
}
