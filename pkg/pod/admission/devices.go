package admission

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// ReasonUnexpectedAdmissionError is upstream's reason when a resource manager fails to
// allocate what a pod asks for (here: the device plugins).
const ReasonUnexpectedAdmissionError = "UnexpectedAdmissionError"

// admitDevices is the device part of upstream's resource allocation handler: every
// container's devices are allocated at admission, init containers first, so that the
// containers find them when they start. A resize allocates nothing.
func (a *Admitter) admitDevices(pod *v1.Pod, _ []*v1.Pod) Result {
	if a.opts.AllocateDevices == nil {
		return admitted()
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if err := a.opts.AllocateDevices(pod, &list[i]); err != nil {
				return reject(ReasonUnexpectedAdmissionError, fmt.Sprintf("Allocate failed due to %v, which is unexpected", err))
			}
		}
	}
	return admitted()
}
