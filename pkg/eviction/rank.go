package eviction

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// rankFunc orders pods so that the first is evicted first.
type rankFunc func(pods []*v1.Pod, stats podStatsFunc)

// cmpFunc compares two pods: negative when a is to be evicted before b.
type cmpFunc func(a, b *v1.Pod) int

// orderBy sorts pods by the first comparison that tells them apart.
func orderBy(pods []*v1.Pod, cmps ...cmpFunc) {
	slices.SortStableFunc(pods, func(a, b *v1.Pod) int {
		for _, c := range cmps {
			if r := c(a, b); r != 0 {
				return r
			}
		}
		return 0
	})
}

// rankMemoryPressure is upstream's order under memory pressure: pods whose
// working set exceeds their memory request first, then lower priority
// first, then the larger usage above the request first.
func rankMemoryPressure(pods []*v1.Pod, stats podStatsFunc) {
	usage := func(ps statsapi.PodStats, _ *v1.Pod) resource.Quantity { return memoryUsage(ps.Memory) }
	orderBy(pods,
		exceedsRequests(stats, usage, v1.ResourceMemory),
		byPriority,
		byUsageAboveRequest(stats, usage, v1.ResourceMemory))
}

// rankPIDPressure is upstream's order under PID pressure: lower priority
// first, then the pod with more processes first.
func rankPIDPressure(pods []*v1.Pod, stats podStatsFunc) {
	orderBy(pods, byPriority, withStats(stats, func(a, b statsapi.PodStats) int {
		return compareDesc(processCount(a), processCount(b))
	}))
}

// diskMeasure says what of a pod's usage counts on a filesystem.
type diskMeasure struct {
	writableLayers bool // the containers' rootfs
	logs           bool
	localVolumes   bool // emptyDir on disk, configMap, gitRepo, hostPath
}

// rankDiskPressure orders pods like memory, on the disk resource (bytes or
// inodes) measured as m says. Inodes cannot be requested: any pod using
// some exceeds its request of none, and ranks by priority, then usage.
func rankDiskPressure(m diskMeasure, res v1.ResourceName) rankFunc {
	return func(pods []*v1.Pod, stats podStatsFunc) {
		usage := func(ps statsapi.PodStats, pod *v1.Pod) resource.Quantity {
			bytes, inodes := podDiskUsage(ps, pod, m)
			if res == resourceInodes {
				return inodes
			}
			return bytes
		}
		orderBy(pods, exceedsRequests(stats, usage, res), byPriority, byUsageAboveRequest(stats, usage, res))
	}
}

// withStats compares pods by their stats; a pod without stats goes first,
// as upstream does.
func withStats(stats podStatsFunc, cmp func(a, b statsapi.PodStats) int) cmpFunc {
	return func(a, b *v1.Pod) int {
		as, aok := stats(a)
		bs, bok := stats(b)
		if !aok || !bok {
			return compareTrueFirst(!aok, !bok)
		}
		return cmp(as, bs)
	}
}

type usageFunc func(ps statsapi.PodStats, pod *v1.Pod) resource.Quantity

func exceedsRequests(stats podStatsFunc, usage usageFunc, res v1.ResourceName) cmpFunc {
	return func(a, b *v1.Pod) int {
		return withStats(stats, func(as, bs statsapi.PodStats) int {
			ua, ub := usage(as, a), usage(bs, b)
			ra, rb := podRequest(a, res), podRequest(b, res)
			return compareTrueFirst(ua.Cmp(ra) > 0, ub.Cmp(rb) > 0)
		})(a, b)
	}
}

func byUsageAboveRequest(stats podStatsFunc, usage usageFunc, res v1.ResourceName) cmpFunc {
	return func(a, b *v1.Pod) int {
		return withStats(stats, func(as, bs statsapi.PodStats) int {
			ua, ub := usage(as, a), usage(bs, b)
			ua.Sub(podRequest(a, res))
			ub.Sub(podRequest(b, res))
			return ub.Cmp(ua)
		})(a, b)
	}
}

func byPriority(a, b *v1.Pod) int {
	pa, pb := corev1helpers.PodPriority(a), corev1helpers.PodPriority(b)
	switch {
	case pa < pb:
		return -1
	case pa > pb:
		return 1
	}
	return 0
}

// compareTrueFirst orders true before false.
func compareTrueFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

func compareDesc(a, b uint64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// podRequest is the pod's request of res as upstream's eviction sees it:
// pod-level requests where set, else its containers' (init containers
// counted as the scheduler counts them), plus its overhead when non-zero.
func podRequest(pod *v1.Pod, res v1.ResourceName) resource.Quantity {
	q := resource.Quantity{Format: resource.BinarySI}
	if res == resourceInodes || res == resourcePIDs {
		q.Format = resource.DecimalSI
	}
	podLevel := resourcehelper.IsPodLevelResourcesSet(pod)
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{SkipContainerLevelResources: podLevel, ExcludeOverhead: true})
	if r, ok := reqs[res]; ok {
		q.Add(r)
	}
	if o, ok := pod.Spec.Overhead[res]; ok && !q.IsZero() {
		q.Add(o)
	}
	return q
}

func memoryUsage(m *statsapi.MemoryStats) resource.Quantity {
	if m == nil || m.WorkingSetBytes == nil {
		return resource.Quantity{Format: resource.BinarySI}
	}
	return *resource.NewQuantity(int64(*m.WorkingSetBytes), resource.BinarySI)
}

func processCount(ps statsapi.PodStats) uint64 {
	if ps.ProcessStats == nil || ps.ProcessStats.ProcessCount == nil {
		return 0
	}
	return *ps.ProcessStats.ProcessCount
}

func fsUsed(fs *statsapi.FsStats) (bytes, inodes uint64) {
	if fs == nil {
		return 0, 0
	}
	if fs.UsedBytes != nil {
		bytes = *fs.UsedBytes
	}
	if fs.InodesUsed != nil {
		inodes = *fs.InodesUsed
	}
	return bytes, inodes
}

// podDiskUsage sums what m measures of the pod's disk usage.
func podDiskUsage(ps statsapi.PodStats, pod *v1.Pod, m diskMeasure) (bytes, inodes resource.Quantity) {
	var b, i uint64
	add := func(fs *statsapi.FsStats) {
		fb, fi := fsUsed(fs)
		b, i = b+fb, i+fi
	}
	for _, c := range ps.Containers {
		if m.writableLayers {
			add(c.Rootfs)
		}
		if m.logs {
			add(c.Logs)
		}
	}
	if m.localVolumes {
		local := localVolumeNames(pod)
		for k := range ps.VolumeStats {
			if slices.Contains(local, ps.VolumeStats[k].Name) {
				add(&ps.VolumeStats[k].FsStats)
			}
		}
	}
	return *resource.NewQuantity(int64(b), resource.BinarySI), *resource.NewQuantity(int64(i), resource.DecimalSI)
}

// localVolumeNames are the pod's volumes on the node's disk: hostPath and
// the local ephemeral ones (emptyDir not in memory, configMap, gitRepo).
func localVolumeNames(pod *v1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		local := v.HostPath != nil || v.GitRepo != nil || v.ConfigMap != nil ||
			(v.EmptyDir != nil && v.EmptyDir.Medium == v1.StorageMediumDefault)
		if local {
			out = append(out, v.Name)
		}
	}
	return out
}
