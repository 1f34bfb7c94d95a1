package cpumanager

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/cpuset"
)

// removeStaleState drops the assignments of containers that are in no active pod, once
// the pod sources are ready (before that, the active pods are not all known yet).
// The caller holds m.mu.
func (m *Manager) removeStaleState() {
	if m.activePods == nil || !m.sourcesReady() {
		return
	}
	active := map[string]map[string]bool{}
	for _, pod := range m.activePods() {
		names := map[string]bool{}
		for _, containers := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for i := range containers {
				names[containers[i].Name] = true
			}
		}
		active[string(pod.UID)] = names
	}
	var stale [][2]string
	m.state.each(func(pod, container string, _ cpuset.CPUSet) {
		if !active[pod][container] {
			stale = append(stale, [2]string{pod, container})
		}
	})
	for pod, containers := range m.applied {
		for container := range containers {
			if !active[pod][container] {
				stale = append(stale, [2]string{pod, container})
			}
		}
	}
	for _, s := range stale {
		klog.V(2).InfoS("CPU manager: removing state of inactive container", "podUID", s[0], "containerName", s[1])
		m.removeContainer(s[0], s[1])
	}
	m.commit()
}

// reconcile is one pass of the loop: stale state dropped, then each running container
// of the active pods given its cpuset (exclusive, or the shared pool) if it was last
// given another. Failures are logged and retried at the next pass.
func (m *Manager) reconcile(ctx context.Context, runtime ContainerRuntime) {
	m.mu.Lock()
	m.removeStaleState()
	pods := m.activePods()
	m.mu.Unlock()
	logger := klog.FromContext(ctx)
	for _, pod := range pods {
		for _, containers := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for i := range containers {
				m.reconcileContainer(ctx, logger, runtime, pod, containers[i].Name)
			}
		}
	}
}

func (m *Manager) reconcileContainer(ctx context.Context, logger klog.Logger, runtime ContainerRuntime, pod *v1.Pod, name string) {
	podUID := string(pod.UID)
	id, running := runtime.RunningContainerID(podUID, name)
	if !running {
		// Waiting, or terminated: a terminated container keeps its CPUs, it may restart.
		return
	}
	m.mu.Lock()
	cpus := m.state.getOrDefault(podUID, name)
	last, known := m.applied[podUID][name]
	m.mu.Unlock()
	if cpus.IsEmpty() || (known && last.Equals(cpus)) {
		return
	}
	if err := runtime.UpdateContainerCPUSet(ctx, id, cpus); err != nil {
		logger.Error(err, "CPU manager: failed to update container", "pod", klog.KObj(pod), "containerName", name, "containerID", id, "cpuSet", cpus)
		return
	}
	m.mu.Lock()
	m.setApplied(podUID, name, cpus)
	m.mu.Unlock()
}
