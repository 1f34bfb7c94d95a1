// Package qos classifies pods into QoS classes and derives the OOM score
// adjustment of their containers, following upstream's
// pkg/apis/core/v1/helper/qos and pkg/kubelet/qos.
package qos

import (
	v1 "k8s.io/api/core/v1"

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

// ComputePodQOS computes the QoS class from CPU and memory alone:
//   - BestEffort: no container requests or limits anything;
//   - Guaranteed: every container limits both, and the pod's summed requests
//     equal its summed limits;
//   - Burstable: anything else.
//
// Pod-level resources, when set, replace the containers'. Like upstream it
// expects defaulted pods (requests copied from limits when only limits are
// given).
func ComputePodQOS(pod *v1.Pod) v1.PodQOSClass {
	requests, limits := v1.ResourceList{}, v1.ResourceList{}
	guaranteed := true
	if r := pod.Spec.Resources; r != nil && (len(r.Requests) > 0 || len(r.Limits) > 0) {
		addQOSResources(requests, r.Requests)
		if len(r.Limits) > 0 {
			guaranteed = addQOSResources(limits, r.Limits)
		}
	} else {
		// Ephemeral containers cannot set resources, so they do not count.
		for _, c := range append(append([]v1.Container{}, pod.Spec.Containers...), pod.Spec.InitContainers...) {
			addQOSResources(requests, c.Resources.Requests)
			if !addQOSResources(limits, c.Resources.Limits) {
				guaranteed = false
			}
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return v1.PodQOSBestEffort
	}
	if guaranteed && len(requests) == len(limits) && requestsMatchLimits(requests, limits) {
		return v1.PodQOSGuaranteed
	}
	return v1.PodQOSBurstable
}

// addQOSResources adds the positive CPU and memory quantities of list to sum
// and reports whether list had both.
func addQOSResources(sum, list v1.ResourceList) (hasCPUAndMemory bool) {
	found := 0
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		q, ok := list[name]
		if !ok || q.Sign() <= 0 {
			continue
		}
		found++
		total := q.DeepCopy()
		if prev, ok := sum[name]; ok {
			total.Add(prev)
		}
		sum[name] = total
	}
	return found == 2
}

func requestsMatchLimits(requests, limits v1.ResourceList) bool {
	for name, req := range requests {
		if lim, ok := limits[name]; !ok || lim.Cmp(req) != 0 {
			return false
		}
	}
	return true
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

	// defaultMemoryRequest is the memory the scheduler assumes for a
	// container that requests none; upstream uses it for sidecars.
	defaultMemoryRequest = 200 * 1024 * 1024
)

// OOMScoreAdj returns the OOM score adjustment for a container of the pod on
// a node with memoryCapacity bytes. Burstable containers get
// 1000 - 1000*request/capacity, kept within [2, 999] so that they always rank
// between Guaranteed and BestEffort; 999 when the capacity is unknown.
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
	adj := 1000 - (1000*c.Resources.Requests.Memory().Value())/memoryCapacity
	if isSidecar(pod, c) {
		adj = sidecarOOMScoreAdj(pod, c, memoryCapacity)
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

// sidecarOOMScoreAdj scores a sidecar (a restartable init container) from the
// smallest memory request among it and the regular containers, and one
// point higher when the sidecar's own request is that smallest, so that the
// sidecar is killed no later than the containers it serves.
func sidecarOOMScoreAdj(pod *v1.Pod, c *v1.Container, memoryCapacity int64) int64 {
	minRequest := memoryRequestOrDefault(c)
	for i := range pod.Spec.Containers {
		minRequest = min(minRequest, memoryRequestOrDefault(&pod.Spec.Containers[i]))
	}
	adj := 1000 - (1000*minRequest)/memoryCapacity
	if minRequest <= c.Resources.Requests.Memory().Value() {
		adj++
	}
	return adj
}

func memoryRequestOrDefault(c *v1.Container) int64 {
	if q, ok := c.Resources.Requests[v1.ResourceMemory]; ok {
		return q.Value()
	}
	return defaultMemoryRequest
}

func isSidecar(pod *v1.Pod, c *v1.Container) bool {
	for _, ic := range pod.Spec.InitContainers {
		if ic.Name == c.Name {
			return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
		}
	}
	return false
}

const (
	systemNodeCritical = "system-node-critical"
	// systemCriticalPriority is the lowest priority of the system-* classes.
	systemCriticalPriority = 2 * 1000000000
)

// isNodeCriticalPod reports whether the pod is critical (static, mirror or
// of system priority) and of the system-node-critical class.
func isNodeCriticalPod(pod *v1.Pod) bool {
	return isCriticalPod(pod) && pod.Spec.PriorityClassName == systemNodeCritical
}

func isCriticalPod(pod *v1.Pod) bool {
	if kubetypes.IsStaticPod(pod) || kubetypes.IsMirrorPod(pod) {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority
}
