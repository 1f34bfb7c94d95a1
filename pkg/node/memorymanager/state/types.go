// Package state holds the memory manager's state and reads and writes its state file,
// memory_manager_state, in the format of upstream's kubelet
// (pkg/kubelet/cm/memorymanager/state), so that a node can switch between upstream's
// kubelet and nodelet without draining.
//
// The legacy checksum of the file is computed over a hash dump (k8s.io/utils/dump) that
// spells the Go package name, type names, field names and field order of these types:
// the package must stay "state", and NUMANodeMap, NUMANodeState, MemoryTable,
// ContainerMemoryAssignments, Block, PodMemoryAssignments and PodEntry must keep
// upstream's names and shapes, or files will not verify.
package state

import (
	v1 "k8s.io/api/core/v1"
)

// MemoryTable is the memory of one type (memory or hugepages-<size>) on one NUMA node,
// in bytes: Allocatable = TotalMemSize - SystemReserved (minus huge pages, for
// memory), and Allocatable = Reserved + Free.
type MemoryTable struct {
	TotalMemSize   uint64 `json:"total"`
	SystemReserved uint64 `json:"systemReserved"`
	Allocatable    uint64 `json:"allocatable"`
	Reserved       uint64 `json:"reserved"`
	Free           uint64 `json:"free"`
}

// NUMANodeState is one NUMA node's memory and its use.
type NUMANodeState struct {
	// NumberOfAssignments counts the blocks placed on the node (a container asking for
	// memory and huge pages counts twice).
	NumberOfAssignments int `json:"numberOfAssignments"`
	// MemoryMap is the node's memory by type.
	MemoryMap map[v1.ResourceName]*MemoryTable `json:"memoryMap"`
	// Cells is the group of NUMA nodes the node's allocations span: [id] for a node used
	// alone, the whole group (this node included) once it serves a cross-NUMA block.
	Cells []int `json:"cells"`
}

// NUMANodeMap is the machine state: every NUMA node by ID.
type NUMANodeMap map[int]*NUMANodeState

// Clone returns a deep copy. Empty cell lists come back non-nil, as upstream's clone
// makes them: the legacy checksum tells nil and empty apart.
func (m NUMANodeMap) Clone() NUMANodeMap {
	out := make(NUMANodeMap, len(m))
	for id, node := range m {
		if node == nil {
			out[id] = nil
			continue
		}
		c := &NUMANodeState{NumberOfAssignments: node.NumberOfAssignments, Cells: append([]int{}, node.Cells...)}
		if node.MemoryMap != nil {
			c.MemoryMap = make(map[v1.ResourceName]*MemoryTable, len(node.MemoryMap))
			for name, table := range node.MemoryMap {
				t := *table
				c.MemoryMap[name] = &t
			}
		}
		out[id] = c
	}
	return out
}

// Block is an amount of memory of one type given to a container from a set of NUMA
// nodes.
type Block struct {
	NUMAAffinity []int           `json:"numaAffinity"`
	Type         v1.ResourceName `json:"type"`
	Size         uint64          `json:"size"`
}

// ContainerMemoryAssignments maps pod UID, then container name, to its blocks.
type ContainerMemoryAssignments map[string]map[string][]Block

// PodMemoryAssignments maps pod UID to its pod-level blocks (upstream's
// PodLevelResourceManagers feature, off by default: read, never written, by nodelet).
type PodMemoryAssignments map[string]PodEntry

// PodEntry is one pod's pod-level blocks.
type PodEntry struct {
	MemoryBlocks []Block `json:"memoryBlocks,omitempty"`
}
