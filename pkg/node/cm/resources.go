package cm

import (
	"math"
	"os"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodelet/nodelet/pkg/qos"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// Units of the CPU controller, as upstream's container manager uses them.
const (
	MinShares      = 2
	MaxShares      = 262144
	sharesPerCPU   = 1024
	milliCPUToCPU  = 1000
	MinQuotaPeriod = 1000 // µs: the kernel's minimum CFS quota

	maxWeight = 10000
	// unboundedHugePages is the hugetlb limit of the QoS-level cgroups: no limit.
	unboundedHugePages = int64(1) << 62
	// pidResource is the node's process-ID capacity (upstream's pidlimit.PIDs),
	// internal to the container manager.
	pidResource v1.ResourceName = "pid"
)

// Memory protection keys of cgroup v2 (memory QoS).
const (
	memoryMin  = "memory.min"
	memoryLow  = "memory.low"
	memoryHigh = "memory.high"
)

// ResourceConfig is what nodelet writes to a cgroup; nil fields are left as they are.
type ResourceConfig struct {
	CPUShares *uint64 // cpu.shares, converted to cpu.weight on cgroup v2
	CPUQuota  *int64  // µs per period; -1 is no limit
	CPUPeriod *uint64 // µs
	Memory    *int64  // bytes; -1 is no limit
	PidsLimit *int64  // <= 0 is no limit
	// HugePageLimit maps page sizes in bytes to limits in bytes; when set, page sizes
	// it omits are limited to 0.
	HugePageLimit map[int64]int64
	// Unified holds cgroup v2 files written as they are (memory.min, memory.low, memory.high).
	Unified map[string]string
}

// MilliCPUToShares converts milli-CPUs to cpu.shares: 1024 per CPU, within [2, 262144].
func MilliCPUToShares(milliCPU int64) uint64 {
	return uint64(criconfig.MilliCPUToShares(milliCPU))
}

// MilliCPUToQuota converts milli-CPUs to a CFS quota over period µs: 0 for none, at
// least MinQuotaPeriod otherwise.
func MilliCPUToQuota(milliCPU, period int64) int64 {
	return criconfig.MilliCPUToQuota(milliCPU, period)
}

// CPUSharesToWeight maps cpu.shares [2, 262144] onto cgroup v2's cpu.weight [1, 10000]
// linearly, as the kubelet and runc do.
func CPUSharesToWeight(shares uint64) uint64 {
	if shares >= MaxShares {
		return maxWeight
	}
	shares = max(shares, MinShares)
	return 1 + (shares-2)*(maxWeight-1)/(MaxShares-2)
}

// cpuWeightToShares reads cpu.weight back as shares: the fewest shares that map to the
// weight, so that CPUSharesToWeight(cpuWeightToShares(w)) == w. (Upstream rounds down,
// which does not round-trip.)
func cpuWeightToShares(weight uint64) uint64 {
	weight = min(max(weight, 1), maxWeight)
	return ((weight-1)*(MaxShares-2)+maxWeight-2)/(maxWeight-1) + 2
}

// cpuWeightToSharesFloor reads cpu.weight back as shares the way upstream's kubelet
// does for pod status: the inverse of CPUSharesToWeight rounded down, so that a weight
// may read back as fewer shares than were written.
func cpuWeightToSharesFloor(weight uint64) uint64 {
	weight = min(max(weight, 1), maxWeight)
	return (weight-1)*(MaxShares-2)/(maxWeight-1) + 2
}

// HugePageLimits sums a resource list's huge pages by page size in bytes.
func HugePageLimits(list v1.ResourceList) map[int64]int64 {
	limits := map[int64]int64{}
	for name, q := range list {
		size, ok := hugePageSize(name)
		if ok {
			limits[size] += q.Value()
		}
	}
	return limits
}

// hugePageSize is the page size of a hugepages-<size> resource.
func hugePageSize(name v1.ResourceName) (int64, bool) {
	s, ok := strings.CutPrefix(string(name), v1.ResourceHugePagesPrefix)
	if !ok {
		return 0, false
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, false
	}
	return q.Value(), true
}

// hugePageUnit is a page size as cgroup file names spell it: "2MB", "1GB".
func hugePageUnit(size int64) string {
	units := []string{"B", "KB", "MB", "GB", "TB", "PB"}
	i := 0
	for size%1024 == 0 && size > 0 && i < len(units)-1 {
		size /= 1024
		i++
	}
	return strconv.FormatInt(size, 10) + units[i]
}

// ResourceConfigForPod is a pod cgroup's configuration, as upstream computes it: shares
// from the pod's CPU requests, a CFS quota over cpuPeriod µs from its CPU limits (-1,
// no quota, when enforceCPULimits is off), a memory limit and huge page limits.
// Burstable pods get a quota or a memory limit only when every container (or the
// pod-level resources) sets that limit; BestEffort pods get the minimum shares.
func ResourceConfigForPod(pod *v1.Pod, enforceCPULimits bool, cpuPeriod uint64) *ResourceConfig {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	cpuLimited, memoryLimited := limitsDeclared(pod)

	shares := MilliCPUToShares(requests.Cpu().MilliValue())
	quota := MilliCPUToQuota(limits.Cpu().MilliValue(), int64(cpuPeriod))
	if !enforceCPULimits {
		quota = -1
	}
	memory := limits.Memory().Value()

	cfg := &ResourceConfig{HugePageLimit: HugePageLimits(requests)}
	switch qos.GetPodQOS(pod) {
	case v1.PodQOSGuaranteed:
		cfg.CPUShares, cfg.CPUQuota, cfg.CPUPeriod, cfg.Memory = &shares, &quota, &cpuPeriod, &memory
	case v1.PodQOSBurstable:
		cfg.CPUShares = &shares
		if cpuLimited {
			cfg.CPUQuota, cfg.CPUPeriod = &quota, &cpuPeriod
		}
		if memoryLimited {
			cfg.Memory = &memory
		}
	default:
		minShares := uint64(MinShares)
		cfg.CPUShares = &minShares
	}
	return cfg
}

// limitsDeclared says whether every init and app container limits CPU and memory; a
// pod-level limit counts for all of them.
func limitsDeclared(pod *v1.Pod) (cpu, memory bool) {
	cpu, memory = true, true
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			cpu = cpu && !cs[i].Resources.Limits.Cpu().IsZero()
			memory = memory && !cs[i].Resources.Limits.Memory().IsZero()
		}
	}
	if r := pod.Spec.Resources; r != nil && resourcehelper.IsPodLevelResourcesSet(pod) {
		cpu = cpu || !r.Limits.Cpu().IsZero()
		memory = memory || !r.Limits.Memory().IsZero()
	}
	return cpu, memory
}

// memoryRequest is the pod's memory request in bytes.
func memoryRequest(pod *v1.Pod) int64 {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	return requests.Memory().Value()
}

// podMemoryHigh is memory.high for a pod with pod-level resources (memory QoS):
// request + factor × (limit − request), rounded down to pages; "" when the pod does
// not limit memory, its request equals its limit, or the result is not above the
// request.
func podMemoryHigh(pod *v1.Pod, factor float64) string {
	if !resourcehelper.IsPodLevelResourcesSet(pod) {
		return ""
	}
	if _, memoryLimited := limitsDeclared(pod); !memoryLimited {
		return ""
	}
	request := memoryRequest(pod)
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	limit := limits.Memory().Value()
	if limit == 0 || request == limit {
		return ""
	}
	page := int64(os.Getpagesize())
	high := int64(math.Floor(float64(request)+float64(limit-request)*factor)/float64(page)) * page
	if high <= request {
		return ""
	}
	return strconv.FormatInt(high, 10)
}

// configFromList is the cgroup configuration that limits a cgroup to list (node
// allocatable, or a reservation): memory, CPU shares, process IDs and huge pages, or
// CPU shares alone when compressibleOnly.
func configFromList(list v1.ResourceList, compressibleOnly bool) *ResourceConfig {
	cfg := &ResourceConfig{}
	if q, ok := list[v1.ResourceCPU]; ok {
		shares := MilliCPUToShares(q.MilliValue())
		cfg.CPUShares = &shares
	}
	if compressibleOnly {
		return cfg
	}
	if q, ok := list[v1.ResourceMemory]; ok {
		memory := q.Value()
		cfg.Memory = &memory
	}
	if q, ok := list[pidResource]; ok {
		pids := q.Value()
		cfg.PidsLimit = &pids
	}
	cfg.HugePageLimit = HugePageLimits(list)
	return cfg
}

// subtractReserved is capacity minus the reservations, never below zero (upstream's
// absolute node allocatable, without the eviction threshold).
func subtractReserved(capacity v1.ResourceList, reserved ...v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for name, q := range capacity {
		v := q.DeepCopy()
		for _, r := range reserved {
			if rq, ok := r[name]; ok {
				v.Sub(rq)
			}
		}
		if v.Sign() < 0 {
			v.Set(0)
		}
		out[name] = v
	}
	return out
}
