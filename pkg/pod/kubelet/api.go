package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
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

// RunningPods lists what the runtime runs as API pods carrying what a runtime pod knows:
// name, namespace, UID and the containers' names, images and IDs (/runningpods/).
func (k *Kubelet) RunningPods(ctx context.Context) ([]*v1.Pod, error) {
	running, err := k.deps.Runtime.GetPods(ctx, false)
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Pod, 0, len(running))
	for _, rp := range running {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: rp.Name, Namespace: rp.Namespace, UID: rp.ID}}
		for _, c := range rp.Containers {
			pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: c.Name, Image: c.Image})
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, v1.ContainerStatus{
				Name: c.Name, Image: c.Image, ImageID: c.ImageID, ContainerID: c.ID.String()})
		}
		out = append(out, pod)
	}
	return out, nil
}

// SyncLoopHealthy fails when the sync loop has not gone round for longer than twice the
// sync frequency, at least five minutes (upstream's /healthz/syncloop).
func (k *Kubelet) SyncLoopHealthy() error {
	entered := k.loopEntered.Load()
	if entered == 0 {
		return nil
	}
	limit := max(2*k.cfg.SyncFrequency, syncLoopHealthMin)
	if k.deps.Clock.Since(time.Unix(0, entered)) > limit {
		return errors.New("sync Loop took longer than expected")
	}
	return nil
}

// syncLoopHealthMin is the least time /healthz/syncloop tolerates without a loop.
const syncLoopHealthMin = 5 * time.Minute

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
