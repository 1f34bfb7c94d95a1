package deviceplugin

import (
	"context"
	"fmt"
	"maps"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// DeviceInstances are the devices of one resource by ID.
type DeviceInstances map[string]*pluginapi.Device

// ResourceDeviceInstances are devices by resource name.
type ResourceDeviceInstances map[string]DeviceInstances

// Clone copies the maps (not the devices).
func (r ResourceDeviceInstances) Clone() ResourceDeviceInstances {
	out := make(ResourceDeviceInstances, len(r))
	for name, devs := range r {
		out[name] = maps.Clone(devs)
	}
	return out
}

// filter keeps the devices whose IDs are in keep, for the resources keep names.
func (r ResourceDeviceInstances) filter(keep map[string]sets.Set[string]) ResourceDeviceInstances {
	out := ResourceDeviceInstances{}
	for name, ids := range keep {
		devs, ok := r[name]
		if !ok {
			continue
		}
		out[name] = DeviceInstances{}
		for id, dev := range devs {
			if ids.Has(id) {
				out[name][id] = dev
			}
		}
	}
	return out
}

// pluginConnected asks a plugin that just connected for its options and makes it the
// endpoint of its resource. A second connection on the same socket is refused.
func (m *Manager) pluginConnected(ctx context.Context, c *pluginClient) error {
	opts, err := c.client().GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		return fmt.Errorf("failed to get device plugin options: %v", err)
	}
	e := &endpoint{resourceName: c.resource, socket: c.socket, api: c.client(), opts: opts}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.endpointStore[c.resource] == nil {
		m.endpointStore[c.resource] = map[string]*endpoint{}
	}
	if _, exists := m.endpointStore[c.resource][c.socket]; exists {
		return fmt.Errorf("device plugin already connected: %s", c.socket)
	}
	m.endpoints[c.resource] = e
	m.endpointStore[c.resource][c.socket] = e
	klog.FromContext(ctx).V(2).Info("Device plugin connected", "resourceName", c.resource)
	return nil
}

// pluginDisconnected stops the plugin's endpoint. When it was the last plugin of its
// resource, the resource's devices all turn unhealthy: the capacity keeps counting them
// and nothing is allocatable until the grace period ends or a plugin registers again.
func (m *Manager) pluginDisconnected(logger klog.Logger, resourceName, socket string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	endpoints, ok := m.endpointStore[resourceName]
	if !ok {
		return
	}
	e, ok := endpoints[socket]
	if !ok {
		return
	}
	e.setStopTime(m.clock.Now())
	if len(endpoints) == 1 {
		delete(m.endpointStore, resourceName)
		m.markResourceUnhealthy(logger, resourceName)
		logger.V(2).Info("Last device plugin for this resource disconnected", "resource", resourceName)
		m.notifyCapacityChanged()
		return
	}
	delete(endpoints, socket)
	for _, remaining := range endpoints {
		m.endpoints[resourceName] = remaining
		break
	}
}

func (m *Manager) markResourceUnhealthy(logger klog.Logger, resourceName string) {
	logger.V(2).Info("Mark all resources Unhealthy for resource", "resourceName", resourceName)
	healthy := m.healthyDevices[resourceName]
	if healthy != nil {
		m.healthyDevices[resourceName] = sets.New[string]()
	}
	m.unhealthyDevices[resourceName] = m.unhealthyDevices[resourceName].Union(healthy)
}

// updateDevices takes a plugin's device list (each ListAndWatch response is the full
// list), tells Updates about pods whose devices changed health, and checkpoints.
func (m *Manager) updateDevices(logger klog.Logger, resourceName string, devices []*pluginapi.Device) {
	m.mu.Lock()
	healthyCount, podsToUpdate := m.replaceDevices(resourceName, devices)
	m.mu.Unlock()
	m.notifyCapacityChanged()
	if m.reportDeviceHealth && podsToUpdate.Len() > 0 {
		m.sendUpdate(logger, podsToUpdate)
	}
	if err := m.writeCheckpoint(logger); err != nil {
		logger.Error(err, "Writing checkpoint encountered")
	}
	logger.V(2).Info("Processed device updates for resource", "resourceName", resourceName, "totalCount", len(devices), "healthyCount", healthyCount)
}

// replaceDevices installs the resource's new device list and returns how many devices
// are healthy and the pods holding a device whose health changed or that came back.
func (m *Manager) replaceDevices(resourceName string, devices []*pluginapi.Device) (int, sets.Set[string]) {
	old := m.allDevices[resourceName]
	podsToUpdate := sets.New[string]()
	m.healthyDevices[resourceName] = sets.New[string]()
	m.unhealthyDevices[resourceName] = sets.New[string]()
	m.allDevices[resourceName] = DeviceInstances{}
	for _, dev := range devices {
		if oldDev, known := old[dev.ID]; !known || oldDev.Health != dev.Health {
			// A new device may have disappeared for a while and still be assigned.
			if podUID, _ := m.podDevices.podAndContainerForDevice(resourceName, dev.ID); podUID != "" {
				podsToUpdate.Insert(podUID)
			}
		}
		m.allDevices[resourceName][dev.ID] = dev
		if dev.Health == pluginapi.Healthy {
			m.healthyDevices[resourceName].Insert(dev.ID)
		} else {
			m.unhealthyDevices[resourceName].Insert(dev.ID)
		}
	}
	return m.healthyDevices[resourceName].Len(), podsToUpdate
}

// sendUpdate never blocks device updates: when the channel is full the update is
// dropped, as upstream drops it.
func (m *Manager) sendUpdate(logger klog.Logger, pods sets.Set[string]) {
	select {
	case m.updates <- ResourceUpdate{PodUIDs: sets.List(pods)}:
	default:
		logger.Error(fmt.Errorf("device update channel is full"), "discard pods info", "podsToUpdate", sets.List(pods))
	}
}

// GetCapacity returns, for the node status, the capacity (all devices) and allocatable
// (healthy devices) of every registered resource, and the resources to delete from the
// node: those whose plugin stopped more than the grace period ago. Deleted resources are
// forgotten once returned, as the caller reflects them in the node status.
func (m *Manager) GetCapacity() (capacity, allocatable v1.ResourceList, deletedResources []string) {
	logger := m.currentLogger()
	capacity, allocatable = v1.ResourceList{}, v1.ResourceList{}
	deleted := sets.New[string]()
	m.mu.Lock()
	now := m.clock.Now()
	for name, devices := range m.healthyDevices {
		if m.resourceExpired(logger, name, now) {
			deleted.Insert(name)
			continue
		}
		capacity[v1.ResourceName(name)] = *resource.NewQuantity(int64(devices.Len()), resource.DecimalSI)
		allocatable[v1.ResourceName(name)] = *resource.NewQuantity(int64(devices.Len()), resource.DecimalSI)
	}
	for name, devices := range m.unhealthyDevices {
		if m.resourceExpired(logger, name, now) {
			deleted.Insert(name)
			continue
		}
		count := capacity[v1.ResourceName(name)]
		count.Add(*resource.NewQuantity(int64(devices.Len()), resource.DecimalSI))
		capacity[v1.ResourceName(name)] = count
	}
	for name := range deleted {
		delete(m.endpoints, name)
		delete(m.healthyDevices, name)
		delete(m.unhealthyDevices, name)
	}
	m.mu.Unlock()
	if deleted.Len() > 0 {
		if err := m.writeCheckpoint(logger); err != nil {
			logger.Error(err, "Failed to write checkpoint file")
		}
	}
	return capacity, allocatable, sets.List(deleted)
}

// resourceExpired: the resource has no endpoint (which should not happen), or its
// plugin stopped longer than the grace period ago.
func (m *Manager) resourceExpired(logger klog.Logger, name string, now time.Time) bool {
	e, ok := m.endpoints[name]
	if !ok {
		logger.Info("Unexpected: healthyDevices and endpoints are out of sync")
		return true
	}
	return e.stopGracePeriodExpired(now, m.stopGracePeriod)
}

// GetAllocatableDevices returns the healthy devices of every resource (for the
// pod-resources API).
func (m *Manager) GetAllocatableDevices() ResourceDeviceInstances {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.allDevices.filter(m.healthyDevices)
}

// GetDevices returns the devices allocated to a container by resource (for the
// pod-resources API), nil if it has none. A device carries only its NUMA nodes.
func (m *Manager) GetDevices(podUID, containerName string) ResourceDeviceInstances {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.podDevices.containerDeviceInstances(podUID, containerName)
}

func (m *Manager) currentLogger() klog.Logger {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.logger
}
