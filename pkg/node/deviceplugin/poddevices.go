package deviceplugin

import (
	"sort"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/pkg/node/deviceplugin/checkpoint"
)

// nodeWithoutTopology is the NUMA node recorded for a device that reports none.
const nodeWithoutTopology = -1

// allocation is what one container got of one resource: the device IDs by NUMA node and
// the plugin's answer to Allocate.
type allocation struct {
	deviceIDs checkpoint.DevicesPerNUMA
	resp      *pluginapi.ContainerAllocateResponse
}

// podDevices are the allocations by pod UID, container name and resource name
// (upstream's podDevices). The manager's mutex guards it.
type podDevices map[string]map[string]map[string]allocation

func (p podDevices) insert(podUID, container, resource string, ids checkpoint.DevicesPerNUMA, resp *pluginapi.ContainerAllocateResponse) {
	if p[podUID] == nil {
		p[podUID] = map[string]map[string]allocation{}
	}
	if p[podUID][container] == nil {
		p[podUID][container] = map[string]allocation{}
	}
	p[podUID][container][resource] = allocation{deviceIDs: ids, resp: resp}
}

func (p podDevices) pods() sets.Set[string] {
	return sets.KeySet(p)
}

func (p podDevices) delete(podUIDs []string) {
	for _, uid := range podUIDs {
		delete(p, uid)
	}
}

// containerDevices returns the container's device IDs of the resource, nil when it has
// no allocation of it.
func (p podDevices) containerDevices(podUID, container, resource string) sets.Set[string] {
	a, ok := p[podUID][container][resource]
	if !ok {
		return nil
	}
	return a.deviceIDs.Devices()
}

// podResourceDevices returns the device IDs of the resource held by any container of
// the pod.
func (p podDevices) podResourceDevices(podUID, resource string) sets.Set[string] {
	out := sets.New[string]()
	for _, resources := range p[podUID] {
		if a, ok := resources[resource]; ok {
			out = out.Union(a.deviceIDs.Devices())
		}
	}
	return out
}

// addContainerDevices adds the container's devices to byResource.
func (p podDevices) addContainerDevices(podUID, container string, byResource map[string]sets.Set[string]) {
	for resource, a := range p[podUID][container] {
		byResource[resource] = byResource[resource].Union(a.deviceIDs.Devices())
	}
}

// removeContainerDevices removes the container's devices from byResource.
func (p podDevices) removeContainerDevices(podUID, container string, byResource map[string]sets.Set[string]) {
	for resource, a := range p[podUID][container] {
		byResource[resource] = byResource[resource].Difference(a.deviceIDs.Devices())
	}
}

// devices returns every allocated device ID by resource.
func (p podDevices) devices() map[string]sets.Set[string] {
	out := map[string]sets.Set[string]{}
	for _, containers := range p {
		for _, resources := range containers {
			for resource, a := range resources {
				if out[resource] == nil {
					out[resource] = sets.New[string]()
				}
				if a.resp != nil {
					out[resource] = out[resource].Union(a.deviceIDs.Devices())
				}
			}
		}
	}
	return out
}

// podAndContainerForDevice finds who holds a device. IDs are unique within a resource
// only: different plugins may use the same IDs.
func (p podDevices) podAndContainerForDevice(resource, deviceID string) (string, string) {
	for podUID, containers := range p {
		for container, resources := range containers {
			if a, ok := resources[resource]; ok && a.deviceIDs.Devices().Has(deviceID) {
				return podUID, container
			}
		}
	}
	return "", ""
}

func (p podDevices) toCheckpointData(logger klog.Logger) []checkpoint.PodDevicesEntry {
	var entries []checkpoint.PodDevicesEntry
	for podUID, containers := range p {
		for container, resources := range containers {
			for resource, a := range resources {
				if a.resp == nil {
					logger.Error(nil, "Can't marshal allocResp, allocation response is missing", "podUID", podUID, "containerName", container, "resourceName", resource)
					continue
				}
				resp, err := proto.Marshal(a.resp)
				if err != nil {
					logger.Error(err, "Can't marshal allocResp", "podUID", podUID, "containerName", container, "resourceName", resource)
					continue
				}
				entries = append(entries, checkpoint.PodDevicesEntry{PodUID: podUID, ContainerName: container,
					ResourceName: resource, DeviceIDs: a.deviceIDs, AllocResp: resp})
			}
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entryKey(entries[i]) < entryKey(entries[j]) })
	return entries
}

func entryKey(e checkpoint.PodDevicesEntry) string {
	return e.PodUID + "\x00" + e.ContainerName + "\x00" + e.ResourceName
}

// fromCheckpointData restores the entries; one whose Allocate response cannot be decoded
// is skipped.
func (p podDevices) fromCheckpointData(logger klog.Logger, entries []checkpoint.PodDevicesEntry) {
	for _, e := range entries {
		logger.V(2).Info("Get checkpoint entry", "podUID", e.PodUID, "containerName", e.ContainerName,
			"resourceName", e.ResourceName, "deviceIDs", e.DeviceIDs)
		resp := &pluginapi.ContainerAllocateResponse{}
		if err := proto.Unmarshal(e.AllocResp, resp); err != nil {
			logger.Error(err, "Can't unmarshal allocResp", "podUID", e.PodUID, "containerName", e.ContainerName, "resourceName", e.ResourceName)
			continue
		}
		p.insert(e.PodUID, e.ContainerName, e.ResourceName, e.DeviceIDs, resp)
	}
}

// containerDeviceInstances returns the container's devices by resource, each carrying
// only its NUMA nodes, nil when the container has no allocation.
func (p podDevices) containerDeviceInstances(podUID, container string) ResourceDeviceInstances {
	resources, ok := p[podUID][container]
	if !ok {
		return nil
	}
	out := ResourceDeviceInstances{}
	for resource, a := range resources {
		if len(a.deviceIDs) == 0 {
			continue
		}
		out[resource] = devicesWithNUMANodes(a.deviceIDs)
	}
	return out
}

// devicesWithNUMANodes turns IDs by NUMA node into devices listing their NUMA nodes.
func devicesWithNUMANodes(ids checkpoint.DevicesPerNUMA) DeviceInstances {
	out := DeviceInstances{}
	numas := make([]int64, 0, len(ids))
	for numa := range ids {
		numas = append(numas, numa)
	}
	sort.Slice(numas, func(i, j int) bool { return numas[i] < numas[j] })
	for _, numa := range numas {
		for _, id := range ids[numa] {
			if _, seen := out[id]; !seen {
				out[id] = &pluginapi.Device{}
			}
			if numa == nodeWithoutTopology {
				continue
			}
			if out[id].Topology == nil {
				out[id].Topology = &pluginapi.TopologyInfo{}
			}
			out[id].Topology.Nodes = append(out[id].Topology.Nodes, &pluginapi.NUMANode{ID: numa})
		}
	}
	return out
}
