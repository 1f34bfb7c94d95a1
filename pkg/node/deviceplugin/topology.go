package deviceplugin

import (
	"context"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/pkg/node/topologymanager"
)

// numaNodeLister is what a Store may also offer: the machine's NUMA nodes
// (*topologymanager.Manager does).
type numaNodeLister interface {
	NUMANodes() []int
}

// SetAffinity gives the manager the topology manager's chosen affinities: devices are
// then picked on the NUMA nodes of the container's affinity first. Call it before pods
// are admitted; nil (the default) means no affinity. When s also lists the machine's NUMA
// nodes (NUMANodes() []int, as *topologymanager.Manager does), NUMA nodes a plugin
// reports that the machine does not have are ignored in hints, as upstream ignores
// those unknown to cadvisor; otherwise the plugins' NUMA nodes are taken as they are.
func (m *Manager) SetAffinity(s topologymanager.Store) {
	var nodes []int
	if lister, ok := s.(numaNodeLister); ok {
		nodes = slices.Sorted(slices.Values(lister.NUMANodes()))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.affinity = s
	m.machineNUMANodes = nodes
}

// affinityFor is the NUMA nodes the topology manager chose for the container; empty
// for no preference. The store is called without the manager's mutex: it has its own.
func (m *Manager) affinityFor(podUID, container string) topologymanager.Mask {
	m.mu.Lock()
	store := m.affinity
	m.mu.Unlock()
	if store == nil {
		return 0
	}
	return store.GetAffinity(podUID, container).NUMANodeAffinity
}

// HintProvider is the manager as a topology manager hint provider: its Allocate is the
// manager's, without a context.
func (m *Manager) HintProvider() topologymanager.HintProvider { return hintProvider{m} }

type hintProvider struct{ m *Manager }

var _ topologymanager.HintProvider = hintProvider{}

func (h hintProvider) GetTopologyHints(pod *v1.Pod, c *v1.Container) map[string][]topologymanager.TopologyHint {
	return h.m.GetTopologyHints(pod, c)
}

func (h hintProvider) GetPodTopologyHints(pod *v1.Pod) map[string][]topologymanager.TopologyHint {
	return h.m.GetPodTopologyHints(pod)
}

func (h hintProvider) Allocate(pod *v1.Pod, c *v1.Container) error {
	return h.m.Allocate(context.Background(), pod, c)
}

// GetTopologyHints gives, for each device plugin resource of the container's limits,
// the NUMA placements its devices could have (upstream's device manager
// GetTopologyHints): nil for a resource whose devices have no NUMA node (no
// preference), the placements of the devices the container holds already (after a
// kubelet restart), else those the available devices and the devices the pod's init
// containers left can fill; an empty list when none can.
func (m *Manager) GetTopologyHints(pod *v1.Pod, container *v1.Container) map[string][]topologymanager.TopologyHint {
	// allocMu keeps the reusable devices still while they are read.
	m.allocMu.Lock()
	defer m.allocMu.Unlock()
	logger := klog.LoggerWithValues(m.currentLogger(), "pod", klog.KObj(pod), "containerName", container.Name)
	// Devices of pods gone are free for the hints, as for the allocation.
	m.updateAllocatedDevices(logger)
	requests := m.deviceRequests(container.Resources.Limits)
	podUID := string(pod.UID)
	m.mu.Lock()
	defer m.mu.Unlock()
	hints := make(map[string][]topologymanager.TopologyHint, len(requests))
	for resource, requested := range requests {
		held := m.podDevices.containerDevices(podUID, container.Name, resource)
		reusable := m.devicesToReuse[podUID][resource]
		hints[resource] = m.resourceHints(logger, resource, requested, held, reusable)
		logger.V(4).Info("Device topology hints", "resourceName", resource, "request", requested, "hints", hints[resource])
	}
	return hints
}

// GetPodTopologyHints is GetTopologyHints for the whole pod (the pod scope): each
// resource's request is the pod's effective limit (the largest init container's or
// the sum of the others'), the devices held those of all its containers, and no device
// counts as reusable.
func (m *Manager) GetPodTopologyHints(pod *v1.Pod) map[string][]topologymanager.TopologyHint {
	m.allocMu.Lock()
	defer m.allocMu.Unlock()
	logger := klog.LoggerWithValues(m.currentLogger(), "pod", klog.KObj(pod))
	m.updateAllocatedDevices(logger)
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{ExcludeOverhead: true})
	requests := m.deviceRequests(limits)
	podUID := string(pod.UID)
	m.mu.Lock()
	defer m.mu.Unlock()
	hints := make(map[string][]topologymanager.TopologyHint, len(requests))
	for resource, requested := range requests {
		held := m.podDevices.podResourceDevices(podUID, resource)
		hints[resource] = m.resourceHints(logger, resource, requested, held, nil)
		logger.V(4).Info("Device topology hints", "resourceName", resource, "request", requested, "hints", hints[resource])
	}
	return hints
}

// deviceRequests keeps the device plugin resources of limits, as device counts.
func (m *Manager) deviceRequests(limits v1.ResourceList) map[string]int {
	out := map[string]int{}
	for name, q := range limits {
		if m.isDevicePluginResource(string(name)) {
			out[string(name)] = int(q.Value())
		}
	}
	return out
}

// resourceHints are the hints for requested devices of resource, for a container (or
// pod) holding held already and able to reuse reusable. It needs the mutex.
func (m *Manager) resourceHints(logger klog.Logger, resource string, requested int, held, reusable sets.Set[string]) []topologymanager.TopologyHint {
	if !m.hasTopology(resource) {
		logger.Info("Resource does not have a topology preference", "resourceName", resource, "request", requested)
		return nil
	}
	if held.Len() > 0 {
		// The devices cannot change: the hints are where they are.
		if held.Len() != requested {
			logger.Info("Resource already allocated to pod with different number than request", "resourceName", resource, "request", requested, "allocated", held.Len())
			return []topologymanager.TopologyHint{}
		}
		logger.Info("Regenerating TopologyHints for resource already allocated to pod", "resourceName", resource)
		return m.deviceTopologyHints(logger, resource, held, nil, requested)
	}
	available := m.availableDevices(resource)
	if n := available.Union(reusable).Len(); n < requested {
		logger.Info("Unable to generate topology hints: requested number of devices unavailable", "resourceName", resource, "request", requested, "available", n)
		return []topologymanager.TopologyHint{}
	}
	return m.deviceTopologyHints(logger, resource, available, reusable, requested)
}

// hasTopology: a device of the resource reports a NUMA node, so its plugin cares about
// alignment.
func (m *Manager) hasTopology(resource string) bool {
	for _, dev := range m.allDevices[resource] {
		if len(dev.GetTopology().GetNodes()) > 0 {
			return true
		}
	}
	return false
}

// availableDevices are the healthy devices no container holds.
func (m *Manager) availableDevices(resource string) sets.Set[string] {
	return m.healthyDevices[resource].Difference(m.allocatedDevices[resource])
}

// deviceTopologyHints is upstream's generateDeviceTopologyHints: a hint for every set
// of NUMA nodes (among those with devices of the resource) on which the reusable
// devices lie and enough reusable and available devices are to hold the request.
// Preferred are the hints with as few NUMA nodes as the request needs on an idle
// machine: all devices count for that minimum, not only the available ones, so that a
// placement forced across NUMA nodes by other pods is not preferred. Devices without a
// NUMA node count on no NUMA node.
func (m *Manager) deviceTopologyHints(logger klog.Logger, resource string, available, reusable sets.Set[string], request int) []topologymanager.TopologyHint {
	devices := m.allDevices[resource]
	nodes := m.hintNUMANodes(logger, resource)
	minAffinitySize := len(nodes)
	hints := []topologymanager.TopologyHint{}
	topologymanager.IterateMasks(nodes, func(mask topologymanager.Mask) {
		if devicesInMask(devices, mask) >= request && mask.Count() < minAffinitySize {
			minAffinitySize = mask.Count()
		}
		reused, ok := reusableInMask(devices, reusable, mask)
		if !ok || reused+availableInMask(devices, available, mask) < request {
			return
		}
		hints = append(hints, topologymanager.TopologyHint{NUMANodeAffinity: mask})
	})
	for i := range hints {
		hints[i].Preferred = hints[i].NUMANodeAffinity.Count() == minAffinitySize
	}
	return hints
}

// hintNUMANodes are the NUMA nodes hints are made of: those holding devices of the
// resource, as upstream narrows them (a machine's NUMA nodes without devices change
// neither the hints' fit nor their preference, and each would double the masks tried).
// Nodes the machine does not have, when it is known, are dropped; the machine's nodes
// are used when no device node is left. IDs a Mask cannot hold are dropped too.
func (m *Manager) hintNUMANodes(logger klog.Logger, resource string) []int {
	withDevices := sets.New[int]()
	for _, dev := range m.allDevices[resource] {
		withDevices.Insert(numaIDs(dev)...)
	}
	if m.machineNUMANodes != nil {
		known := sets.New(m.machineNUMANodes...)
		if unknown := withDevices.Difference(known); unknown.Len() > 0 {
			logger.Info("Ignoring NUMA node IDs reported by device plugin that are unknown to the machine",
				"resource", resource, "unknownNodes", sets.List(unknown), "knownNodes", m.machineNUMANodes)
			withDevices = withDevices.Intersection(known)
		}
		if withDevices.Len() == 0 {
			withDevices = known
		}
	}
	return slices.DeleteFunc(sets.List(withDevices), func(id int) bool { return id < 0 || id >= 64 })
}

// devicesInMask counts the devices with a NUMA node in mask.
func devicesInMask(devices DeviceInstances, mask topologymanager.Mask) int {
	n := 0
	for _, dev := range devices {
		if onAnyNode(dev, mask) {
			n++
		}
	}
	return n
}

// availableInMask counts the available devices with a NUMA node in mask.
func availableInMask(devices DeviceInstances, available sets.Set[string], mask topologymanager.Mask) int {
	n := 0
	for id := range available {
		if onAnyNode(devices[id], mask) {
			n++
		}
	}
	return n
}

// reusableInMask counts the reusable devices in mask; false when one lies outside it:
// reusable devices are allocated first, so a placement must include them. A device
// without topology information neither counts nor excludes. As upstream, a device
// whose topology lists no NUMA node excludes every mask.
func reusableInMask(devices DeviceInstances, reusable sets.Set[string], mask topologymanager.Mask) (int, bool) {
	n := 0
	for id := range reusable {
		dev := devices[id]
		if dev.GetTopology() == nil {
			// Also a device its plugin no longer lists (upstream would crash on it).
			continue
		}
		if !onAnyNode(dev, mask) {
			return 0, false
		}
		n++
	}
	return n, true
}

func onAnyNode(dev *pluginapi.Device, mask topologymanager.Mask) bool {
	for _, id := range numaIDs(dev) {
		if mask.IsSet(id) {
			return true
		}
	}
	return false
}

func numaIDs(dev *pluginapi.Device) []int {
	nodes := dev.GetTopology().GetNodes()
	ids := make([]int, 0, len(nodes))
	for _, node := range nodes {
		ids = append(ids, int(node.GetID()))
	}
	return ids
}
