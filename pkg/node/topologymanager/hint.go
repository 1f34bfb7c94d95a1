// Package topologymanager aligns the resources of a pod's containers on NUMA nodes, as
// upstream's kubelet cm/topologymanager: the hint providers (CPU manager, memory
// manager, device plugins) say on which NUMA nodes they could allocate a container's
// resources, the policy merges their hints, and a pod whose merged hint the policy
// refuses is not admitted (TopologyAffinityError).
package topologymanager

import (
	v1 "k8s.io/api/core/v1"
)

// TopologyHint is one NUMA placement a provider can give a container's resource, and
// whether it is one the provider prefers (the narrowest that fits).
type TopologyHint struct {
	// NUMANodeAffinity is the NUMA nodes of the placement; empty means no preference.
	NUMANodeAffinity Mask
	Preferred        bool
}

// IsEqual: the same affinity and preference.
func (h TopologyHint) IsEqual(o TopologyHint) bool {
	return h.Preferred == o.Preferred && h.NUMANodeAffinity == o.NUMANodeAffinity
}

// LessThan: preferred hints come first, then narrower affinities (upstream's order).
func (h TopologyHint) LessThan(o TopologyHint) bool {
	if h.Preferred != o.Preferred {
		return h.Preferred
	}
	return h.NUMANodeAffinity.IsNarrowerThan(o.NUMANodeAffinity)
}

// HintProvider is a resource manager the topology manager consults at admission.
type HintProvider interface {
	// GetTopologyHints maps each resource the container asks of this provider to its
	// possible placements; nil for a resource means no preference, an empty list that
	// no placement fits.
	GetTopologyHints(pod *v1.Pod, container *v1.Container) map[string][]TopologyHint
	// GetPodTopologyHints is the same for the pod as a whole (pod scope).
	GetPodTopologyHints(pod *v1.Pod) map[string][]TopologyHint
	// Allocate assigns the container's resources, following the affinity the store
	// gives for it.
	Allocate(pod *v1.Pod, container *v1.Container) error
}

// Store gives providers the affinity the topology manager chose for a container.
type Store interface {
	GetAffinity(podUID string, containerName string) TopologyHint
}
