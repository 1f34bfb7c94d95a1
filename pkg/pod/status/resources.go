package status

import (
	"math"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// cgroup CPU constants (upstream's pkg/kubelet/cm).
const (
	minShares      = 2
	sharesPerCPU   = 1024
	milliCPUToCPU  = 1000
	quotaPeriod    = 100000 // µs
	minQuotaPeriod = 1000   // µs
	// minMilliCPULimit is the smallest CPU limit a CFS quota can express.
	minMilliCPULimit = minQuotaPeriod * milliCPUToCPU / quotaPeriod
)

// actualResources is what the runtime says it applied to a running container, completed
// from the runtime manager's record of what it applied.
type actualResources struct {
	cpuRequest, cpuLimit, memoryRequest, memoryLimit *resource.Quantity
}

// fillFromActuated takes from the actuated record what the runtime did not report: all of
// it when the runtime reports no resources, and always the memory request, which cgroups
// do not hold (upstream).
func (a *actualResources) fillFromActuated(r v1.ResourceRequirements, reported bool) {
	take := func(list v1.ResourceList, name v1.ResourceName) *resource.Quantity {
		if q, ok := list[name]; ok && !q.IsZero() {
			return &q
		}
		return nil
	}
	if !reported {
		a.cpuRequest, a.cpuLimit = take(r.Requests, v1.ResourceCPU), take(r.Limits, v1.ResourceCPU)
		a.memoryLimit = take(r.Limits, v1.ResourceMemory)
	}
	a.memoryRequest = take(r.Requests, v1.ResourceMemory)
}

// runtimeResources converts the CRI's Linux resources (cgroup values) back to quantities.
func runtimeResources(r *runtimeapi.ContainerResources) actualResources {
	var out actualResources
	lnx := r.GetLinux()
	if lnx == nil {
		return out
	}
	if lnx.CpuPeriod > 0 {
		if m := quotaToMilliCPU(lnx.CpuQuota, lnx.CpuPeriod); m > 0 {
			out.cpuLimit = resource.NewMilliQuantity(m, resource.DecimalSI)
		}
	}
	if lnx.CpuShares > 0 {
		if m := sharesToMilliCPU(lnx.CpuShares); m > 0 {
			out.cpuRequest = resource.NewMilliQuantity(m, resource.DecimalSI)
		}
	}
	if lnx.MemoryLimitInBytes > 0 {
		out.memoryLimit = resource.NewQuantity(lnx.MemoryLimitInBytes, resource.BinarySI)
	}
	return out
}

func sharesToMilliCPU(shares int64) int64 {
	if shares < minShares {
		return 0
	}
	return int64(math.Ceil(float64(shares*milliCPUToCPU) / float64(sharesPerCPU)))
}

func quotaToMilliCPU(quota, period int64) int64 {
	if quota == -1 {
		return 0
	}
	return quota * milliCPUToCPU / period
}

// containerStatusResources is the container status's resources (InPlacePodVerticalScaling
// is GA): the spec's (the allocated resources), with the values the runtime applied to a
// running container where it reports them, else those the runtime manager recorded
// (actuated, may be nil). Where neither says, the values of the same running instance last
// time stay. Values at or below what cgroups can express keep the spec's, to avoid
// spurious diffs.
func containerStatusResources(spec *v1.Container, status *v1.ContainerStatus, cs *container.Status, prev *v1.ContainerStatus, actuated func(string) (v1.ResourceRequirements, bool)) *v1.ResourceRequirements {
	resources := spec.Resources.DeepCopy()
	if cs.State != container.ContainerStateRunning {
		return resources
	}
	var prevRequests, prevLimits v1.ResourceList
	if prev != nil && prev.State.Running != nil && prev.ContainerID == status.ContainerID && prev.Resources != nil {
		prevRequests, prevLimits = prev.Resources.Requests, prev.Resources.Limits
	}
	actual := runtimeResources(cs.Resources)
	if actuated != nil {
		if r, ok := actuated(spec.Name); ok {
			actual.fillFromActuated(r, cs.Resources.GetLinux() != nil)
		}
	}
	if resources.Limits != nil {
		setActual(resources.Limits, v1.ResourceCPU, actual.cpuLimit, minMilliCPULimit, prevLimits)
		setActual(resources.Limits, v1.ResourceMemory, actual.memoryLimit, -1, prevLimits)
	}
	if resources.Requests != nil {
		setActual(resources.Requests, v1.ResourceCPU, actual.cpuRequest, minShares, prevRequests)
		setActual(resources.Requests, v1.ResourceMemory, actual.memoryRequest, -1, prevRequests)
	}
	return resources
}

// setActual overwrites list[name] with the runtime's value, unless both it and the spec's
// are at or below floor (milli-units; -1 for none). Without a runtime value it keeps the
// previous status's value, if any.
func setActual(list v1.ResourceList, name v1.ResourceName, actual *resource.Quantity, floor int64, prev v1.ResourceList) {
	if actual == nil {
		if q, ok := prev[name]; ok {
			list[name] = q.DeepCopy()
		}
		return
	}
	specified := list[name]
	if floor < 0 || actual.MilliValue() > floor || specified.MilliValue() > floor {
		list[name] = actual.DeepCopy()
	}
}
