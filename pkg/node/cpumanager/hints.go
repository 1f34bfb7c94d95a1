package cpumanager

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/node/topologymanager"
)

// resourceCPU is the resource the hints are given for.
const resourceCPU = string(v1.ResourceCPU)

// unsatisfiable is the empty hint list: no placement fits (the topology manager refuses
// the pod under any policy but best-effort). A nil map means no preference.
func unsatisfiable() map[string][]topologymanager.TopologyHint {
	return map[string][]topologymanager.TopologyHint{resourceCPU: {}}
}

// containerHints are the NUMA placements for the container's exclusive CPUs: those of
// its current CPUs when it already has some, else every NUMA mask whose free CPUs (with
// its pod's reusable ones) can hold the request.
func (p *staticPolicy) containerHints(s *cpuState, pod *v1.Pod, container *v1.Container) map[string][]topologymanager.TopologyHint {
	n := guaranteedCPUs(pod, container)
	if n == 0 || skipsPodLevelResources(pod) {
		return nil
	}
	podUID := string(pod.UID)
	if cpus, ok := s.get(podUID, container.Name); ok {
		// After a restart, say: regenerate the hints of what it has.
		if cpus.Size() != n {
			return unsatisfiable()
		}
		return map[string][]topologymanager.TopologyHint{resourceCPU: p.hints(cpus, cpuset.New(), n)}
	}
	return map[string][]topologymanager.TopologyHint{resourceCPU: p.hints(p.available(s), p.cpusToReuse[podUID], n)}
}

// podHints are the same for the whole pod (topology manager pod scope), counting what
// its containers already have.
func (p *staticPolicy) podHints(s *cpuState, pod *v1.Pod) map[string][]topologymanager.TopologyHint {
	n := podGuaranteedCPUs(pod)
	if n == 0 || skipsPodLevelResources(pod) {
		return nil
	}
	podUID := string(pod.UID)
	assigned := cpuset.New()
	for _, containers := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range containers {
			cpus, ok := s.get(podUID, containers[i].Name)
			if !ok {
				continue
			}
			if cpus.Size() != guaranteedCPUs(pod, &containers[i]) {
				return unsatisfiable()
			}
			assigned = assigned.Union(cpus)
		}
	}
	if assigned.Size() == n {
		return map[string][]topologymanager.TopologyHint{resourceCPU: p.hints(assigned, cpuset.New(), n)}
	}
	reusable := p.cpusToReuse[podUID].Union(assigned)
	return map[string][]topologymanager.TopologyHint{resourceCPU: p.hints(p.available(s), reusable, n)}
}

// hints lists every NUMA mask that holds all the reusable CPUs and, with the available
// ones on it, at least n CPUs. The preferred ones are the narrowest masks whose NUMA
// nodes have n CPUs on the machine (free or not), and with align-by-socket also those
// spanning as few sockets as such a mask needs. The list is empty, not nil, when none
// fits.
func (p *staticPolicy) hints(available, reusable cpuset.CPUSet, n int) []topologymanager.TopologyHint {
	details := p.topo.CPUDetails
	numas := details.NUMANodes().List()
	narrowest := len(numas)
	hints := []topologymanager.TopologyHint{}
	topologymanager.IterateMasks(numas, func(mask topologymanager.Mask) {
		if details.CPUsInNUMANodes(mask.Bits()...).Size() >= n {
			narrowest = min(narrowest, mask.Count())
		}
		if p.fitsOn(mask, available, reusable) >= n {
			hints = append(hints, topologymanager.TopologyHint{NUMANodeAffinity: mask})
		}
	})
	for i := range hints {
		hints[i].Preferred = hints[i].NUMANodeAffinity.Count() == narrowest ||
			(p.opts.alignBySocket && p.isSocketAligned(hints[i].NUMANodeAffinity, narrowest))
	}
	return hints
}

// fitsOn counts the CPUs a mask could give: all the reusable ones (or none, when one of
// them is elsewhere) and the available ones on it.
func (p *staticPolicy) fitsOn(mask topologymanager.Mask, available, reusable cpuset.CPUSet) int {
	count := 0
	for _, cpu := range reusable.List() {
		if !mask.IsSet(p.topo.CPUDetails[cpu].NUMANodeID) {
			return 0
		}
		count++
	}
	for _, cpu := range available.List() {
		if mask.IsSet(p.topo.CPUDetails[cpu].NUMANodeID) {
			count++
		}
	}
	return count
}

// isSocketAligned: the mask's NUMA nodes span no more sockets than the narrowest
// placement needs.
func (p *staticPolicy) isSocketAligned(mask topologymanager.Mask, narrowest int) bool {
	if p.topo.NumSockets == 0 {
		return false
	}
	perSocket := p.topo.NumNUMANodes / p.topo.NumSockets
	if perSocket == 0 {
		return false
	}
	minSockets := (narrowest + perSocket - 1) / perSocket
	return p.topo.CPUDetails.SocketsInNUMANodes(mask.Bits()...).Size() == minSockets
}
