package kubelet

import (
	"errors"

	v1 "k8s.io/api/core/v1"
)

// fakeCgroups manages no pod cgroups: there is nothing to read back.
func (fakeCgroups) PodCgroupCPU(*v1.Pod) (uint64, int64, uint64, error) {
	return 0, 0, 0, errors.ErrUnsupported
}

func (fakeCgroups) PodCgroupMemoryLimit(*v1.Pod) (int64, error) { return 0, errors.ErrUnsupported }
