package kuberuntime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/outage"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// pruneInitContainersBeforeStart keeps only the newest exited instance of each init
// container, so dead init containers do not pile up between GC runs.
func (m *Manager) pruneInitContainersBeforeStart(ctx context.Context, pod *v1.Pod, status *container.PodStatus) {
	m.removeInitContainers(ctx, pod, status, func(cs *container.Status, seen int) bool {
		exited := cs.State == container.ContainerStateExited || cs.State == container.ContainerStateUnknown
		// Unknown ones were stopped before this is called.
		return exited && seen > 1
	})
}

// purgeInitContainers removes every instance of every init container; the caller has
// stopped them (a new sandbox restarts initialization).
func (m *Manager) purgeInitContainers(ctx context.Context, pod *v1.Pod, status *container.PodStatus) {
	m.removeInitContainers(ctx, pod, status, func(*container.Status, int) bool { return true })
}

// removeInitContainers removes the init container instances remove selects; seen counts
// the instances of that name so far, newest first, counting only those that matched the
// state filter of remove.
func (m *Manager) removeInitContainers(ctx context.Context, pod *v1.Pod, status *container.PodStatus, remove func(cs *container.Status, seen int) bool) {
	for i := range pod.Spec.InitContainers {
		name := pod.Spec.InitContainers[i].Name
		seen := 0
		for _, cs := range status.ContainerStatuses {
			if cs.Name != name {
				continue
			}
			if cs.State == container.ContainerStateExited || cs.State == container.ContainerStateUnknown {
				seen++
			}
			if !remove(cs, seen) {
				continue
			}
			klog.V(4).InfoS("Removing init container", "containerName", cs.Name, "containerID", cs.ID.ID, "count", seen)
			if err := m.removeContainer(ctx, cs.ID.ID); err != nil {
				outage.ErrorS(err, "Failed to remove pod init container", "containerName", cs.Name, "pod", klog.KObj(pod))
			}
		}
	}
}

// DeleteContainer removes a container and its logs.
func (m *Manager) DeleteContainer(ctx context.Context, id container.ContainerID) error {
	return m.removeContainer(ctx, id.ID)
}

// removeContainer removes the container's logs, then the container: if the logs cannot be
// removed the container stays, and a later attempt removes both. The container must not
// be running (it would keep writing its log). A container already gone is no error.
func (m *Manager) removeContainer(ctx context.Context, id string) error {
	klog.V(4).InfoS("Removing container", "containerID", id)
	if err := m.removeContainerLog(ctx, id); err != nil {
		if cri.IsNotFound(err) {
			return nil
		}
		return err
	}
	if err := m.runtime.RemoveContainer(ctx, id); err != nil && !cri.IsNotFound(err) {
		return err
	}
	return nil
}

// removeContainerLog removes the container's log file with its rotated copies, and its
// legacy symlink.
func (m *Manager) removeContainerLog(ctx context.Context, id string) error {
	resp, err := m.runtime.ContainerStatus(ctx, id, false)
	if err != nil {
		return fmt.Errorf("failed to get container status %q: %w", id, err)
	}
	s := resp.GetStatus()
	if s == nil {
		return cri.ErrContainerStatusNil
	}
	if path := s.GetLogPath(); path != "" {
		files, _ := filepath.Glob(path + "*")
		for _, f := range files {
			if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("failed to remove container %q log %q: %w", id, f, err)
			}
		}
	}
	l := criconfig.GetContainerInfoFromLabels(s.Labels)
	link := m.legacyLogSymlink(id, l.ContainerName, l.PodName, l.PodNamespace)
	if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("failed to remove container %q log legacy symbolic link %q: %w", id, link, err)
	}
	return nil
}
