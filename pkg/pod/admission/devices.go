package admission

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// ReasonUnexpectedAdmissionError is upstream's reason when a resource manager fails to
// allocate what a pod asks for (here: the device plugins).
const ReasonUnexpectedAdmissionError = "UnexpectedAdmissionError"

// admitResources is upstream's resource allocation handler: the pod's CPUs, NUMA memory
// and devices are allocated at admission (AllocateResources), or without the resource
// managers only every container's devices, init containers first, so that the
// containers find them when they start. A resize allocates nothing.
func (a *Admitter) admitResources(pod *v1.Pod, _ []*v1.Pod) Result {
	if a.opts.AllocateResources != nil {
		if ok, reason, message := a.opts.AllocateResources(pod); !ok {
			return reject(reason, message)
		}
		return admitted()
	}
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
