// Package topology describes how a node's logical CPUs sit in cores, uncore (L3) cache
// groups, sockets and NUMA nodes, as upstream's pkg/kubelet/cm/cpumanager/topology:
// CPUTopology and CPUDetails with the same fields and queries, so that the CPU
// manager's allocation algorithm can be written against the same model. Discover
// builds it from sysfs the way upstream builds it from cAdvisor's machine info.
package topology

import (
	"fmt"

	"k8s.io/utils/cpuset"
)

// CPUInfo places one logical CPU. CoreID is the lowest CPU ID of its core (unique on
// the machine, unlike the kernel's core_id); UncoreCacheID is its L3 group, or its
// socket ID when the L3 spans the whole NUMA node.
type CPUInfo struct {
	NUMANodeID    int
	SocketID      int
	CoreID        int
	UncoreCacheID int
}

// CPUDetails maps logical CPU IDs to where they sit.
type CPUDetails map[int]CPUInfo

// CPUTopology is the machine's CPU layout. The counts are kept as upstream keeps
// them (from cAdvisor), not recomputed from CPUDetails: the allocation algorithm
// compares them, so hand-built topologies in tests set them as upstream's fixtures do.
type CPUTopology struct {
	NumCPUs        int
	NumCores       int
	NumUncoreCache int
	NumSockets     int
	NumNUMANodes   int
	CPUDetails     CPUDetails
}

// New builds a topology from its CPU details, counting CPUs, cores, uncore caches,
// sockets and NUMA nodes from them.
func New(details CPUDetails) *CPUTopology {
	return &CPUTopology{
		NumCPUs:        len(details),
		NumCores:       details.Cores().Size(),
		NumUncoreCache: details.UncoreCaches().Size(),
		NumSockets:     details.Sockets().Size(),
		NumNUMANodes:   details.NUMANodes().Size(),
		CPUDetails:     details,
	}
}

// CPUsPerCore is the number of hardware threads of a core (0 without cores).
func (t *CPUTopology) CPUsPerCore() int { return perGroup(t.NumCPUs, t.NumCores) }

// CPUsPerSocket is the number of logical CPUs of a socket (0 without sockets).
func (t *CPUTopology) CPUsPerSocket() int { return perGroup(t.NumCPUs, t.NumSockets) }

// CPUsPerUncore is the number of logical CPUs sharing an uncore cache (0 without any).
func (t *CPUTopology) CPUsPerUncore() int { return perGroup(t.NumCPUs, t.NumUncoreCache) }

func perGroup(cpus, groups int) int {
	if groups == 0 {
		return 0
	}
	return cpus / groups
}

// CPUCoreID is the core of a CPU.
func (t *CPUTopology) CPUCoreID(cpu int) (int, error) {
	info, err := t.info(cpu)
	return info.CoreID, err
}

// CPUSocketID is the socket of a CPU.
func (t *CPUTopology) CPUSocketID(cpu int) (int, error) {
	info, err := t.info(cpu)
	return info.SocketID, err
}

// CPUNUMANodeID is the NUMA node of a CPU.
func (t *CPUTopology) CPUNUMANodeID(cpu int) (int, error) {
	info, err := t.info(cpu)
	return info.NUMANodeID, err
}

func (t *CPUTopology) info(cpu int) (CPUInfo, error) {
	info, ok := t.CPUDetails[cpu]
	if !ok {
		return CPUInfo{CoreID: -1, SocketID: -1, NUMANodeID: -1, UncoreCacheID: -1}, fmt.Errorf("unknown CPU ID: %d", cpu)
	}
	return info, nil
}

// IsUncoreCacheAligned reports whether all the CPUs share one uncore cache (an empty or
// one-CPU set always does; an unknown CPU never does).
func (t *CPUTopology) IsUncoreCacheAligned(cpus cpuset.CPUSet) bool {
	list := cpus.List()
	if len(list) <= 1 {
		return true
	}
	first, ok := t.CPUDetails[list[0]]
	if !ok {
		return false
	}
	for _, cpu := range list[1:] {
		info, ok := t.CPUDetails[cpu]
		if !ok || info.UncoreCacheID != first.UncoreCacheID {
			return false
		}
	}
	return true
}

// KeepOnly returns the details of the given CPUs only.
func (d CPUDetails) KeepOnly(cpus cpuset.CPUSet) CPUDetails {
	out := CPUDetails{}
	for cpu, info := range d {
		if cpus.Contains(cpu) {
			out[cpu] = info
		}
	}
	return out
}

// The queries below all collect one attribute (or the CPU ID) of the CPUs whose other
// attribute is in a list of IDs.

func cpuID(cpu int, _ CPUInfo) int  { return cpu }
func coreOf(_ int, i CPUInfo) int   { return i.CoreID }
func socketOf(_ int, i CPUInfo) int { return i.SocketID }
func numaOf(_ int, i CPUInfo) int   { return i.NUMANodeID }
func uncoreOf(_ int, i CPUInfo) int { return i.UncoreCacheID }
func isIn(ids []int, attr func(int, CPUInfo) int) func(int, CPUInfo) bool {
	return func(cpu int, i CPUInfo) bool {
		v := attr(cpu, i)
		for _, id := range ids {
			if v == id {
				return true
			}
		}
		return false
	}
}

func (d CPUDetails) collect(keep func(int, CPUInfo) bool, attr func(int, CPUInfo) int) cpuset.CPUSet {
	var out []int
	for cpu, info := range d {
		if keep(cpu, info) {
			out = append(out, attr(cpu, info))
		}
	}
	return cpuset.New(out...)
}

func (d CPUDetails) all(attr func(int, CPUInfo) int) cpuset.CPUSet {
	return d.collect(func(int, CPUInfo) bool { return true }, attr)
}

// CPUs is every CPU ID.
func (d CPUDetails) CPUs() cpuset.CPUSet { return d.all(cpuID) }

// Cores is every core ID.
func (d CPUDetails) Cores() cpuset.CPUSet { return d.all(coreOf) }

// Sockets is every socket ID.
func (d CPUDetails) Sockets() cpuset.CPUSet { return d.all(socketOf) }

// NUMANodes is every NUMA node ID.
func (d CPUDetails) NUMANodes() cpuset.CPUSet { return d.all(numaOf) }

// UncoreCaches is every uncore cache ID.
func (d CPUDetails) UncoreCaches() cpuset.CPUSet { return d.all(uncoreOf) }

// CPUsInCores is the CPUs of the given cores.
func (d CPUDetails) CPUsInCores(ids ...int) cpuset.CPUSet {
	return d.collect(isIn(ids, coreOf), cpuID)
}

// CPUsInSockets is the CPUs of the given sockets.
func (d CPUDetails) CPUsInSockets(ids ...int) cpuset.CPUSet {
	return d.collect(isIn(ids, socketOf), cpuID)
}

// CPUsInNUMANodes is the CPUs of the given NUMA nodes.
func (d CPUDetails) CPUsInNUMANodes(ids ...int) cpuset.CPUSet {
	return d.collect(isIn(ids, numaOf), cpuID)
}

// CPUsInUncoreCaches is the CPUs of the given uncore caches.
func (d CPUDetails) CPUsInUncoreCaches(ids ...int) cpuset.CPUSet {
	return d.collect(isIn(ids, uncoreOf), cpuID)
}

// CoresInSockets is the cores of the given sockets.
func (d CPUDetails) CoresInSockets(ids ...int) cpuset.CPUSet {
	return d.collect(isIn(ids, socketOf), coreOf)
}

// CoresInNUMANodes is the cores of the given NUMA nodes.
func (d CPUDetails) CoresInNUMANodes(ids ...int) cpuset.CPUSet {
	return d.collect(isIn(ids, numaOf), coreOf)
}

// NUMANodesInSockets is the NUMA nodes of the given sockets.
func (d CPUDetails) NUMANodesInSockets(ids ...int) cpuset.CPUSet {
	return d.collect(isIn(ids, socketOf), numaOf)
}

// SocketsInNUMANodes is the sockets of the given NUMA nodes.
func (d CPUDetails) SocketsInNUMANodes(ids ...int) cpuset.CPUSet {
	return d.collect(isIn(ids, numaOf), socketOf)
}

// UncoreInNUMANodes is the uncore caches of the given NUMA nodes.
func (d CPUDetails) UncoreInNUMANodes(ids ...int) cpuset.CPUSet {
	return d.collect(isIn(ids, numaOf), uncoreOf)
}

// CoresNeededInUncoreCache is the lowest-numbered n cores of the given uncore caches,
// or all of them when there are not more than n.
func (d CPUDetails) CoresNeededInUncoreCache(n int, ids ...int) cpuset.CPUSet {
	cores := d.collect(isIn(ids, uncoreOf), coreOf)
	if cores.Size() <= n {
		return cores
	}
	return cpuset.New(cores.List()[:n]...)
}

// AreNUMANodesInSameSocket reports whether the NUMA nodes all exist and are on one
// socket.
func (d CPUDetails) AreNUMANodesInSameSocket(numaNodes []int) bool {
	known := d.NUMANodes()
	for _, id := range numaNodes {
		if !known.Contains(id) {
			return false
		}
	}
	return d.SocketsInNUMANodes(numaNodes...).Size() <= 1
}
