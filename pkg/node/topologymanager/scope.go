package topologymanager

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// The topology manager scopes (--topology-manager-scope).
const (
	// ContainerTopologyScope aligns each container's resources on its own.
	ContainerTopologyScope = "container"
	// PodTopologyScope aligns the resources of all the pod's containers together.
	PodTopologyScope = "pod"
	// NoneTopologyScope is the scope of the none policy, which aligns nothing.
	NoneTopologyScope = "none"
)

// podContainers is the pod's init containers (sidecars among them) then its app
// containers: the order in which they start, so in which resources are allocated.
func podContainers(pod *v1.Pod) []*v1.Container {
	out := make([]*v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

// admitContainerScope merges each container's hints, stores the affinity and has the
// providers allocate, container after container: a container's hints depend on what
// the containers before it took.
func (m *Manager) admitContainerScope(pod *v1.Pod, providers []HintProvider) error {
	for _, c := range podContainers(pod) {
		hints := make([]map[string][]TopologyHint, 0, len(providers))
		for _, p := range providers {
			hints = append(hints, p.GetTopologyHints(pod, c))
		}
		best, admit := m.policy.merge(hints)
		klog.V(3).InfoS("Best TopologyHint", "pod", klog.KObj(pod), "containerName", c.Name, "affinity", best.NUMANodeAffinity.Pretty(), "preferred", best.Preferred, "admit", admit)
		if !admit {
			AdmissionErrorsTotal.Inc()
			return &TopologyAffinityError{}
		}
		m.setAffinity(string(pod.UID), c.Name, best)
		if err := allocate(providers, pod, c); err != nil {
			AdmissionErrorsTotal.Inc()
			return err
		}
	}
	return nil
}

// admitPodScope merges the hints of the pod as a whole, then gives every container
// that affinity and has the providers allocate.
func (m *Manager) admitPodScope(pod *v1.Pod, providers []HintProvider) error {
	hints := make([]map[string][]TopologyHint, 0, len(providers))
	for _, p := range providers {
		hints = append(hints, p.GetPodTopologyHints(pod))
	}
	best, admit := m.policy.merge(hints)
	klog.V(3).InfoS("Best TopologyHint", "pod", klog.KObj(pod), "affinity", best.NUMANodeAffinity.Pretty(), "preferred", best.Preferred, "admit", admit)
	if !admit {
		AdmissionErrorsTotal.Inc()
		return &TopologyAffinityError{}
	}
	for _, c := range podContainers(pod) {
		m.setAffinity(string(pod.UID), c.Name, best)
		if err := allocate(providers, pod, c); err != nil {
			AdmissionErrorsTotal.Inc()
			return err
		}
	}
	return nil
}

// admitNoneScope only has the providers allocate: the none policy stores no affinity,
// so the providers see the empty one. As upstream, its failures are not counted as
// topology manager admission errors.
func admitNoneScope(pod *v1.Pod, providers []HintProvider) error {
	for _, c := range podContainers(pod) {
		if err := allocate(providers, pod, c); err != nil {
			return err
		}
	}
	return nil
}

// allocate has each provider allocate the container's resources, stopping at the
// first that fails.
func allocate(providers []HintProvider, pod *v1.Pod, c *v1.Container) error {
	for _, p := range providers {
		if err := p.Allocate(pod, c); err != nil {
			return err
		}
	}
	return nil
}
