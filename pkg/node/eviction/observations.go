package eviction

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// observation is one signal's reading: how much is available of capacity,
// and when the stats behind it were taken.
type observation struct {
	available *resource.Quantity
	capacity  *resource.Quantity
	time      time.Time
}

type observations map[Signal]observation

// podStatsFunc finds a pod's stats in the summary the observations came from.
type podStatsFunc func(pod *v1.Pod) (statsapi.PodStats, bool)

// observe reads every signal the summary has figures for, as upstream does:
// memory.available is the node's available memory (capacity less the
// working set, which the stats provider computes from the root cgroup, not
// "free") over a capacity of available + working set; allocatable memory is
// the pods cgroup's; filesystems are available bytes and free inodes; PIDs
// are the task limit less the tasks running.
func observe(summary *statsapi.Summary) (observations, podStatsFunc) {
	obs := observations{}
	node := summary.Node
	if m := node.Memory; m != nil {
		obs.addMemory(SignalMemoryAvailable, m)
	}
	for _, sc := range node.SystemContainers {
		if sc.Name == statsapi.SystemContainerPods && sc.Memory != nil {
			obs.addMemory(SignalAllocatableMemoryAvailable, sc.Memory)
		}
	}
	obs.addFs(SignalNodeFsAvailable, SignalNodeFsInodesFree, node.Fs)
	if rt := node.Runtime; rt != nil {
		obs.addFs(SignalImageFsAvailable, SignalImageFsInodesFree, rt.ImageFs)
		obs.addFs(SignalContainerFsAvailable, SignalContainerFsInodesFree, rt.ContainerFs)
	}
	if r := node.Rlimit; r != nil && r.MaxPID != nil && r.NumOfRunningProcesses != nil {
		obs[SignalPIDAvailable] = observation{
			available: resource.NewQuantity(*r.MaxPID-*r.NumOfRunningProcesses, resource.DecimalSI),
			capacity:  resource.NewQuantity(*r.MaxPID, resource.DecimalSI),
			time:      r.Time.Time,
		}
	}
	return obs, podStatsLookup(summary.Pods)
}

func (obs observations) addMemory(s Signal, m *statsapi.MemoryStats) {
	if m.AvailableBytes == nil || m.WorkingSetBytes == nil {
		return
	}
	obs[s] = observation{
		available: resource.NewQuantity(int64(*m.AvailableBytes), resource.BinarySI),
		capacity:  resource.NewQuantity(int64(*m.AvailableBytes+*m.WorkingSetBytes), resource.BinarySI),
		time:      m.Time.Time,
	}
}

func (obs observations) addFs(bytes, inodes Signal, fs *statsapi.FsStats) {
	if fs == nil {
		return
	}
	if fs.AvailableBytes != nil && fs.CapacityBytes != nil {
		obs[bytes] = observation{
			available: resource.NewQuantity(int64(*fs.AvailableBytes), resource.BinarySI),
			capacity:  resource.NewQuantity(int64(*fs.CapacityBytes), resource.BinarySI),
			time:      fs.Time.Time,
		}
	}
	if fs.InodesFree != nil && fs.Inodes != nil {
		obs[inodes] = observation{
			available: resource.NewQuantity(int64(*fs.InodesFree), resource.DecimalSI),
			capacity:  resource.NewQuantity(int64(*fs.Inodes), resource.DecimalSI),
			time:      fs.Time.Time,
		}
	}
}

func podStatsLookup(pods []statsapi.PodStats) podStatsFunc {
	byUID := make(map[string]statsapi.PodStats, len(pods))
	for _, p := range pods {
		byUID[p.PodRef.UID] = p
	}
	return func(pod *v1.Pod) (statsapi.PodStats, bool) {
		s, ok := byUID[string(pod.UID)]
		return s, ok
	}
}

// met reports whether t is met by the observations: available below the
// threshold, or, with withMinReclaim, below the threshold plus its minimum
// reclaim (a threshold already met stays met until that much is back).
// A signal without an observation is never met.
func (obs observations) met(t Threshold, withMinReclaim bool) bool {
	o, ok := obs[t.Signal]
	if !ok {
		return false
	}
	q := t.Value.Of(o.capacity)
	if withMinReclaim && t.MinReclaim != nil {
		q.Add(*t.MinReclaim.Of(o.capacity))
	}
	return q.Cmp(*o.available) > 0
}
