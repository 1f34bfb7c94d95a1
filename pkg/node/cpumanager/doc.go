// Package cpumanager is nodelet's CPU manager, upstream's pkg/kubelet/cm/cpumanager
// (v1.37) for cpuManagerPolicy none and static:
//
//   - none: containers run on every CPU; nothing is assigned (the state file is still
//     kept, with the policy's name, as upstream keeps it).
//   - static: containers of Guaranteed pods asking for whole CPUs get CPUs of their own,
//     taken from the shared pool by topology (cpu_assignment.go's best fit: whole NUMA
//     nodes and sockets, then uncore caches with prefer-align-cpus-by-uncorecache, then
//     whole cores, then single threads; distribute-cpus-across-numa spreads over NUMA
//     nodes). Init containers' CPUs are taken again by their pod's later containers;
//     sidecars keep theirs. Every other container runs on the shared pool: all CPUs
//     but the exclusive ones (and but the reserved ones with strict-cpu-reservation).
//     The reserved CPUs (reservedSystemCPUs, or the lowest ceil(kube+system reserved
//     cpu) by topology) are never given exclusively.
//
// The manager gives the topology manager NUMA hints for the CPUs it would give, takes
// its chosen affinity at allocation, keeps its state in upstream's cpu_manager_state
// checkpoint format (package state), re-applies changed cpusets to running containers
// in a reconcile loop, and exports upstream's kubelet_cpu_manager_* metrics.
//
// Upstream features whose feature gates are off by default in v1.37 are left out:
// pod-level resource managers (pods with pod-level resources stay on the shared pool,
// as upstream leaves them with its gate off) and in-place resize of exclusive CPUs.
package cpumanager
