package memorymanager

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
)

// reservedByNode is the memory reserved for the system by NUMA node and type, in bytes.
type reservedByNode map[int]map[v1.ResourceName]uint64

// systemReservedMemory checks reservedMemory against the machine and the node
// allocatable reservation, and returns it by node (upstream's getSystemReservedMemory).
func systemReservedMemory(nodeIDs []int, reservations []kubeletconfig.MemoryReservation, expected v1.ResourceList) (reservedByNode, error) {
	if err := validateReservedMemory(nodeIDs, reservations, expected); err != nil {
		return nil, err
	}
	return convertReserved(nodeIDs, reservations)
}

// validateReservedMemory requires, for every type in reservedMemory and every memory
// or huge pages type in the expected reservation (kubeReserved + systemReserved +
// evictionHard), that the reservations over all NUMA nodes add up to the expected
// amount. Types are checked in name order, so that the error is always the same one.
func validateReservedMemory(nodeIDs []int, reservations []kubeletconfig.MemoryReservation, expected v1.ResourceList) error {
	totals, err := reservedTotals(nodeIDs, reservations)
	if err != nil {
		return err
	}
	names := map[v1.ResourceName]bool{}
	for name := range totals {
		names[name] = true
	}
	for name := range expected {
		if name == v1.ResourceMemory || isHugePages(name) {
			names[name] = true
		}
	}
	for _, name := range sortedNames(names) {
		// Adding to a zero quantity keeps the added one's format, so the message shows
		// "1Gi" for 1Gi: upstream's arithmetic, hence its text.
		want := resource.NewQuantity(0, resource.DecimalSI)
		if q, ok := expected[name]; ok {
			want.Add(q)
		}
		got := resource.NewQuantity(0, resource.DecimalSI)
		if q, ok := totals[name]; ok {
			got.Add(q)
		}
		if !want.Equal(*got) {
			return fmt.Errorf("the total amount %q of type %q is not equal to the value %q determined by Node Allocatable feature", got.String(), name, want.String())
		}
	}
	return nil
}

// reservedTotals sums the reservations by type, refusing NUMA nodes the machine lacks.
func reservedTotals(nodeIDs []int, reservations []kubeletconfig.MemoryReservation) (map[v1.ResourceName]resource.Quantity, error) {
	totals := map[v1.ResourceName]resource.Quantity{}
	for _, r := range reservations {
		if !containsNode(nodeIDs, int(r.NumaNode)) {
			return nil, fmt.Errorf("the reserved memory configuration references a NUMA node %d that does not exist on this machine", r.NumaNode)
		}
		for name, q := range r.Limits {
			if prev, ok := totals[name]; ok {
				q.Add(prev)
			}
			totals[name] = q
		}
	}
	return totals, nil
}

// convertReserved gives every NUMA node a (possibly empty) map of its reservations.
func convertReserved(nodeIDs []int, reservations []kubeletconfig.MemoryReservation) (reservedByNode, error) {
	out := reservedByNode{}
	for _, id := range nodeIDs {
		out[id] = map[v1.ResourceName]uint64{}
	}
	for _, r := range reservations {
		for name, q := range r.Limits {
			v, ok := q.AsInt64()
			if !ok {
				return nil, errors.New("could not covert a variable of type Quantity to int64")
			}
			out[int(r.NumaNode)][name] = uint64(v)
		}
	}
	return out, nil
}

// requireReservedMemory refuses a Static policy without memory reserved for the system.
func requireReservedMemory(reserved reservedByNode) error {
	var total uint64
	for _, node := range reserved {
		total += node[v1.ResourceMemory]
	}
	if total == 0 {
		return errors.New("[memorymanager] you should specify the system reserved memory")
	}
	return nil
}

func isHugePages(name v1.ResourceName) bool {
	return strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix)
}

func containsNode(ids []int, id int) bool {
	for _, n := range ids {
		if n == id {
			return true
		}
	}
	return false
}

func sortedNames[T any](m map[v1.ResourceName]T) []v1.ResourceName {
	names := make([]v1.ResourceName, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	return names
}
