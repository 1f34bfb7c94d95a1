// Package podresources serves the kubelet's pod-resources gRPC API (v1 and the deprecated
// v1alpha1) on <root-dir>/pod-resources/kubelet.sock, as upstream's kubelet v1.37.2 does
// (pkg/kubelet/apis/podresources, pkg/kubelet/server.ListenAndServePodResources).
//
// Monitoring agents (device plugins' exporters, NUMA-aware schedulers' node agents) read
// from it which devices, CPUs, memory and DRA claims each container was given. The
// package knows nothing of the managers that hold that information: they are handed in
// as the providers below, and a nil provider reads as a manager that assigned nothing.
package podresources

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodsProvider knows the pods admitted on the node.
type PodsProvider interface {
	// GetActivePods returns the pods that are not terminal; v1 List reads these.
	GetActivePods() []*v1.Pod
	// GetPods returns every pod the pod manager knows, terminal ones included; v1alpha1
	// List reads these, and v1 List does when UseActivePods is off.
	GetPods() []*v1.Pod
	// GetPodByName finds an active pod; upstream's kubelet reports a terminal pod as not
	// found, filtering as GetActivePods does.
	GetPodByName(namespace, name string) (*v1.Pod, bool)
}

// DevicesProvider knows the devices (device plugins) assigned to containers.
type DevicesProvider interface {
	// UpdateAllocatedDevices frees the devices bound to terminated pods, so a listing
	// shows no stale assignments.
	UpdateAllocatedDevices(logger klog.Logger)
	// GetDevices returns the devices assigned to a container.
	GetDevices(podUID, containerName string) []*podresourcesv1.ContainerDevices
	// GetAllocatableDevices returns every device the manager knows.
	GetAllocatableDevices(logger klog.Logger) []*podresourcesv1.ContainerDevices
}

// CPUsProvider knows the exclusive CPUs assigned to containers and pods.
type CPUsProvider interface {
	// GetCPUs returns the CPU IDs assigned to a container.
	GetCPUs(pod *v1.Pod, container *v1.Container) []int64
	// GetPodCPUs returns the CPU IDs assigned to a pod as a whole (pod-level resources).
	GetPodCPUs(podUID string) []int64
	// GetAllocatableCPUs returns the CPU IDs the node can allocate.
	GetAllocatableCPUs() []int64
}

// MemoryProvider knows the memory (NUMA blocks) assigned to containers and pods.
type MemoryProvider interface {
	// GetMemory returns the memory assigned to a container.
	GetMemory(logger klog.Logger, pod *v1.Pod, container *v1.Container) []*podresourcesv1.ContainerMemory
	// GetPodMemory returns the memory assigned to a pod as a whole (pod-level resources).
	GetPodMemory(logger klog.Logger, podUID string) []*podresourcesv1.ContainerMemory
	// GetAllocatableMemory returns the memory the node can allocate.
	GetAllocatableMemory(logger klog.Logger) []*podresourcesv1.ContainerMemory
}

// DynamicResourcesProvider knows the DRA claims' devices prepared for containers.
type DynamicResourcesProvider interface {
	// GetDynamicResources returns the dynamic resources assigned to a container.
	GetDynamicResources(logger klog.Logger, pod *v1.Pod, container *v1.Container) []*podresourcesv1.DynamicResource
}

// Providers are the sources the servers read; any of them may be nil.
type Providers struct {
	Pods             PodsProvider
	Devices          DevicesProvider
	CPUs             CPUsProvider
	Memory           MemoryProvider
	DynamicResources DynamicResourcesProvider
}

// withEmptyDefaults replaces each nil provider by one that has nothing to report, so
// the servers never check for nil.
func (p Providers) withEmptyDefaults() Providers {
	var none empty
	if p.Pods == nil {
		p.Pods = none
	}
	if p.Devices == nil {
		p.Devices = none
	}
	if p.CPUs == nil {
		p.CPUs = none
	}
	if p.Memory == nil {
		p.Memory = none
	}
	if p.DynamicResources == nil {
		p.DynamicResources = none
	}
	return p
}

// empty implements every provider with no pods and no resources.
type empty struct{}

func (empty) GetActivePods() []*v1.Pod                                     { return nil }
func (empty) GetPods() []*v1.Pod                                           { return nil }
func (empty) GetPodByName(string, string) (*v1.Pod, bool)                  { return nil, false }
func (empty) UpdateAllocatedDevices(klog.Logger)                           {}
func (empty) GetDevices(string, string) []*podresourcesv1.ContainerDevices { return nil }
func (empty) GetAllocatableDevices(klog.Logger) []*podresourcesv1.ContainerDevices {
	return nil
}
func (empty) GetCPUs(*v1.Pod, *v1.Container) []int64 { return nil }
func (empty) GetPodCPUs(string) []int64              { return nil }
func (empty) GetAllocatableCPUs() []int64            { return nil }
func (empty) GetMemory(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesv1.ContainerMemory {
	return nil
}
func (empty) GetPodMemory(klog.Logger, string) []*podresourcesv1.ContainerMemory { return nil }
func (empty) GetAllocatableMemory(klog.Logger) []*podresourcesv1.ContainerMemory {
	return nil
}
func (empty) GetDynamicResources(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesv1.DynamicResource {
	return nil
}
