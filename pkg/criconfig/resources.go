package criconfig

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CPU conversion constants, as the kubelet's container manager uses them.
const (
	minShares     = 2 // the kernel's minimum cpu.shares
	maxShares     = 262144
	sharesPerCPU  = 1024
	milliCPUToCPU = 1000

	defaultQuotaPeriod = 100 * time.Millisecond
	minQuotaPeriod     = 1000 // µs: the CFS quota is at least 1ms
)

// cfsQuota says whether and how CPU limits become CFS quotas.
type cfsQuota struct {
	enabled bool
	period  time.Duration // 0 means 100ms
}

// periodMicros is the CFS period in microseconds, the kernel's unit.
func (q cfsQuota) periodMicros() int64 {
	if q.period <= 0 {
		return int64(defaultQuotaPeriod / time.Microsecond)
	}
	return int64(q.period / time.Microsecond)
}

// MilliCPUToShares converts a CPU request to cpu.shares: 1024 per CPU,
// within [2, 262144].
func MilliCPUToShares(milliCPU int64) int64 {
	shares := milliCPU * sharesPerCPU / milliCPUToCPU
	return max(minShares, min(shares, maxShares))
}

// MilliCPUToQuota converts a CPU limit to a CFS quota over period
// microseconds; 0 (no quota) for no limit, at least 1ms otherwise.
func MilliCPUToQuota(milliCPU, period int64) int64 {
	if milliCPU == 0 {
		return 0
	}
	return max(milliCPU*period/milliCPUToCPU, minQuotaPeriod)
}

// linuxResources converts CPU and memory amounts to CRI resources. Without a
// CPU request, shares follow the limit, as the API server's defaulting
// would have made them.
func linuxResources(cpuRequest *resource.Quantity, cpuLimit, memoryLimit resource.Quantity, quota cfsQuota) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{}
	if cpuRequest == nil {
		r.CpuShares = MilliCPUToShares(cpuLimit.MilliValue())
	} else {
		r.CpuShares = MilliCPUToShares(cpuRequest.MilliValue())
	}
	r.MemoryLimitInBytes = memoryLimit.Value()
	if quota.enabled {
		r.CpuPeriod = quota.periodMicros()
		r.CpuQuota = MilliCPUToQuota(cpuLimit.MilliValue(), r.CpuPeriod)
	}
	return r
}

// containerResources returns a container's CRI resources from its own
// requests and limits; the caller adds the OOM score.
func containerResources(c *v1.Container, quota cfsQuota) *runtimeapi.LinuxContainerResources {
	var cpuRequest *resource.Quantity
	if q, ok := c.Resources.Requests[v1.ResourceCPU]; ok {
		cpuRequest = &q
	}
	return linuxResources(cpuRequest, c.Resources.Limits[v1.ResourceCPU], c.Resources.Limits[v1.ResourceMemory], quota)
}

// sandboxResources returns the pod's aggregate resources (overhead
// excluded), which runtimes may use to size the pod before its containers
// exist.
func sandboxResources(pod *v1.Pod, quota cfsQuota) *runtimeapi.LinuxContainerResources {
	requests := podResources(pod, func(c *v1.Container) v1.ResourceList { return c.Resources.Requests })
	limits := podResources(pod, func(c *v1.Container) v1.ResourceList { return c.Resources.Limits })
	var cpuRequest *resource.Quantity
	if q, ok := requests[v1.ResourceCPU]; ok {
		cpuRequest = &q
	}
	return linuxResources(cpuRequest, limits[v1.ResourceCPU], limits[v1.ResourceMemory], quota)
}

// overheadResources converts the pod overhead, taken as both request and
// limit; empty without overhead.
func overheadResources(pod *v1.Pod, quota cfsQuota) *runtimeapi.LinuxContainerResources {
	if pod.Spec.Overhead == nil {
		return &runtimeapi.LinuxContainerResources{}
	}
	cpu := pod.Spec.Overhead[v1.ResourceCPU]
	return linuxResources(&cpu, cpu, pod.Spec.Overhead[v1.ResourceMemory], quota)
}

// podResources sums what the pod needs of one kind (requests or limits) at
// its peak: all regular containers and sidecars together, or an init
// container plus the sidecars started before it, whichever is larger.
func podResources(pod *v1.Pod, of func(*v1.Container) v1.ResourceList) v1.ResourceList {
	total := v1.ResourceList{}
	for i := range pod.Spec.Containers {
		addResources(total, of(&pod.Spec.Containers[i]))
	}
	sidecars, initPeak := v1.ResourceList{}, v1.ResourceList{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		running := v1.ResourceList{}
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			addResources(total, of(c))
			addResources(sidecars, of(c))
			addResources(running, sidecars)
		} else {
			addResources(running, of(c))
			addResources(running, sidecars)
		}
		maxResources(initPeak, running)
	}
	maxResources(total, initPeak)
	return total
}

func addResources(sum, list v1.ResourceList) {
	for name, q := range list {
		total := q.DeepCopy()
		if prev, ok := sum[name]; ok {
			total.Add(prev)
		}
		sum[name] = total
	}
}

func maxResources(peak, list v1.ResourceList) {
	for name, q := range list {
		if prev, ok := peak[name]; !ok || q.Cmp(prev) > 0 {
			peak[name] = q.DeepCopy()
		}
	}
}
