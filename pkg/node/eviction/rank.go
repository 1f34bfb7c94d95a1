package eviction

import (
	"cmp"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// rankFunc orders pods so that the first is evicted first.
type rankFunc func(pods []*v1.Pod, stats podStatsFunc)

// rankKey is what ranking compares of a pod, computed once per pod.
type rankKey struct {
	noStats  bool  // pods without stats go first, as upstream
	exceeds  bool  // usage above the request goes first
	priority int32 // then lower priority first
	above    int64 // then more usage above the request first
}

// rankBy sorts pods by their keys.
func rankBy(pods []*v1.Pod, key func(*v1.Pod) rankKey) {
	keys := make(map[*v1.Pod]rankKey, len(pods))
	for _, p := range pods {
		keys[p] = key(p)
	}
	slices.SortStableFunc(pods, func(a, b *v1.Pod) int {
		ka, kb := keys[a], keys[b]
		if c := compareTrueFirst(ka.noStats, kb.noStats); c != 0 {
			return c
		}
		if c := compareTrueFirst(ka.exceeds, kb.exceeds); c != 0 {
			return c
		}
		if c := cmp.Compare(ka.priority, kb.priority); c != 0 {
			return c
		}
		return cmp.Compare(kb.above, ka.above)
	})
}

// usageKey ranks a pod on its usage of res against its request of res.
func usageKey(pod *v1.Pod, usage int64, res v1.ResourceName) rankKey {
	request := podRequest(pod, res)
	return rankKey{
		exceeds:  usage > request.Value(),
		priority: corev1helpers.PodPriority(pod),
		above:    usage - request.Value(),
	}
}

func noStatsKey(pod *v1.Pod) rankKey {
	return rankKey{noStats: true, priority: corev1helpers.PodPriority(pod)}
}

// rankMemoryPressure is upstream's order under memory pressure: pods whose
// working set exceeds their memory request first, then lower priority
// first, then the larger usage above the request first.
func rankMemoryPressure(pods []*v1.Pod, stats podStatsFunc) {
	rankBy(pods, func(pod *v1.Pod) rankKey {
		ps, ok := stats(pod)
		if !ok {
			return noStatsKey(pod)
		}
		return usageKey(pod, int64(workingSet(ps.Memory)), v1.ResourceMemory)
	})
}

// rankPIDPressure is upstream's order under PID pressure: lower priority
// first, then the pod with more processes first.
func rankPIDPressure(pods []*v1.Pod, stats podStatsFunc) {
	rankBy(pods, func(pod *v1.Pod) rankKey {
		ps, ok := stats(pod)
		if !ok {
			return noStatsKey(pod)
		}
		return rankKey{priority: corev1helpers.PodPriority(pod), above: int64(processCount(ps))}
	})
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
		rankBy(pods, func(pod *v1.Pod) rankKey {
			ps, ok := stats(pod)
			if !ok {
				return noStatsKey(pod)
			}
			bytes, inodes := podDiskUsage(ps, pod, m)
			if res == resourceInodes {
				return usageKey(pod, int64(inodes), res)
			}
			return usageKey(pod, int64(bytes), res)
		})
	}
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

func workingSet(m *statsapi.MemoryStats) uint64 {
	if m == nil || m.WorkingSetBytes == nil {
		return 0
	}
	return *m.WorkingSetBytes
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
func podDiskUsage(ps statsapi.PodStats, pod *v1.Pod, m diskMeasure) (bytes, inodes uint64) {
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
	return b, i
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
