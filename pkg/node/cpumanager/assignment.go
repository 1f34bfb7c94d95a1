package cpumanager

import (
	"fmt"
	"sort"

	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/node/cpumanager/topology"
)

// accumulator gathers CPUs for one request, best fit first, as upstream's
// cpuAccumulator. Every ordering below is by ascending number of free CPUs, ties by
// ascending ID, so that the emptiest places fill up first and fragmentation stays low.
type accumulator struct {
	// topo is the whole machine; free holds the CPUs still available to this request.
	topo *topology.CPUTopology
	free topology.CPUDetails
	// needed is how many CPUs are still wanted; result what has been taken.
	needed int
	result cpuset.CPUSet
	// numaFirst: NUMA nodes are at least as big as sockets (fewer or as many), so
	// sockets are ordered within NUMA nodes; otherwise NUMA nodes within sockets.
	numaFirst bool
	// spread takes CPUs socket by socket in ID order (distribute-cpus-across-cores),
	// rather than core by core.
	spread bool
}

func newAccumulator(topo *topology.CPUTopology, available cpuset.CPUSet, n int, spread bool) *accumulator {
	return &accumulator{
		topo:      topo,
		free:      topo.CPUDetails.KeepOnly(available),
		needed:    n,
		result:    cpuset.New(),
		numaFirst: topo.NumSockets >= topo.NumNUMANodes,
		spread:    spread,
	}
}

func (a *accumulator) take(cpus cpuset.CPUSet) {
	a.result = a.result.Union(cpus)
	a.free = a.free.KeepOnly(a.free.CPUs().Difference(a.result))
	a.needed -= cpus.Size()
}

func (a *accumulator) needsAtLeast(n int) bool { return a.needed >= n }
func (a *accumulator) isSatisfied() bool       { return a.needed < 1 }
func (a *accumulator) isFailed() bool          { return a.needed > a.free.CPUs().Size() }

// sortByFree orders ids by how many free CPUs each holds, then by ID.
func (a *accumulator) sortByFree(ids []int, cpusIn func(...int) cpuset.CPUSet) []int {
	sort.Slice(ids, func(i, j int) bool {
		ni, nj := cpusIn(ids[i]).Size(), cpusIn(ids[j]).Size()
		if ni != nj {
			return ni < nj
		}
		return ids[i] < ids[j]
	})
	return ids
}

// within lists, for each outer group in order, its inner groups sorted by free CPUs.
// A group under two outer groups is listed twice, as upstream lists it.
func (a *accumulator) within(outer []int, inner func(...int) cpuset.CPUSet, cpusIn func(...int) cpuset.CPUSet) []int {
	var out []int
	for _, id := range outer {
		out = append(out, a.sortByFree(inner(id).UnsortedList(), cpusIn)...)
	}
	return out
}

func (a *accumulator) sortedNUMANodes() []int {
	if a.numaFirst {
		return a.sortByFree(a.free.NUMANodes().UnsortedList(), a.free.CPUsInNUMANodes)
	}
	return a.within(a.sortedSockets(), a.free.NUMANodesInSockets, a.free.CPUsInNUMANodes)
}

func (a *accumulator) sortedSockets() []int {
	if a.numaFirst {
		return a.within(a.sortedNUMANodes(), a.free.SocketsInNUMANodes, a.free.CPUsInSockets)
	}
	return a.sortByFree(a.free.Sockets().UnsortedList(), a.free.CPUsInSockets)
}

// sortedCores orders cores within the lower of sockets and NUMA nodes.
func (a *accumulator) sortedCores() []int {
	if a.numaFirst {
		return a.within(a.sortedSockets(), a.free.CoresInSockets, a.free.CPUsInCores)
	}
	return a.within(a.sortedNUMANodes(), a.free.CoresInNUMANodes, a.free.CPUsInCores)
}

func (a *accumulator) sortedUncoreCaches() []int {
	return a.within(a.sortedNUMANodes(), a.free.UncoreInNUMANodes, a.free.CPUsInUncoreCaches)
}

// sortedCPUs lists the free CPUs core by core (packed), or socket by socket in ID order
// (spread), each group's CPUs by ID.
func (a *accumulator) sortedCPUs() []int {
	groups, cpusIn := a.sortedCores(), a.free.CPUsInCores
	if a.spread {
		groups, cpusIn = a.sortedSockets(), a.free.CPUsInSockets
	}
	var out []int
	for _, g := range groups {
		out = append(out, cpusIn(g).List()...)
	}
	return out
}

// freeOf keeps the groups none of whose CPUs is taken.
func freeOf(ids []int, isFree func(int) bool) []int {
	out := []int{}
	for _, id := range ids {
		if isFree(id) {
			out = append(out, id)
		}
	}
	return out
}

// takeWhole takes each whole group (listed before any is taken) the request still needs
// all of.
func (a *accumulator) takeWhole(groups []int, cpusIn func(...int) cpuset.CPUSet) {
	for _, id := range groups {
		cpus := cpusIn(id)
		if a.needsAtLeast(cpus.Size()) {
			a.take(cpus)
		}
	}
}

func (a *accumulator) takeFullNUMANodes() {
	all := a.topo.CPUDetails
	a.takeWhole(freeOf(a.sortedNUMANodes(), func(id int) bool {
		return a.free.CPUsInNUMANodes(id).Size() == all.CPUsInNUMANodes(id).Size()
	}), all.CPUsInNUMANodes)
}

func (a *accumulator) takeFullSockets() {
	a.takeWhole(freeOf(a.sortedSockets(), func(id int) bool {
		return a.free.CPUsInSockets(id).Size() == a.topo.CPUsPerSocket()
	}), a.topo.CPUDetails.CPUsInSockets)
}

func (a *accumulator) takeFullCores() {
	a.takeWhole(freeOf(a.sortedCores(), func(id int) bool {
		return a.free.CPUsInCores(id).Size() == a.topo.CPUsPerCore()
	}), a.topo.CPUDetails.CPUsInCores)
}

func (a *accumulator) takeFullUncoreCaches() {
	all := a.topo.CPUDetails
	a.takeWhole(freeOf(a.sortedUncoreCaches(), func(id int) bool {
		return a.free.CPUsInUncoreCaches(id).Size() == all.CPUsInUncoreCaches(id).Size()
	}), all.CPUsInUncoreCaches)
}

// takeFirstLevels takes whole NUMA nodes and sockets, the bigger of the two first.
func (a *accumulator) takeFirstLevels() bool {
	first, second := a.takeFullSockets, a.takeFullNUMANodes
	if a.numaFirst {
		first, second = second, first
	}
	first()
	if a.isSatisfied() {
		return true
	}
	second()
	return a.isSatisfied()
}

// takeUncoreCaches takes whole uncore caches while the request needs at least one's
// worth, then tries to fit the rest in a single cache (prefer-align-cpus-by-uncorecache).
func (a *accumulator) takeUncoreCaches() {
	perCache := a.topo.CPUsPerUncore()
	for _, cache := range a.sortedUncoreCaches() {
		if a.needsAtLeast(perCache) {
			a.takeFullUncoreCaches()
		}
		if a.isSatisfied() {
			return
		}
		a.takePartialUncoreCache(cache)
		if a.isSatisfied() {
			return
		}
	}
}

// takePartialUncoreCache takes the rest of the request from the lowest free cores of
// one uncore cache, whole cores first, when they hold exactly what is needed.
func (a *accumulator) takePartialUncoreCache(cache int) {
	perCore := max(a.topo.CPUsPerCore(), 1)
	cores := a.free.CoresNeededInUncoreCache((a.needed+perCore-1)/perCore, cache)
	cpus := a.free.CPUsInCores(cores.UnsortedList()...)
	// For an odd request on SMT, leave out the highest CPU so that only one core is split.
	if a.needed%2 != 0 && perCore > 1 {
		list := cpus.List()
		if len(list) > a.needed {
			list = list[:len(list)-1]
		}
		cpus = cpuset.New(list...)
	}
	if cpus.Size() == a.needed {
		a.take(cpus)
	}
}

func (a *accumulator) takeRemainingCPUs() {
	for _, cpu := range a.sortedCPUs() {
		a.take(cpuset.New(cpu))
		if a.isSatisfied() {
			return
		}
	}
}

func notEnoughCPUs(requested int, available cpuset.CPUSet) error {
	return fmt.Errorf("not enough cpus available to satisfy request: requested=%d, available=%d", requested, available.Size())
}

// takeByTopologyNUMAPacked picks n CPUs of available, upstream's topology-aware best
// fit: whole NUMA nodes and sockets the request fills, then (preferUncore) whole or
// single uncore caches, then whole cores (unless spread), then single CPUs from the
// fullest places, so that what is left stays as whole as possible.
func takeByTopologyNUMAPacked(topo *topology.CPUTopology, available cpuset.CPUSet, n int, spread, preferUncore bool) (cpuset.CPUSet, error) {
	a := newAccumulator(topo, available, n, spread)
	if a.isSatisfied() {
		return a.result, nil
	}
	if a.isFailed() {
		return cpuset.New(), notEnoughCPUs(n, available)
	}
	if a.takeFirstLevels() {
		return a.result, nil
	}
	if preferUncore {
		if a.takeUncoreCaches(); a.isSatisfied() {
			return a.result, nil
		}
	}
	if !spread {
		if a.takeFullCores(); a.isSatisfied() {
			return a.result, nil
		}
	}
	if a.takeRemainingCPUs(); a.isSatisfied() {
		return a.result, nil
	}
	return cpuset.New(), fmt.Errorf("failed to allocate cpus")
}
