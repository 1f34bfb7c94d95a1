package kubelet

import (
	"context"
	"fmt"
	"io"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/container"
)

// PodsWithStatus lists the desired pods with the status the kubelet last computed.
func (k *Kubelet) PodsWithStatus() []*v1.Pod {
	pods := k.pods.GetPods()
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		cp := p.DeepCopy()
		if st, ok := k.deps.Status.GetPodStatus(p.UID); ok {
			cp.Status = st
		}
		out = append(out, cp)
	}
	return out
}

// ContainerLogs streams one container's log; Previous selects the instance before the
// current one, as `kubectl logs --previous` does.
func (k *Kubelet) ContainerLogs(ctx context.Context, namespace, podName, containerName string, opts *v1.PodLogOptions, w io.Writer) error {
	pod, ok := k.pods.GetPodByName(namespace, podName)
	if !ok {
		return fmt.Errorf("pod %s/%s not found", namespace, podName)
	}
	if container.GetContainerSpec(pod, containerName) == nil {
		return fmt.Errorf("container %q is not valid for pod %q", containerName, podName)
	}
	id, err := k.containerIDForLogs(pod, containerName, opts.Previous)
	if err != nil {
		return err
	}
	return k.deps.Runtime.GetContainerLogs(ctx, pod, id, opts, w, w)
}

func (k *Kubelet) containerIDForLogs(pod *v1.Pod, name string, previous bool) (container.ContainerID, error) {
	st, _ := k.deps.Status.GetPodStatus(pod.UID)
	statuses := append(append([]v1.ContainerStatus{}, st.InitContainerStatuses...), st.ContainerStatuses...)
	statuses = append(statuses, st.EphemeralContainerStatuses...)
	for _, cs := range statuses {
		if cs.Name != name {
			continue
		}
		if previous {
			if t := cs.LastTerminationState.Terminated; t != nil && t.ContainerID != "" {
				return container.ParseContainerID(t.ContainerID), nil
			}
			return container.ContainerID{}, fmt.Errorf("previous terminated container %q in pod %q not found", name, pod.Name)
		}
		if cs.ContainerID != "" {
			return container.ParseContainerID(cs.ContainerID), nil
		}
		if w := cs.State.Waiting; w != nil {
			return container.ContainerID{}, fmt.Errorf("container %q in pod %q is waiting to start: %s", name, pod.Name, w.Reason)
		}
	}
	return container.ContainerID{}, fmt.Errorf("container %q in pod %q is waiting to start: ContainerCreating", name, pod.Name)
}
