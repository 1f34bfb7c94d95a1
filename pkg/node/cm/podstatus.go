package cm

import (
	"errors"
	"fmt"
	"math"

	v1 "k8s.io/api/core/v1"
)

// errPodCgroupsNotManaged is why a pod cgroup cannot be read back: nodelet does not
// manage pod cgroups (no cgroups per QoS, or no cgroup filesystem). It wraps
// errors.ErrUnsupported, which the pod status takes as "nothing to read".
var errPodCgroupsNotManaged = fmt.Errorf("pod cgroups are not managed: %w", errors.ErrUnsupported)

// PodCgroupCPU reads back the CPU settings of the pod's cgroup as upstream's kubelet
// reads them for the pod's status.resources: cpu.shares (on cgroup v2, cpu.weight
// converted to shares rounding down, as upstream converts it), the CFS quota (-1: none)
// and period in µs.
func (m *ContainerManager) PodCgroupCPU(pod *v1.Pod) (shares uint64, quota int64, period uint64, err error) {
	if !m.perQOS() {
		return 0, 0, 0, errPodCgroupsNotManaged
	}
	cpu, err := m.fs.readCPU(m.names.path(m.podCgroup(pod)))
	if err != nil {
		return 0, 0, 0, fmt.Errorf("failed to read CPU config for the cgroup of pod %q: %w", pod.UID, err)
	}
	shares = cpu.shares
	if m.fs.unified {
		shares = cpuWeightToSharesFloor(cpu.weight)
	}
	return shares, cpu.quota, cpu.period, nil
}

// PodCgroupMemoryLimit reads back the memory limit of the pod's cgroup in bytes as
// upstream's kubelet reads it for the pod's status.resources: cgroup v1's "no limit"
// is its largest page-aligned value (which the status shows, as upstream's does);
// cgroup v2's "max" reads as -1 (none).
func (m *ContainerManager) PodCgroupMemoryLimit(pod *v1.Pod) (int64, error) {
	if !m.perQOS() {
		return 0, errPodCgroupsNotManaged
	}
	limit, err := m.fs.readMemoryLimit(m.names.path(m.podCgroup(pod)))
	if err != nil {
		return 0, fmt.Errorf("failed to read the memory limit of the cgroup of pod %q: %w", pod.UID, err)
	}
	if m.fs.unified && limit == math.MaxInt64 {
		return -1, nil
	}
	return limit, nil
}
