package status

import (
	"errors"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// Pod-level resources in the pod status (upstream's InPlacePodLevelResourcesVerticalScaling,
// beta and on by default): status.allocatedResources is the pod's aggregate requests, and
// status.resources the pod's resources as its cgroup holds them once the pod runs.

// PodCgroupReader reads back what a pod's cgroup holds (the container manager). An error
// that wraps errors.ErrUnsupported says there is no pod cgroup to read (pod cgroups are
// not managed); the status then reads nothing, quietly.
type PodCgroupReader interface {
	// PodCgroupCPU returns the cgroup's cpu.shares (on cgroup v2, cpu.weight as shares
	// rounded down), its CFS quota (-1: none) and period in µs.
	PodCgroupCPU(pod *v1.Pod) (shares uint64, quota int64, period uint64, err error)
	// PodCgroupMemoryLimit returns the cgroup's memory limit in bytes; not positive: none.
	PodCgroupMemoryLimit(pod *v1.Pod) (int64, error)
}

// podAllocatedResources is status.allocatedResources: the pod's aggregate requests
// (pod-level resources, when set, win; overhead included).
func podAllocatedResources(pod *v1.Pod) v1.ResourceList {
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
}

// effectivePodResources is the pod's pod-level resources with the pod's aggregate
// requests and limits in them: what status.resources shows until the pod runs.
func effectivePodResources(pod *v1.Pod) *v1.ResourceRequirements {
	r := pod.Spec.Resources.DeepCopy()
	if r == nil {
		r = &v1.ResourceRequirements{}
	}
	r.Requests = podAllocatedResources(pod)
	r.Limits = resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	return r
}

// podCgroupValues is what a pod's cgroup says of the pod's resources; nil where it says
// nothing (no value, unlimited, or unreadable).
type podCgroupValues struct {
	shares                            *uint64 // as read, for the cgroup v2 round-trip rule
	cpuRequest, cpuLimit, memoryLimit *resource.Quantity
}

func readPodCgroup(pod *v1.Pod, reader PodCgroupReader) podCgroupValues {
	var out podCgroupValues
	if shares, quota, period, err := reader.PodCgroupCPU(pod); err != nil {
		logPodCgroupError(pod, err, "failed to read cpu cgroup config for the pod")
	} else {
		out.shares = &shares
		if m := sharesToMilliCPU(int64(shares)); m > 0 {
			out.cpuRequest = resource.NewMilliQuantity(m, resource.DecimalSI)
		}
		if period > 0 {
			if m := quotaToMilliCPU(quota, int64(period)); m > 0 {
				out.cpuLimit = resource.NewMilliQuantity(m, resource.DecimalSI)
			}
		}
	}
	if limit, err := reader.PodCgroupMemoryLimit(pod); err != nil {
		logPodCgroupError(pod, err, "failed to read memory cgroup config for the pod")
	} else if limit > 0 {
		out.memoryLimit = resource.NewQuantity(limit, resource.BinarySI)
	}
	return out
}

func logPodCgroupError(pod *v1.Pod, err error, msg string) {
	if !errors.Is(err, errors.ErrUnsupported) {
		klog.ErrorS(err, msg, "pod", klog.KObj(pod))
	}
}

// podLevelResources is status.resources. Until the API shows the pod Running it is the
// effective allocated resources. Then it is the pod-level resources (if any) with the
// values read back from the pod's cgroup, as upstream reports them:
//   - CPU request from the cgroup's shares, unless both it and the allocated pod-level
//     request are at or below the minimum shares, or the shares are what the allocated
//     request becomes through cgroup v2's coarse weight (then the allocated value stays);
//   - memory request: the pod-level one, else the pod's aggregate;
//   - CPU limit from the CFS quota, unless both it and the allocated limit are at or
//     below the smallest limit a quota can express;
//   - memory limit from the cgroup (cgroup v1's "no limit" included).
//
// Where the cgroup says nothing, the previous status's value of the Running pod stays.
// Without a reader the pod's cgroup is not read.
func podLevelResources(pod *v1.Pod, oldStatus v1.PodStatus, reader PodCgroupReader) *v1.ResourceRequirements {
	if pod.Status.Phase != v1.PodRunning || reader == nil {
		return effectivePodResources(pod)
	}
	actual := readPodCgroup(pod, reader)
	r := pod.Spec.Resources.DeepCopy()
	if r == nil {
		r = &v1.ResourceRequirements{}
	}
	if r.Requests == nil {
		r.Requests = v1.ResourceList{}
	}
	if r.Limits == nil {
		r.Limits = v1.ResourceList{}
	}
	var oldRequests, oldLimits v1.ResourceList
	if oldStatus.Phase == v1.PodRunning && oldStatus.Resources != nil {
		oldRequests, oldLimits = oldStatus.Resources.Requests, oldStatus.Resources.Limits
	}

	if actual.cpuRequest == nil {
		keepOld(r.Requests, v1.ResourceCPU, oldRequests)
	} else if allocated := r.Requests.Cpu().MilliValue(); actual.cpuRequest.MilliValue() > minShares || allocated > minShares {
		if *actual.shares != sharesThroughCPUWeight(uint64(criconfig.MilliCPUToShares(allocated))) {
			r.Requests[v1.ResourceCPU] = *actual.cpuRequest
		}
	}
	if _, ok := r.Requests[v1.ResourceMemory]; !ok {
		if q, ok := podAllocatedResources(pod)[v1.ResourceMemory]; ok {
			r.Requests[v1.ResourceMemory] = q
		}
	}
	if actual.cpuLimit == nil {
		keepOld(r.Limits, v1.ResourceCPU, oldLimits)
	} else if actual.cpuLimit.MilliValue() > minMilliCPULimit || r.Limits.Cpu().MilliValue() > minMilliCPULimit {
		r.Limits[v1.ResourceCPU] = *actual.cpuLimit
	}
	if actual.memoryLimit == nil {
		keepOld(r.Limits, v1.ResourceMemory, oldLimits)
	} else {
		r.Limits[v1.ResourceMemory] = *actual.memoryLimit
	}
	return r
}

// keepOld copies old[name], if any, into list.
func keepOld(list v1.ResourceList, name v1.ResourceName, old v1.ResourceList) {
	if q, ok := old[name]; ok {
		list[name] = q.DeepCopy()
	}
}

// sharesThroughCPUWeight is what cpu.shares read back as after being written to cgroup
// v2's cpu.weight (upstream's conversions both ways; the weight is much coarser, and
// reading rounds down).
func sharesThroughCPUWeight(shares uint64) uint64 {
	const maxShares, maxWeight = 262144, 10000
	weight := uint64(maxWeight)
	if shares < maxShares {
		weight = 1 + (max(shares, minShares)-minShares)*(maxWeight-1)/(maxShares-minShares)
	}
	return (weight-1)*(maxShares-minShares)/(maxWeight-1) + minShares
}
