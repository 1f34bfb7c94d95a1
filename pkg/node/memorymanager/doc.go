// Package memorymanager is nodelet's memory manager, upstream's kubelet
// pkg/kubelet/cm/memorymanager (v1.37) for memoryManagerPolicy None and Static.
//
// With the Static policy, each container of a Guaranteed pod gets its memory and
// huge pages from a set of NUMA nodes, which becomes the container's cpuset.mems:
//
//   - The machine state is read from sysfs as cAdvisor reads it for upstream: per NUMA
//     node, MemTotal and every huge page size's pages, less the node's reservedMemory
//     (and, for memory, less the huge pages). The reservedMemory of each type must add
//     up to kubeReserved+systemReserved+evictionHard, and some memory must be reserved.
//   - The NUMA nodes are the topology manager's affinity for the container, or, without
//     one, the narrowest set that fits (calculateHints); an affinity too small is widened
//     to the narrowest set containing it. A NUMA node serves either single-node blocks or
//     blocks of exactly one group of nodes, never both.
//   - Init containers run one after the other before the app containers: the memory of
//     a regular init container is reused by the containers after it on the same nodes.
//   - Pods of other QoS classes, containers asking no memory and pods with pod-level
//     resources (upstream's PodLevelResourceManagers feature is off by default) get
//     nothing: their containers are not restricted.
//
// The state survives restarts in <root-dir>/memory_manager_state, in upstream's format
// (see package state). A state file of another policy, or one whose machine state does
// not match this machine, reservations and assignments, stops the manager from starting,
// as upstream: drain the node and remove the file.
//
// Allocation errors carry upstream's messages; admission rejects the pod with reason
// UnexpectedAdmissionError and AdmissionMessage(err), as upstream's admit handler does
// with errors that are not typed admission errors (the memory manager's never are).
package memorymanager
