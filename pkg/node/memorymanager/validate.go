package memorymanager

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/node/memorymanager/state"
)

var (
	errEmptyMachineWithAssignments = errors.New("[memorymanager] machine state can not be empty when it has memory assignments")
	errMachineStateMismatch        = errors.New("[memorymanager] the expected machine state is different from the real one")
)

// validateState checks a restored state against this machine (upstream's
// validateState): an empty machine state gets the default one; otherwise replaying
// the assignments on the default state must give the stored one. The memory, huge
// pages or reservations changing under a state file is so caught. The returned
// string says what differs, for the log.
func (p *staticPolicy) validateState(s *memoryState) (string, error) {
	if len(s.machine) == 0 {
		if len(s.assignments) != 0 {
			return "", errEmptyMachineWithAssignments
		}
		s.machine = p.defaultMachine.Clone()
		return "", nil
	}
	expected := p.defaultMachine.Clone()
	for podUID, containers := range s.assignments {
		for name, blocks := range containers {
			if err := replayBlocks(expected, blocks, podUID, name); err != nil {
				return "", err
			}
		}
	}
	if diff := machineStateDifference(s.machine, expected); diff != "" {
		return diff, errMachineStateMismatch
	}
	return "", nil
}

// replayBlocks reserves the blocks on the machine state as their allocation did.
func replayBlocks(machine state.NUMANodeMap, blocks []state.Block, podUID, name string) error {
	for _, b := range blocks {
		for _, id := range b.NUMAAffinity {
			node, ok := machine[id]
			if !ok {
				return fmt.Errorf("[memorymanager] (pod: %s, container: %s) the memory assignment uses the NUMA that does not exist", podUID, name)
			}
			if _, ok := node.MemoryMap[b.Type]; !ok {
				return fmt.Errorf("[memorymanager] (pod: %s, container: %s) the memory assignment uses memory resource that does not exist", podUID, name)
			}
		}
		reserveMemory(machine, b.NUMAAffinity, b.Type, b.Size)
	}
	return nil
}

// machineStateDifference says how two machine states differ, "" when they do not
// (upstream's areMachineStatesEqual). Free and reserved memory are compared over each
// node's group, since a cross-NUMA block may be taken from its nodes in any split.
func machineStateDifference(a, b state.NUMANodeMap) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d NUMA nodes, expected %d", len(a), len(b))
	}
	for id, na := range a {
		nb, ok := b[id]
		if !ok || na == nil || nb == nil {
			return fmt.Sprintf("NUMA node %d is not expected", id)
		}
		if diff := nodeStateDifference(a, b, id, na, nb); diff != "" {
			return fmt.Sprintf("NUMA node %d: %s", id, diff)
		}
	}
	return ""
}

func nodeStateDifference(a, b state.NUMANodeMap, id int, na, nb *state.NUMANodeState) string {
	if na.NumberOfAssignments != nb.NumberOfAssignments {
		return fmt.Sprintf("%d assignments, expected %d", na.NumberOfAssignments, nb.NumberOfAssignments)
	}
	if !sameNodes(na.Cells, nb.Cells) {
		return fmt.Sprintf("group %v, expected %v", na.Cells, nb.Cells)
	}
	if len(na.MemoryMap) != len(nb.MemoryMap) {
		return fmt.Sprintf("%d memory types, expected %d", len(na.MemoryMap), len(nb.MemoryMap))
	}
	for name, ta := range na.MemoryMap {
		tb, ok := nb.MemoryMap[name]
		if !ok || ta == nil || tb == nil {
			return fmt.Sprintf("%s is not expected", name)
		}
		if ta.TotalMemSize != tb.TotalMemSize || ta.SystemReserved != tb.SystemReserved || ta.Allocatable != tb.Allocatable {
			return fmt.Sprintf("%s total/system reserved/allocatable %d/%d/%d, expected %d/%d/%d",
				name, ta.TotalMemSize, ta.SystemReserved, ta.Allocatable, tb.TotalMemSize, tb.SystemReserved, tb.Allocatable)
		}
		freeA, reservedA := groupUsage(a, na.Cells, name)
		freeB, reservedB := groupUsage(b, na.Cells, name)
		if freeA != freeB || reservedA != reservedB {
			return fmt.Sprintf("%s free/reserved over group %v %d/%d, expected %d/%d", name, na.Cells, freeA, reservedA, freeB, reservedB)
		}
	}
	return ""
}

// groupUsage sums the free and reserved memory of a type over a group of nodes.
func groupUsage(machine state.NUMANodeMap, group []int, name v1.ResourceName) (free, reserved uint64) {
	for _, id := range group {
		if node := machine[id]; node != nil && node.MemoryMap[name] != nil {
			free += node.MemoryMap[name].Free
			reserved += node.MemoryMap[name].Reserved
		}
	}
	return free, reserved
}
