package memorymanager

import (
	"errors"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodelet/nodelet/pkg/node/memorymanager/state"
	"github.com/nodelet/nodelet/pkg/node/topologymanager"
	"github.com/nodelet/nodelet/pkg/qos"
)

// memoryState is what the state file keeps: the machine state and the blocks of every
// container.
type memoryState struct {
	machine     state.NUMANodeMap
	assignments state.ContainerMemoryAssignments
}

// reusableMemory is, for the pod being admitted, the memory its finished init
// containers leave by NUMA node set and type, which the containers after them use
// before taking more from the node.
type reusableMemory map[string]map[topologymanager.Mask]map[v1.ResourceName]uint64

// staticPolicy is upstream's Static policy for container-level allocations.
type staticPolicy struct {
	affinity topologymanager.Store
	// defaultMachine is the machine state with nothing assigned.
	defaultMachine state.NUMANodeMap
	reusable       reusableMemory
	metrics        *metrics
}

// Upstream's allocation errors.
var (
	errNoDefaultAffinity   = errors.New("[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available")
	errNoDefaultPreferred  = errors.New("[memorymanager] failed to find the default preferred hint")
	errNoExtension         = errors.New("[memorymanager] failed to find NUMA nodes to extend the current topology hint")
	errNoExtendedPreferred = errors.New("[memorymanager] failed to find the extended preferred hint")
	errViolatesNUMA        = errors.New("[memorymanager] preferred hint violates NUMA node allocation")
)

// exclusiveRequests is the memory a container is to be given, nil when it gets none:
// only containers of Guaranteed pods without pod-level resources do.
func exclusiveRequests(pod *v1.Pod, c *v1.Container) (map[v1.ResourceName]uint64, error) {
	if qos.GetPodQOS(pod) != v1.PodQOSGuaranteed || resourcehelper.IsPodLevelResourcesSet(pod) {
		return nil, nil
	}
	reqs, err := containerRequests(c)
	if err != nil || len(reqs) == 0 {
		return nil, err
	}
	return reqs, nil
}

// allocate gives the container its blocks (upstream's staticPolicy.Allocate); it
// reports whether it changed s, which it does only when it succeeds.
func (p *staticPolicy) allocate(s *memoryState, pod *v1.Pod, c *v1.Container) (changed bool, err error) {
	reqs, err := exclusiveRequests(pod, c)
	if err != nil || reqs == nil {
		return false, err
	}
	p.metrics.pinningRequests.Inc()
	defer func() {
		if err != nil {
			p.metrics.pinningErrors.Inc()
		}
	}()
	podUID := string(pod.UID)
	if blocks, ok := s.assignments[podUID][c.Name]; ok {
		// Admitted before (a restart, or a retry): only the reuse bookkeeping to redo.
		p.updatePodReusableMemory(pod, c, blocks)
		return false, nil
	}
	hint, err := p.bestHint(s.machine, pod, c, reqs)
	if err != nil {
		return false, err
	}
	blocks := p.assign(s.machine, pod, hint, reqs)
	p.updatePodReusableMemory(pod, c, blocks)
	if s.assignments[podUID] == nil {
		s.assignments[podUID] = map[string][]state.Block{}
	}
	s.assignments[podUID][c.Name] = blocks
	// Record the reuse on the init containers' blocks, so that the blocks of the pod
	// add up to what the machine state holds for it.
	p.updateInitContainersMemoryBlocks(s, pod, c, blocks)
	return true, nil
}

// bestHint is the NUMA placement for the container: the topology manager's, or the
// best computed one when it gave none, widened when it does not fit.
func (p *staticPolicy) bestHint(machine state.NUMANodeMap, pod *v1.Pod, c *v1.Container, reqs map[v1.ResourceName]uint64) (topologymanager.TopologyHint, error) {
	var hint topologymanager.TopologyHint
	if p.affinity != nil {
		hint = p.affinity.GetAffinity(string(pod.UID), c.Name)
	}
	if hint.NUMANodeAffinity.IsEmpty() {
		best, ok := findBestHint(p.calculateHints(machine, pod, reqs)[string(v1.ResourceMemory)])
		if !ok {
			return hint, errNoDefaultAffinity
		}
		if !best.Preferred && hint.Preferred {
			return hint, errNoDefaultPreferred
		}
		hint = best
	}
	if !fitsFree(machine, hint.NUMANodeAffinity, reqs, nil) {
		// The topology manager merges the providers' hints, so it may give a subset of
		// the nodes the memory needs: widen it to a hint that contains it.
		extended, err := p.extendHint(machine, pod, reqs, hint.NUMANodeAffinity)
		if err != nil {
			return hint, err
		}
		if !extended.Preferred && hint.Preferred {
			return hint, errNoExtendedPreferred
		}
		hint = extended
	}
	if violatesNUMAAllocations(machine, hint.NUMANodeAffinity) {
		return hint, errViolatesNUMA
	}
	return hint, nil
}

// extendHint is the best computed hint that contains mask.
func (p *staticPolicy) extendHint(machine state.NUMANodeMap, pod *v1.Pod, reqs map[v1.ResourceName]uint64, mask topologymanager.Mask) (topologymanager.TopologyHint, error) {
	var candidates []topologymanager.TopologyHint
	for _, h := range p.calculateHints(machine, pod, reqs)[string(v1.ResourceMemory)] {
		if h.NUMANodeAffinity.And(mask) == mask {
			candidates = append(candidates, h)
		}
	}
	best, ok := findBestHint(candidates)
	if !ok {
		return best, errNoExtension
	}
	return best, nil
}

// findBestHint is the first preferred hint with the fewest (then lowest) NUMA nodes,
// or the first such hint when none is preferred.
func findBestHint(hints []topologymanager.TopologyHint) (topologymanager.TopologyHint, bool) {
	if len(hints) == 0 {
		return topologymanager.TopologyHint{}, false
	}
	best := hints[0]
	for _, h := range hints[1:] {
		if h.Preferred && !best.Preferred ||
			h.Preferred == best.Preferred && h.NUMANodeAffinity.IsNarrowerThan(best.NUMANodeAffinity) {
			best = h
		}
	}
	return best, true
}

// assign makes the container's blocks on the hint's nodes and takes their memory from
// the machine state, less what the pod's finished init containers left there.
func (p *staticPolicy) assign(machine state.NUMANodeMap, pod *v1.Pod, hint topologymanager.TopologyHint, reqs map[v1.ResourceName]uint64) []state.Block {
	nodes := hint.NUMANodeAffinity.Bits()
	var blocks []state.Block
	for _, name := range sortedNames(reqs) {
		size := reqs[name]
		blocks = append(blocks, state.Block{NUMAAffinity: nodes, Type: name, Size: size})
		reused := min(size, p.podReusableMemory(string(pod.UID), hint.NUMANodeAffinity, name))
		reserveMemory(machine, nodes, name, size-reused)
	}
	return blocks
}

// reserveMemory takes size bytes of a type from the nodes, in order, and counts one
// more block on each of them, which from now on belong to the group of all of them.
func reserveMemory(machine state.NUMANodeMap, nodes []int, name v1.ResourceName, size uint64) {
	for _, id := range nodes {
		node := machine[id]
		if node == nil {
			continue
		}
		node.NumberOfAssignments++
		node.Cells = append([]int{}, nodes...)
		table := node.MemoryMap[name]
		if size == 0 || table == nil {
			continue
		}
		taken := min(size, table.Free)
		table.Reserved += taken
		table.Free -= taken
		size -= taken
	}
}

// releaseMemory gives the blocks' memory back to their nodes; a node left without
// blocks leaves its group.
func releaseMemory(machine state.NUMANodeMap, blocks []state.Block) {
	for _, b := range blocks {
		size := b.Size
		for _, id := range b.NUMAAffinity {
			node := machine[id]
			if node == nil {
				continue
			}
			node.NumberOfAssignments--
			if node.NumberOfAssignments == 0 {
				node.Cells = []int{id}
			}
			table := node.MemoryMap[b.Type]
			if size == 0 || table == nil {
				continue
			}
			given := min(size, table.Reserved)
			table.Free += given
			table.Reserved -= given
			size -= given
		}
	}
}

// removeContainer frees the container's blocks; it reports whether it had any.
func (p *staticPolicy) removeContainer(s *memoryState, podUID, name string) bool {
	blocks, ok := s.assignments[podUID][name]
	if !ok {
		return false
	}
	delete(s.assignments[podUID], name)
	if len(s.assignments[podUID]) == 0 {
		delete(s.assignments, podUID)
	}
	releaseMemory(s.machine, blocks)
	return true
}

func (p *staticPolicy) podReusableMemory(podUID string, mask topologymanager.Mask, name v1.ResourceName) uint64 {
	return p.reusable[podUID][mask][name]
}

// updatePodReusableMemory records what a regular init container leaves for the
// containers after it (the largest block of each type on each node set), and removes
// what an app container or sidecar takes of it. Only the pod being admitted is kept.
func (p *staticPolicy) updatePodReusableMemory(pod *v1.Pod, c *v1.Container, blocks []state.Block) {
	podUID := string(pod.UID)
	for uid := range p.reusable {
		if uid != podUID {
			delete(p.reusable, uid)
		}
	}
	regularInit := isRegularInitContainer(pod, c.Name)
	for _, b := range blocks {
		mask, err := topologymanager.NewMask(b.NUMAAffinity...)
		if err != nil {
			continue
		}
		if regularInit {
			p.setReusable(podUID, mask, b.Type, max(p.podReusableMemory(podUID, mask, b.Type), b.Size))
		} else if left := p.podReusableMemory(podUID, mask, b.Type); left != 0 {
			p.setReusable(podUID, mask, b.Type, left-min(left, b.Size))
		}
	}
}

func (p *staticPolicy) setReusable(podUID string, mask topologymanager.Mask, name v1.ResourceName, size uint64) {
	if p.reusable[podUID] == nil {
		p.reusable[podUID] = map[topologymanager.Mask]map[v1.ResourceName]uint64{}
	}
	if p.reusable[podUID][mask] == nil {
		p.reusable[podUID][mask] = map[v1.ResourceName]uint64{}
	}
	p.reusable[podUID][mask][name] = size
}

// updateInitContainersMemoryBlocks shrinks the blocks of the regular init containers
// before c by the memory c reuses from them (same type, same nodes), earliest first.
func (p *staticPolicy) updateInitContainersMemoryBlocks(s *memoryState, pod *v1.Pod, c *v1.Container, blocks []state.Block) {
	podUID := string(pod.UID)
	for _, b := range blocks {
		size := b.Size
		for i := range pod.Spec.InitContainers {
			init := &pod.Spec.InitContainers[i]
			if init.Name == c.Name || size == 0 {
				break
			}
			if isRestartable(init) {
				continue // a sidecar keeps running: nothing of it is reused
			}
			size = shrinkMatching(s.assignments[podUID][init.Name], b, size)
		}
	}
}

// shrinkMatching takes up to size bytes from the blocks like b, returning what is left.
func shrinkMatching(initBlocks []state.Block, b state.Block, size uint64) uint64 {
	for i := range initBlocks {
		ib := &initBlocks[i]
		if ib.Size == 0 || ib.Type != b.Type || !sameNodes(ib.NUMAAffinity, b.NUMAAffinity) {
			continue
		}
		taken := min(size, ib.Size)
		ib.Size -= taken
		size -= taken
	}
	return size
}

// violatesNUMAAllocations reports whether a multi-node placement would use a node that
// serves single-node blocks or another group (upstream's
// isAffinityViolatingNUMAAllocations).
func violatesNUMAAllocations(machine state.NUMANodeMap, mask topologymanager.Mask) bool {
	if mask.Count() == 1 {
		return false
	}
	for _, id := range mask.Bits() {
		node := machine[id]
		if node == nil || node.NumberOfAssignments == 0 {
			continue
		}
		if len(node.Cells) == 1 || !sameNodes(node.Cells, mask.Bits()) {
			return true
		}
	}
	return false
}

// fitsFree reports whether the nodes have the memory free, counting reusable memory.
func fitsFree(machine state.NUMANodeMap, mask topologymanager.Mask, reqs map[v1.ResourceName]uint64, reusable func(v1.ResourceName) uint64) bool {
	for name, size := range reqs {
		free := sumOver(machine, mask, name, func(t *state.MemoryTable) uint64 { return t.Free })
		if reusable != nil {
			free += reusable(name)
		}
		if free < size {
			return false
		}
	}
	return true
}

// fitsAllocatable reports whether the nodes could hold the memory were they empty.
func fitsAllocatable(machine state.NUMANodeMap, mask topologymanager.Mask, reqs map[v1.ResourceName]uint64) bool {
	for name, size := range reqs {
		if sumOver(machine, mask, name, func(t *state.MemoryTable) uint64 { return t.Allocatable }) < size {
			return false
		}
	}
	return true
}

func sumOver(machine state.NUMANodeMap, mask topologymanager.Mask, name v1.ResourceName, field func(*state.MemoryTable) uint64) uint64 {
	var sum uint64
	for _, id := range mask.Bits() {
		if node := machine[id]; node != nil && node.MemoryMap[name] != nil {
			sum += field(node.MemoryMap[name])
		}
	}
	return sum
}

// sameNodes compares two NUMA node lists as sets.
func sameNodes(a, b []int) bool {
	ma, errA := topologymanager.NewMask(a...)
	mb, errB := topologymanager.NewMask(b...)
	return errA == nil && errB == nil && len(a) == len(b) && ma == mb
}

func sortedNodeIDs(machine state.NUMANodeMap) []int {
	ids := make([]int, 0, len(machine))
	for id := range machine {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}
