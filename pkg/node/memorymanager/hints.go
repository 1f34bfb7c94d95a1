package memorymanager

import (
	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodelet/nodelet/pkg/node/memorymanager/state"
	"github.com/nodelet/nodelet/pkg/node/topologymanager"
	"github.com/nodelet/nodelet/pkg/qos"
)

// containerHints is upstream's staticPolicy.GetTopologyHints: nil when the container
// gets no memory of its own, the hints of its blocks when it has some, the computed
// placements otherwise.
func (p *staticPolicy) containerHints(s *memoryState, pod *v1.Pod, c *v1.Container) map[string][]topologymanager.TopologyHint {
	reqs, err := exclusiveRequests(pod, c)
	if err != nil || reqs == nil {
		return nil
	}
	if blocks, ok := s.assignments[string(pod.UID)][c.Name]; ok {
		return regenerateHints(blocks, reqs)
	}
	return p.calculateHints(s.machine, pod, reqs)
}

// podHints is upstream's staticPolicy.GetPodTopologyHints, for the pod's peak needs.
func (p *staticPolicy) podHints(s *memoryState, pod *v1.Pod) map[string][]topologymanager.TopologyHint {
	if qos.GetPodQOS(pod) != v1.PodQOSGuaranteed || resourcehelper.IsPodLevelResourcesSet(pod) {
		return nil
	}
	reqs, err := podRequests(pod)
	if err != nil || len(reqs) == 0 {
		return nil
	}
	// After a restart the pod may hold blocks already: its first container with blocks
	// gives the hints, as upstream does.
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if blocks, ok := s.assignments[string(pod.UID)][list[i].Name]; ok {
				return regenerateHints(blocks, reqs)
			}
		}
	}
	return p.calculateHints(s.machine, pod, reqs)
}

// regenerateHints is a preferred hint per block, when the blocks are exactly what is
// requested; nil (no preference) when they are not.
func regenerateHints(blocks []state.Block, reqs map[v1.ResourceName]uint64) map[string][]topologymanager.TopologyHint {
	if len(blocks) != len(reqs) {
		return nil
	}
	hints := map[string][]topologymanager.TopologyHint{}
	for name := range reqs {
		hints[string(name)] = []topologymanager.TopologyHint{}
	}
	for _, b := range blocks {
		size, ok := reqs[b.Type]
		mask, err := topologymanager.NewMask(b.NUMAAffinity...)
		if !ok || size != b.Size || err != nil {
			return nil
		}
		hints[string(b.Type)] = append(hints[string(b.Type)], topologymanager.TopologyHint{NUMANodeAffinity: mask, Preferred: true})
	}
	return hints
}

// calculateHints lists, for every requested type, the NUMA node sets the request can be
// placed on now, in upstream's order (smallest sets first). Preferred are those with
// as few nodes as the smallest set whose allocatable memory could ever hold the
// request. A type no set fits has no entry.
func (p *staticPolicy) calculateHints(machine state.NUMANodeMap, pod *v1.Pod, reqs map[v1.ResourceName]uint64) map[string][]topologymanager.TopologyHint {
	ids := sortedNodeIDs(machine)
	minSize := len(ids)
	hints := map[string][]topologymanager.TopologyHint{}
	reusable := func(mask topologymanager.Mask) func(v1.ResourceName) uint64 {
		return func(name v1.ResourceName) uint64 { return p.podReusableMemory(string(pod.UID), mask, name) }
	}
	topologymanager.IterateMasks(ids, func(mask topologymanager.Mask) {
		if !fitsAllocatable(machine, mask, reqs) {
			return
		}
		minSize = min(minSize, mask.Count())
		if !canTakeNewBlock(machine, mask) || !fitsFree(machine, mask, reqs, reusable(mask)) {
			return
		}
		for name := range reqs {
			hints[string(name)] = append(hints[string(name)], topologymanager.TopologyHint{NUMANodeAffinity: mask})
		}
	})
	for _, list := range hints {
		for i := range list {
			list[i].Preferred = list[i].NUMANodeAffinity.Count() == minSize
		}
	}
	return hints
}

// canTakeNewBlock reports whether a block may be placed on the nodes: a node in a
// group serves no single-node block, and a multi-node block must use a whole group or
// unused nodes.
func canTakeNewBlock(machine state.NUMANodeMap, mask topologymanager.Mask) bool {
	if mask.Count() == 1 {
		node := machine[mask.Bits()[0]]
		return node == nil || len(node.Cells) <= 1
	}
	return !violatesNUMAAllocations(machine, mask)
}
