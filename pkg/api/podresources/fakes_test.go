package podresources

import (
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// fakePods keeps active pods apart from the terminal ones only GetPods knows.
type fakePods struct {
	active, terminal []*v1.Pod
}

func (f *fakePods) GetActivePods() []*v1.Pod { return f.active }
func (f *fakePods) GetPods() []*v1.Pod {
	return append(append([]*v1.Pod{}, f.active...), f.terminal...)
}
func (f *fakePods) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	for _, p := range f.active {
		if p.Namespace == namespace && p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// key names a container's assignment in the fakes' maps.
func key(podUID types.UID, container string) string { return string(podUID) + "/" + container }

type fakeDevices struct {
	byContainer map[string][]*podresourcesv1.ContainerDevices
	allocatable []*podresourcesv1.ContainerDevices
	updates     atomic.Int32
}

func (f *fakeDevices) UpdateAllocatedDevices(klog.Logger) { f.updates.Add(1) }
func (f *fakeDevices) GetDevices(podUID, container string) []*podresourcesv1.ContainerDevices {
	return f.byContainer[podUID+"/"+container]
}
func (f *fakeDevices) GetAllocatableDevices(klog.Logger) []*podresourcesv1.ContainerDevices {
	return f.allocatable
}

type fakeCPUs struct {
	byContainer map[string][]int64
	byPod       map[string][]int64
	allocatable []int64
}

func (f *fakeCPUs) GetCPUs(pod *v1.Pod, c *v1.Container) []int64 {
	return f.byContainer[key(pod.UID, c.Name)]
}
func (f *fakeCPUs) GetPodCPUs(podUID string) []int64 { return f.byPod[podUID] }
func (f *fakeCPUs) GetAllocatableCPUs() []int64      { return f.allocatable }

type fakeMemory struct {
	byContainer map[string][]*podresourcesv1.ContainerMemory
	byPod       map[string][]*podresourcesv1.ContainerMemory
	allocatable []*podresourcesv1.ContainerMemory
}

func (f *fakeMemory) GetMemory(_ klog.Logger, pod *v1.Pod, c *v1.Container) []*podresourcesv1.ContainerMemory {
	return f.byContainer[key(pod.UID, c.Name)]
}
func (f *fakeMemory) GetPodMemory(_ klog.Logger, podUID string) []*podresourcesv1.ContainerMemory {
	return f.byPod[podUID]
}
func (f *fakeMemory) GetAllocatableMemory(klog.Logger) []*podresourcesv1.ContainerMemory {
	return f.allocatable
}

type fakeDRA struct {
	byContainer map[string][]*podresourcesv1.DynamicResource
}

func (f *fakeDRA) GetDynamicResources(_ klog.Logger, pod *v1.Pod, c *v1.Container) []*podresourcesv1.DynamicResource {
	return f.byContainer[key(pod.UID, c.Name)]
}

// countingLimiter allows the first n requests and refuses the rest.
type countingLimiter struct {
	left atomic.Int32
}

func (l *countingLimiter) Allow() bool { return l.left.Add(-1) >= 0 }
