// Package qos classifies pods into QoS classes and derives the OOM score
// adjustment of their containers, following upstream's
// pkg/apis/core/v1/helper/qos and pkg/kubelet/qos.
package qos

import (
	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// GetPodQOS returns the pod's QoS class: the one recorded in its status when
// set (the class is fixed at creation and must not change on resize),
// computed from its resources otherwise.
func GetPodQOS(pod *v1.Pod) v1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	return ComputePodQOS(pod)
}

// ComputePodQOS computes the QoS class from CPU and memory alone, as upstream
// v1.37 does (PodLevelResourcesFixKubeletQOSClass). Each set of requirements
// has a class of its own:
//   - BestEffort: no request or limit for either;
//   - Guaranteed: both requested, each request equal to its limit;
//   - Burstable: anything else.
//
// When the pod sets pod-level resources of a kind that pod-level resources
// support (cpu, memory, hugepages-<size>), the pod's class is that of its
// pod-level requirements; otherwise it is its containers' common class,
// Burstable when they differ. Like upstream it expects defaulted pods
// (requests copied from limits when only limits are given).
func ComputePodQOS(pod *v1.Pod) v1.PodQOSClass {
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		return requirementsQOS(pod.Spec.Resources)
	}
	// Ephemeral containers cannot set resources, so they do not count.
	var class v1.PodQOSClass
	for _, containers := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range containers {
			c := requirementsQOS(&containers[i].Resources)
			switch {
			case c == v1.PodQOSBurstable:
				return c
			case class == "":
				class = c
			case class != c:
				return v1.PodQOSBurstable
			}
		}
	}
	if class == "" { // no containers
		return v1.PodQOSBestEffort
	}
	return class
}

// requirementsQOS is the class of one set of requirements: that of its CPU and
// of its memory when they agree, Burstable otherwise.
func requirementsQOS(r *v1.ResourceRequirements) v1.PodQOSClass {
	cpu, memory := resourceQOS(r, v1.ResourceCPU), resourceQOS(r, v1.ResourceMemory)
	if cpu != memory {
		return v1.PodQOSBurstable
	}
	return cpu
}

// resourceQOS classifies one resource: BestEffort when neither requested nor
// limited, Guaranteed when requested at its limit, Burstable otherwise.
func resourceQOS(r *v1.ResourceRequirements, name v1.ResourceName) v1.PodQOSClass {
	request, limit := r.Requests[name], r.Limits[name]
	switch {
	case !request.Equal(limit):
		return v1.PodQOSBurstable
	case request.IsZero():
		return v1.PodQOSBestEffort
	}
	return v1.PodQOSGuaranteed
}

// OOM score adjustments (see https://lwn.net/Articles/391222/): lower is
// killed later.
const (
	// KubeletOOMScoreAdj is the adjustment for the node agent itself.
	KubeletOOMScoreAdj = -999
	// GuaranteedOOMScoreAdj is for Guaranteed and node-critical pods.
	GuaranteedOOMScoreAdj = -997
	// BestEffortOOMScoreAdj is for BestEffort pods: killed first.
	BestEffortOOMScoreAdj = 1000
)

// OOMScoreAdj returns the OOM score adjustment for a container of the pod on
// a node with memoryCapacity bytes. Burstable containers get
// 1000 - 1000*request/capacity, kept within [3, 999] so that they always rank
// between Guaranteed and BestEffort; 999 when the capacity is unknown. With a
// pod-level memory request, the part of it no container requests is shared
// equally by all containers (init containers included) and added to each
// one's request. A sidecar scores no higher than the regular container with
// the smallest request, so that it is not killed before the containers it
// serves.
func OOMScoreAdj(pod *v1.Pod, c *v1.Container, memoryCapacity int64) int {
	if isNodeCriticalPod(pod) {
		return GuaranteedOOMScoreAdj
	}
	switch GetPodQOS(pod) {
	case v1.PodQOSGuaranteed:
		return GuaranteedOOMScoreAdj
	case v1.PodQOSBestEffort:
		return BestEffortOOMScoreAdj
	}
	if memoryCapacity <= 0 {
		return BestEffortOOMScoreAdj - 1
	}
	share := unrequestedPodMemoryShare(pod)
	score := func(request int64) int64 { return 1000 - (1000*(request+share))/memoryCapacity }
	adj := score(c.Resources.Requests.Memory().Value())
	if isSidecar(pod, c) && len(pod.Spec.Containers) > 0 {
		adj = min(adj, score(minRegularMemoryRequest(pod)))
	}
	return clampBurstable(int(adj))
}

func clampBurstable(adj int) int {
	// A Guaranteed container using all its memory scores about 10: stay above.
	if adj < 1000+GuaranteedOOMScoreAdj {
		return 1000 + GuaranteedOOMScoreAdj
	}
	// Stay below BestEffort.
	if adj == BestEffortOOMScoreAdj {
		return adj - 1
	}
	return adj
}

// unrequestedPodMemoryShare is each container's share of the pod-level memory
// request that its containers do not request themselves; 0 without a pod-level
// memory request.
func unrequestedPodMemoryShare(pod *v1.Pod) int64 {
	if !resourcehelper.IsPodLevelRequestsSet(pod) || pod.Spec.Resources.Requests.Memory().IsZero() {
		return 0
	}
	requested := resourcehelper.AggregateContainerRequests(pod, resourcehelper.PodResourcesOptions{})
	unrequested := max(pod.Spec.Resources.Requests.Memory().Value()-requested.Memory().Value(), 0)
	return unrequested / int64(len(pod.Spec.Containers)+len(pod.Spec.InitContainers))
}

// minRegularMemoryRequest is the smallest memory request of the pod's regular
// containers (0 for one that requests none).
func minRegularMemoryRequest(pod *v1.Pod) int64 {
	smallest := pod.Spec.Containers[0].Resources.Requests.Memory().Value()
	for i := range pod.Spec.Containers[1:] {
		smallest = min(smallest, pod.Spec.Containers[i+1].Resources.Requests.Memory().Value())
	}
	return smallest
}

// isSidecar reports whether c is one of the pod's restartable init containers.
func isSidecar(pod *v1.Pod, c *v1.Container) bool {
	if c.RestartPolicy == nil || *c.RestartPolicy != v1.ContainerRestartPolicyAlways {
		return false
	}
	for _, ic := range pod.Spec.InitContainers {
		if ic.Name == c.Name {
			return true
		}
	}
	return false
}

const systemNodeCritical = "system-node-critical"

// isNodeCriticalPod reports whether the pod is critical (static, mirror or
// of system priority) and of the system-node-critical class.
func isNodeCriticalPod(pod *v1.Pod) bool {
	return kubetypes.IsCriticalPod(pod) && pod.Spec.PriorityClassName == systemNodeCritical
}
