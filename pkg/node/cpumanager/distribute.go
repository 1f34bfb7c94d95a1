package cpumanager

import (
	"fmt"
	"math"

	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/node/cpumanager/topology"
)

// takeByTopologyNUMADistributed picks n CPUs of available spread evenly over as few
// NUMA nodes as can hold them (distribute-cpus-across-numa, upstream's KEP-2902
// algorithm): for 1, 2, ... NUMA nodes it looks for the combination that can take an
// equal share each, in groups of groupSize CPUs (whole cores under full-pcpus-only),
// and whose leftover groups keep the free CPUs of all NUMA nodes most balanced (lowest
// standard deviation). Each NUMA node's share is then taken by the packed algorithm.
// When n is not a multiple of groupSize, or no combination fits, it falls back to the
// packed algorithm over all of available.
func takeByTopologyNUMADistributed(topo *topology.CPUTopology, available cpuset.CPUSet, n, groupSize int, spread, alignBySocket bool) (cpuset.CPUSet, error) {
	if n%groupSize != 0 {
		return takeByTopologyNUMAPacked(topo, available, n, spread, false)
	}
	a := newAccumulator(topo, available, n, spread)
	if a.isSatisfied() {
		return a.result, nil
	}
	if a.isFailed() {
		return cpuset.New(), notEnoughCPUs(n, available)
	}
	d := distributor{acc: a, numas: a.sortedNUMANodes(), n: n, groupSize: groupSize, alignBySocket: alignBySocket}
	minNUMAs, maxNUMAs := a.numaNodesNeeded(groupSize)
	for k := minNUMAs; k <= maxNUMAs; k++ {
		if best := d.best(k); best != nil {
			return d.take(best)
		}
	}
	return takeByTopologyNUMAPacked(topo, available, n, spread, false)
}

// numaNodesNeeded is the fewest and most NUMA nodes worth trying for the request, in
// groups of groupSize CPUs, assuming CPUs are spread evenly over NUMA nodes.
func (a *accumulator) numaNodesNeeded(groupSize int) (minNUMAs, maxNUMAs int) {
	groupsOnMachine := (a.topo.CPUDetails.CPUs().Size()-1)/groupSize + 1
	groupsPerNUMA := (groupsOnMachine-1)/a.topo.CPUDetails.NUMANodes().Size() + 1
	groupsNeeded := (a.needed-1)/groupSize + 1
	return (groupsNeeded-1)/groupsPerNUMA + 1, min(groupsNeeded, a.free.NUMANodes().Size())
}

type distributor struct {
	acc           *accumulator
	numas         []int // NUMA nodes with free CPUs, in the accumulator's order
	n, groupSize  int
	alignBySocket bool
}

// distribution is a candidate: an equal share on each NUMA node of combo, and one more
// group at a time on each of remainderNUMAs until the request is met.
type distribution struct {
	combo, remainderNUMAs []int
	balance               float64
	inOneSocket           bool
}

// best is the best-balanced distribution over k NUMA nodes, nil if none fits. With
// align-by-socket, a combination within one socket beats any that crosses sockets.
func (d *distributor) best(k int) *distribution {
	var best *distribution
	iterateCombinations(d.numas, k, func(combo []int) bool {
		if best != nil && best.balance == 0 && (!d.alignBySocket || best.inOneSocket) {
			return false
		}
		cand := d.evaluate(combo)
		if cand == nil {
			return true
		}
		if best == nil || d.isBetter(cand, best) {
			best = cand
		}
		return true
	})
	return best
}

func (d *distributor) isBetter(cand, best *distribution) bool {
	if d.alignBySocket && cand.inOneSocket != best.inOneSocket {
		return cand.inOneSocket
	}
	return cand.balance < best.balance
}

func (d *distributor) freeIn(numa int) int { return d.acc.free.CPUsInNUMANodes(numa).Size() }

// share is what each NUMA node of combo takes before the remainder, in whole groups;
// capped, with align-by-socket, at what the smallest of them can give.
func (d *distributor) share(combo []int, capToFree bool) int {
	share := d.n / len(combo) / d.groupSize * d.groupSize
	if capToFree {
		for _, numa := range combo {
			share = min(share, d.freeIn(numa)/d.groupSize*d.groupSize)
		}
	}
	return share
}

// evaluate scores a combination of NUMA nodes, nil if it cannot hold the request.
func (d *distributor) evaluate(combo []int) *distribution {
	if d.acc.free.CPUsInNUMANodes(combo...).Size() < d.n {
		return nil
	}
	groups := 0
	for _, numa := range combo {
		groups += d.freeIn(numa) / d.groupSize
	}
	if groups*d.groupSize < d.n {
		return nil
	}
	share := d.share(combo, d.alignBySocket)
	left := map[int]int{}
	for _, numa := range d.numas {
		left[numa] = d.freeIn(numa)
	}
	for _, numa := range combo {
		if left[numa] < share {
			return nil
		}
		left[numa] -= share
	}
	cand := &distribution{combo: combo}
	if d.alignBySocket {
		cand.inOneSocket = d.acc.topo.CPUDetails.AreNUMANodesInSameSocket(combo)
	}
	remainder := d.n - share*len(combo)
	if remainder == 0 {
		cand.balance = d.stdDev(left)
		return cand
	}
	cand.remainderNUMAs, cand.balance = d.bestRemainder(combo, left, remainder)
	if cand.remainderNUMAs == nil {
		return nil
	}
	return cand
}

// bestRemainder picks the NUMA nodes of combo that take the remainder groups so that
// the free CPUs stay most balanced, trying the most NUMA nodes first.
func (d *distributor) bestRemainder(combo []int, left map[int]int, remainder int) ([]int, float64) {
	var able []int
	for _, numa := range combo {
		if left[numa] >= d.groupSize {
			able = append(able, numa)
		}
	}
	var best []int
	bestBalance := math.MaxFloat64
	for k := len(able); k >= 1; k-- {
		iterateCombinations(able, k, func(subset []int) bool {
			after, ok := d.spreadRemainder(subset, left, remainder)
			if ok {
				if balance := d.stdDev(after); balance < bestBalance {
					best, bestBalance = subset, balance
				}
			}
			return true
		})
	}
	return best, bestBalance
}

// spreadRemainder hands the remainder out a group at a time, round robin over subset,
// and returns what is left on each NUMA node; false when the subset cannot take it.
func (d *distributor) spreadRemainder(subset []int, left map[int]int, remainder int) (map[int]int, bool) {
	total := 0
	for _, numa := range subset {
		total += left[numa]
	}
	if total < remainder {
		return nil, false
	}
	after := make(map[int]int, len(left))
	for numa, n := range left {
		after[numa] = n
	}
	for remainder > 0 {
		progress := false
		for _, numa := range subset {
			if remainder == 0 {
				break
			}
			if after[numa] < d.groupSize {
				continue
			}
			after[numa] -= d.groupSize
			remainder -= d.groupSize
			progress = true
		}
		if !progress { // only part-groups left: upstream would loop forever here
			return nil, false
		}
	}
	return after, true
}

// stdDev is the standard deviation of the free CPUs per NUMA node, rounded to three
// decimals as upstream rounds it (ties between combinations depend on it).
func (d *distributor) stdDev(left map[int]int) float64 {
	values := make([]float64, 0, len(d.numas))
	for _, numa := range d.numas {
		values = append(values, float64(left[numa]))
	}
	var sum float64
	for _, v := range values {
		sum += v
	}
	mean := math.Round(sum/float64(len(values))*1000) / 1000
	var squares float64
	for _, v := range values {
		squares += (v - mean) * (v - mean)
	}
	return math.Round(math.Sqrt(squares/float64(len(values)))*1000) / 1000
}

// take allocates the chosen distribution.
func (d *distributor) take(best *distribution) (cpuset.CPUSet, error) {
	a := d.acc
	share := d.share(best.combo, true)
	for _, numa := range best.combo {
		cpus, _ := takeByTopologyNUMAPacked(a.topo, a.free.CPUsInNUMANodes(numa), share, a.spread, false)
		a.take(cpus)
	}
	remainder := d.n - share*len(best.combo)
	for remainder > 0 {
		progress := false
		for _, numa := range best.remainderNUMAs {
			if remainder == 0 {
				break
			}
			if d.freeIn(numa) < d.groupSize {
				continue
			}
			cpus, _ := takeByTopologyNUMAPacked(a.topo, a.free.CPUsInNUMANodes(numa), d.groupSize, a.spread, false)
			a.take(cpus)
			remainder -= d.groupSize
			progress = true
		}
		if !progress {
			break
		}
	}
	if a.needed > 0 {
		return cpuset.New(), fmt.Errorf("accounting error, not enough CPUs allocated, remaining: %v", a.needed)
	}
	if a.needed < 0 {
		return cpuset.New(), fmt.Errorf("accounting error, too many CPUs allocated, remaining: %v", a.needed)
	}
	return a.result, nil
}

// iterateCombinations calls f with each k-subset of ids, in lexicographic order of
// positions, until f returns false. Each subset is a fresh slice.
func iterateCombinations(ids []int, k int, f func([]int) bool) {
	if k < 1 {
		return
	}
	var walk func(start int, acc []int) bool
	walk = func(start int, acc []int) bool {
		if len(acc) == k {
			return f(append([]int(nil), acc...))
		}
		for i := start; i <= len(ids)-(k-len(acc)); i++ {
			if !walk(i+1, append(acc, ids[i])) {
				return false
			}
		}
		return true
	}
	walk(0, make([]int, 0, k))
}
