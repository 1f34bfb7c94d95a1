// Package cm is nodelet's container manager: the cgroups the kubelet owns, as
// upstream's pkg/kubelet/cm lays them out with the cgroupfs driver (systemd slice
// names with the systemd driver):
//
//	<cgroupRoot>/kubepods               node allocatable (enforceNodeAllocatable "pods")
//	<cgroupRoot>/kubepods/pod<uid>      Guaranteed pods
//	<cgroupRoot>/kubepods/burstable     shares = the burstable pods' CPU requests
//	<cgroupRoot>/kubepods/besteffort    minimum shares
//	.../burstable/pod<uid>, .../besteffort/pod<uid>
//
// Pod cgroups carry the pod's CPU shares (cpu.weight on cgroup v2), CFS quota, memory,
// PID and huge page limits. Runtimes create the containers' cgroups below them; runc
// removes only a container's own, so pod cgroups are the kubelet's to remove. Both
// cgroup v1 and the unified v2 hierarchy are written directly through the cgroup
// filesystem, detected at start. With the systemd driver where systemd runs
// (Options.Systemd), each cgroup is first a transient slice unit that systemd starts,
// limits (SetUnitProperties) and stops over D-Bus, as upstream's libcontainer systemd
// manager has it; the cgroup files are written after that, as libcontainer writes them.
package cm
