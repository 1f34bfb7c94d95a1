package criconfig

import (
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/qos"
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

// cgroup v2 files set through LinuxContainerResources.Unified.
const (
	memoryMin      = "memory.min"
	memoryLow      = "memory.low"
	memoryHigh     = "memory.high"
	memoryOOMGroup = "memory.oom.group"
	memorySwapMax  = "memory.swap.max"
)

// ResourceOptions is how this node turns resource amounts into cgroup
// settings; container start and in-place resize share it.
type ResourceOptions struct {
	CPUCFSQuota       bool          // CPU limits become CFS quotas
	CPUCFSQuotaPeriod time.Duration // 0 means 100ms
	MachineMemory     int64         // bytes: for OOM score adjustments

	Host Host
	// SingleProcessOOMKill (cgroup v2) leaves OOM kills to the kernel's
	// per-process choice; false, the default, sets memory.oom.group so that an
	// OOM kills the whole container. cgroup v1 always kills single processes.
	SingleProcessOOMKill bool
	// MemoryQoS, when set on cgroup v2 (the MemoryQoS feature gate), protects
	// and throttles container memory with memory.min/low/high.
	MemoryQoS *MemoryQoS
}

// MemoryQoS is the memory QoS configuration (KEP 2570).
type MemoryQoS struct {
	// ThrottlingFactor places memory.high between a container's request
	// (0) and its limit (1): memoryThrottlingFactor.
	ThrottlingFactor float64
	// TieredReservation (memoryReservationPolicy: TieredReservation) protects
	// memory requests: memory.min for Guaranteed pods, memory.low otherwise.
	TieredReservation bool
	// AllocatableMemory is the node's capacity less its system and kube
	// reservations, in bytes: memory.high of a container without a limit
	// is placed below it. 0 when unknown.
	AllocatableMemory int64
}

func (o ResourceOptions) cpuPeriod() int64 {
	if o.CPUCFSQuotaPeriod <= 0 {
		return int64(defaultQuotaPeriod / time.Microsecond)
	}
	return int64(o.CPUCFSQuotaPeriod / time.Microsecond)
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

// LinuxContainerResources returns the CRI resources of container c of pod,
// as upstream's generateLinuxContainerResources: shares from the container's
// CPU request, quota and memory limit from its limits, where it has none
// the pod's (pod-level resources), and shares from that limit when it does
// not request CPU; huge page limits, the OOM score adjustment, no swap and,
// on cgroup v2, the memory QoS and OOM group settings. Container start and
// in-place resize both use it, so that they agree.
func LinuxContainerResources(pod *v1.Pod, c *v1.Container, o ResourceOptions) *runtimeapi.LinuxContainerResources {
	cpuLimit := containerLimit(pod, c, v1.ResourceCPU)
	cpuShares := cpuLimit // no request: shares follow the limit, as the API server defaults it
	if q, ok := c.Resources.Requests[v1.ResourceCPU]; ok {
		cpuShares = q
	}
	r := o.linuxResources(cpuShares, cpuLimit, containerLimit(pod, c, v1.ResourceMemory))
	r.OomScoreAdj = int64(qos.OOMScoreAdj(pod, c, o.MachineMemory))
	r.HugepageLimits = hugepageLimits(pod, c, o.Host.HugePageSizes)
	o.denySwap(r)
	o.setMemoryQoS(r, pod, c)
	return r
}

// containerLimit is the container's limit of a CPU or memory, or when it has
// none (or zero), the pod-level one; zero when neither is set.
func containerLimit(pod *v1.Pod, c *v1.Container, name v1.ResourceName) resource.Quantity {
	if q := c.Resources.Limits[name]; !q.IsZero() || !resourcehelper.IsPodLevelResourcesSet(pod) {
		return q
	}
	return pod.Spec.Resources.Limits[name]
}

// linuxResources converts CPU shares (as a CPU amount), a CPU limit and a
// memory limit to CRI resources (upstream's calculateLinuxResources).
func (o ResourceOptions) linuxResources(cpuShares, cpuLimit, memoryLimit resource.Quantity) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{
		CpuShares:          MilliCPUToShares(cpuShares.MilliValue()),
		MemoryLimitInBytes: memoryLimit.Value(),
	}
	if o.CPUCFSQuota {
		r.CpuPeriod = o.cpuPeriod()
		r.CpuQuota = MilliCPUToQuota(cpuLimit.MilliValue(), r.CpuPeriod)
	}
	if o.Host.CgroupV2 && !o.SingleProcessOOMKill {
		setUnified(r, memoryOOMGroup, "1")
	}
	return r
}

func setUnified(r *runtimeapi.LinuxContainerResources, key, value string) {
	if r.Unified == nil {
		r.Unified = map[string]string{}
	}
	r.Unified[key] = value
}

// hugepageLimits limits every huge page size of the host: to the
// container's limit of that size, else the pod's (pod-level resources), else
// 0, so that a container uses only the huge pages it asks for.
func hugepageLimits(pod *v1.Pod, c *v1.Container, sizes []string) []*runtimeapi.HugepageLimit {
	want := map[string]uint64{}
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		addHugepageLimits(want, pod.Spec.Resources.Limits)
	}
	addHugepageLimits(want, c.Resources.Limits) // the container's own win
	var limits []*runtimeapi.HugepageLimit
	for _, size := range sizes {
		limits = append(limits, &runtimeapi.HugepageLimit{PageSize: size, Limit: want[size]})
	}
	return limits
}

// addHugepageLimits records the hugepages-<size> limits of list by the page
// size's cgroup name ("2MB").
func addHugepageLimits(want map[string]uint64, list v1.ResourceList) {
	for name, q := range list {
		if size, ok := hugePageCgroupSize(name); ok {
			want[size] = uint64(q.Value())
		}
	}
}

// hugePageCgroupSize names the page size of a hugepages-<size> resource as
// the hugetlb cgroup does: "2Mi" is "2MB", "1Gi" "1GB".
func hugePageCgroupSize(name v1.ResourceName) (string, bool) {
	s, ok := strings.CutPrefix(string(name), v1.ResourceHugePagesPrefix)
	if !ok {
		return "", false
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return "", false
	}
	return byteSizeUnit(q.Value())
}

// byteSizeUnit writes a size in the largest binary unit that divides it
// ("2MB" for 2<<20); false when a smaller unit would need more than 1024 of
// them.
func byteSizeUnit(size int64) (string, bool) {
	units := []string{"B", "KB", "MB", "GB", "TB", "PB"}
	i := 0
	for size%1024 == 0 && i < len(units)-1 {
		size /= 1024
		i++
	}
	if size > 1024 && i < len(units)-1 {
		return "", false
	}
	return strconv.FormatInt(size, 10) + units[i], true
}

// denySwap keeps containers out of swap where the kernel accounts it (the
// NoSwap behaviour; nodelet implements no other): on cgroup v1 memory+swap
// is capped at the memory limit, on v2 memory.swap.max is 0.
func (o ResourceOptions) denySwap(r *runtimeapi.LinuxContainerResources) {
	switch {
	case !o.Host.SwapController:
	case o.Host.CgroupV2:
		setUnified(r, memorySwapMax, "0")
	default:
		r.MemorySwapLimitInBytes = r.MemoryLimitInBytes
	}
}

// setMemoryQoS sets memory.min/low and memory.high on cgroup v2 with memory
// QoS; without it, memory.high is reset to max so that a resize clears a
// throttle set while it was on.
func (o ResourceOptions) setMemoryQoS(r *runtimeapi.LinuxContainerResources, pod *v1.Pod, c *v1.Container) {
	if !o.Host.CgroupV2 {
		return
	}
	if o.MemoryQoS == nil {
		setUnified(r, memoryHigh, "max")
		return
	}
	request, limit := c.Resources.Requests.Memory().Value(), c.Resources.Limits.Memory().Value()
	if request != 0 && o.MemoryQoS.TieredReservation {
		key := memoryLow
		if qos.GetPodQOS(pod) == v1.PodQOSGuaranteed {
			key = memoryMin
		}
		setUnified(r, key, strconv.FormatInt(request, 10))
	} else {
		setUnified(r, memoryMin, "0")
		setUnified(r, memoryLow, "0")
	}
	if high := o.MemoryQoS.containerMemoryHigh(pod, request, limit); high > 0 {
		setUnified(r, memoryHigh, strconv.FormatInt(high, 10))
	}
}

// containerMemoryHigh places memory.high at request + factor × (limit −
// request), rounded down to pages, with the node's allocatable memory for a
// container without a limit; 0 (not set) when the request is the limit, the
// result is not above the request, or the container has no limit of its own
// under a pod-level memory limit: the pod's memory.high throttles it then, the
// kernel enforcing it for the whole pod.
func (q *MemoryQoS) containerMemoryHigh(pod *v1.Pod, request, limit int64) int64 {
	if limit == 0 && resourcehelper.IsPodLevelResourcesSet(pod) && !pod.Spec.Resources.Limits.Memory().IsZero() {
		return 0
	}
	if request == limit && request != 0 {
		return 0
	}
	ceiling := limit
	if ceiling == 0 {
		ceiling = q.AllocatableMemory
	}
	if ceiling <= 0 {
		return 0
	}
	page := int64(os.Getpagesize())
	high := int64(math.Floor(float64(request)+(float64(ceiling)-float64(request))*q.ThrottlingFactor)/float64(page)) * page
	if high <= request {
		return 0
	}
	return high
}

// sandboxResources returns the pod's resources (overhead excluded): its
// pod-level resources where set, else its containers' at their peak, which
// runtimes may use to size the pod before its containers exist.
func sandboxResources(pod *v1.Pod, o ResourceOptions) *runtimeapi.LinuxContainerResources {
	opts := resourcehelper.PodResourcesOptions{ExcludeOverhead: true}
	requests, limits := resourcehelper.PodRequests(pod, opts), resourcehelper.PodLimits(pod, opts)
	cpuShares := limits[v1.ResourceCPU]
	if q, ok := requests[v1.ResourceCPU]; ok {
		cpuShares = q
	}
	return o.linuxResources(cpuShares, limits[v1.ResourceCPU], limits[v1.ResourceMemory])
}

// overheadResources converts the pod overhead, taken as both request and
// limit; empty without overhead.
func overheadResources(pod *v1.Pod, o ResourceOptions) *runtimeapi.LinuxContainerResources {
	if pod.Spec.Overhead == nil {
		return &runtimeapi.LinuxContainerResources{}
	}
	cpu := pod.Spec.Overhead[v1.ResourceCPU]
	return o.linuxResources(cpu, cpu, pod.Spec.Overhead[v1.ResourceMemory])
}
