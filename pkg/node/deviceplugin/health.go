package deviceplugin

import (
	"maps"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// UpdateAllocatedResourcesStatus sets, in the status of each of the pod's containers,
// the health of the devices allocated to it (allocatedResourcesStatus, upstream's
// ResourceHealthStatus). A device its plugin no longer lists counts as healthy.
func (m *Manager) UpdateAllocatedResourcesStatus(pod *v1.Pod, status *v1.PodStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range status.ContainerStatuses {
		cs := &status.ContainerStatuses[i]
		allocations := m.podDevices[string(pod.UID)][cs.Name]
		for _, name := range slices.Sorted(maps.Keys(allocations)) {
			if len(allocations[name].deviceIDs) > 0 {
				setResourceStatus(cs, m.resourceStatus(name, allocations[name]))
			}
		}
	}
}

// resourceStatus is the health of the devices of one allocation, in device ID order.
func (m *Manager) resourceStatus(resourceName string, a allocation) v1.ResourceStatus {
	status := v1.ResourceStatus{Name: v1.ResourceName(resourceName), Resources: []v1.ResourceHealth{}}
	for _, id := range sets.List(a.deviceIDs.Devices()) {
		health := v1.ResourceHealthStatusHealthy
		if dev, ok := m.allDevices[resourceName][id]; ok && dev.Health != pluginapi.Healthy {
			health = v1.ResourceHealthStatusUnhealthy
		}
		status.Resources = append(status.Resources, v1.ResourceHealth{ResourceID: v1.ResourceID(id), Health: health})
	}
	return status
}

// setResourceStatus replaces the container's status of the resource, or adds it.
func setResourceStatus(cs *v1.ContainerStatus, rs v1.ResourceStatus) {
	if cs.AllocatedResourcesStatus == nil {
		cs.AllocatedResourcesStatus = []v1.ResourceStatus{}
	}
	for j := range cs.AllocatedResourcesStatus {
		if cs.AllocatedResourcesStatus[j].Name == rs.Name {
			cs.AllocatedResourcesStatus[j] = rs
			return
		}
	}
	cs.AllocatedResourcesStatus = append(cs.AllocatedResourcesStatus, rs)
}
