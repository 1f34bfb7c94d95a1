package topologymanager

import (
	"slices"

	"k8s.io/klog/v2"
)

// The topology manager policies (--topology-manager-policy).
const (
	// PolicyNone gathers no hints: every container gets the empty affinity.
	PolicyNone = "none"
	// PolicyBestEffort admits every pod, with the best affinity it could find.
	PolicyBestEffort = "best-effort"
	// PolicyRestricted admits a pod only when the best affinity is a preferred one.
	PolicyRestricted = "restricted"
	// PolicySingleNumaNode admits a pod only when its resources fit on one NUMA node.
	PolicySingleNumaNode = "single-numa-node"
)

// policy merges the providers' hints into one affinity and says whether the pod may
// be admitted with it.
type policy struct {
	name string
	numa *NUMAInfo
	opts PolicyOptions
}

// merge takes each provider's hints per resource and returns the best merged hint and
// whether the policy admits it.
func (p policy) merge(providersHints []map[string][]TopologyHint) (TopologyHint, bool) {
	switch p.name {
	case PolicyNone:
		return TopologyHint{}, true
	case PolicySingleNumaNode:
		return p.mergeSingleNUMANode(providersHints)
	}
	best := p.bestHint(hintsPerResource(providersHints))
	if p.name == PolicyRestricted {
		return best, best.Preferred
	}
	return best, true
}

func (p policy) mergeSingleNUMANode(providersHints []map[string][]TopologyHint) (TopologyHint, bool) {
	best := p.bestHint(singleNUMAHints(hintsPerResource(providersHints)))
	// Spanning every NUMA node is "no alignment", told to the providers as no affinity.
	if best.NUMANodeAffinity == p.numa.DefaultAffinityMask() {
		best.NUMANodeAffinity = 0
	}
	return best, best.Preferred
}

// hintsPerResource flattens the providers' hints into one list per resource, turning
// "no preference" (a provider without resources, or a nil list) into a preferred hint
// for any node and "nothing fits" (an empty list) into a non-preferred one.
func hintsPerResource(providersHints []map[string][]TopologyHint) [][]TopologyHint {
	var all [][]TopologyHint
	for _, hints := range providersHints {
		if len(hints) == 0 {
			all = append(all, []TopologyHint{{Preferred: true}})
			continue
		}
		// Sorted for a reproducible merge; the result does not depend on the order.
		resources := make([]string, 0, len(hints))
		for r := range hints {
			resources = append(resources, r)
		}
		slices.Sort(resources)
		for _, r := range resources {
			switch {
			case hints[r] == nil:
				all = append(all, []TopologyHint{{Preferred: true}})
			case len(hints[r]) == 0:
				klog.V(4).InfoS("Hint provider has no possible NUMA affinities for resource", "resource", r)
				all = append(all, []TopologyHint{{Preferred: false}})
			default:
				all = append(all, hints[r])
			}
		}
	}
	return all
}

// singleNUMAHints keeps, of each resource's hints, the preferred ones that are on one
// NUMA node or have no affinity.
func singleNUMAHints(perResource [][]TopologyHint) [][]TopologyHint {
	var out [][]TopologyHint
	for _, hints := range perResource {
		var kept []TopologyHint
		for _, h := range hints {
			if h.Preferred && h.NUMANodeAffinity.Count() <= 1 {
				kept = append(kept, h)
			}
		}
		out = append(out, kept)
	}
	return out
}

// bestHint merges every combination of one hint per resource and keeps the best; with
// no usable combination, every node, not preferred.
func (p policy) bestHint(perResource [][]TopologyHint) TopologyHint {
	all := p.numa.DefaultAffinityMask()
	c := comparer{
		widestNeeded: maxOfNarrowestCounts(perResource),
		fitter:       p.fitterFunc(),
	}
	var best *TopologyHint
	forEachCombination(perResource, func(combination []TopologyHint) {
		candidate := mergeCombination(all, combination)
		if c.replaces(best, candidate) {
			best = &candidate
		}
	})
	if best == nil {
		return TopologyHint{NUMANodeAffinity: all, Preferred: false}
	}
	return *best
}

// fitterFunc picks between two different masks: the closest nodes under
// prefer-closest-numa-nodes (which single-numa-node ignores: its masks have one node),
// else the narrowest.
func (p policy) fitterFunc() func(a, b Mask) Mask {
	if p.opts.PreferClosestNUMA && p.name != PolicySingleNumaNode {
		return p.numa.Closest
	}
	return p.numa.Narrowest
}

// mergeCombination ANDs the affinities of the hints (those with none count as every
// node). The result is preferred only when every hint is preferred and all the hints
// that have an affinity have the same one.
func mergeCombination(all Mask, combination []TopologyHint) TopologyHint {
	merged := TopologyHint{NUMANodeAffinity: all, Preferred: true}
	var first Mask
	for _, h := range combination {
		if !h.Preferred {
			merged.Preferred = false
		}
		if h.NUMANodeAffinity.IsEmpty() {
			continue
		}
		if first.IsEmpty() {
			first = h.NUMANodeAffinity
		} else if h.NUMANodeAffinity != first {
			merged.Preferred = false
		}
		merged.NUMANodeAffinity &= h.NUMANodeAffinity
	}
	return merged
}

// forEachCombination calls f with every choice of one hint per resource (the cartesian
// product), in order. f must not keep the slice.
func forEachCombination(perResource [][]TopologyHint, f func([]TopologyHint)) {
	combination := make([]TopologyHint, len(perResource))
	var pick func(i int)
	pick = func(i int) {
		if i == len(perResource) {
			f(combination)
			return
		}
		for _, h := range perResource[i] {
			combination[i] = h
			pick(i + 1)
		}
	}
	pick(0)
}

// maxOfNarrowestCounts is, over the resources, the largest of the node counts of each
// resource's narrowest affinity: the width that a non-preferred merged hint needs to
// satisfy the most demanding resource.
func maxOfNarrowestCounts(perResource [][]TopologyHint) int {
	widest := 0
	for _, hints := range perResource {
		narrowest := 0
		for _, h := range hints {
			if n := h.NUMANodeAffinity.Count(); n > 0 && (narrowest == 0 || n < narrowest) {
				narrowest = n
			}
		}
		widest = max(widest, narrowest)
	}
	return widest
}

// comparer decides whether a merged hint beats the best one so far (upstream's
// HintMerger.compare).
type comparer struct {
	// widestNeeded is maxOfNarrowestCounts: non-preferred hints of that width are
	// best, narrower ones may lack room for a resource, wider ones are needlessly spread.
	widestNeeded int
	fitter       func(a, b Mask) Mask
}

func (c comparer) replaces(best *TopologyHint, candidate TopologyHint) bool {
	switch {
	case candidate.NUMANodeAffinity.IsEmpty():
		return false // no node satisfies every resource
	case best == nil:
		return true
	case best.Preferred != candidate.Preferred:
		return candidate.Preferred
	case best.Preferred:
		return c.fitterThan(best.NUMANodeAffinity, candidate.NUMANodeAffinity)
	}
	return c.replacesNonPreferred(best.NUMANodeAffinity, candidate.NUMANodeAffinity)
}

// replacesNonPreferred moves toward widestNeeded nodes: down from wider masks, up from
// narrower ones, and between masks of the same standing to the fitter one.
func (c comparer) replacesNonPreferred(best, candidate Mask) bool {
	b, n, want := best.Count(), candidate.Count(), c.widestNeeded
	switch {
	case b > want:
		return c.fitterThan(best, candidate)
	case b == want:
		return n == want && c.fitterThan(best, candidate)
	case n > want:
		return false
	case n == want:
		return true
	case n != b:
		return n > b
	}
	return c.fitterThan(best, candidate)
}

// fitterThan: the candidate differs from the best mask and the policy's fitter picks it.
func (c comparer) fitterThan(best, candidate Mask) bool {
	return candidate != best && c.fitter(best, candidate) != best
}
