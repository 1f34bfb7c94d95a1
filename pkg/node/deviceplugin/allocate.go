package deviceplugin

import (
	"context"
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/node/deviceplugin/checkpoint"
)

// UnexpectedAdmissionError is the reason of the admission rejection of a pod whose
// devices could not be allocated (upstream's admission.ErrorReasonUnexpected).
const UnexpectedAdmissionError = "UnexpectedAdmissionError"

// AdmissionMessage is the message of that rejection for Allocate's error.
func AdmissionMessage(err error) string {
	return fmt.Sprintf("Allocate failed due to %v, which is unexpected", err)
}

// Allocate allocates, at admission, the devices of every extended resource of the
// container that a device plugin serves (or served: allocations restored from the
// checkpoint count), asking the plugins to prepare them. A container that has devices
// keeps them. The caller must go through the pod's init containers before its app
// containers, as upstream's admission does: devices of a finished (non-restartable)
// init container are reused by the containers after it.
//
// Admission turns an error into a rejection with reason UnexpectedAdmissionError and
// AdmissionMessage(err) (upstream's admission.GetPodAdmitResult), stopping at the
// first container that fails.
func (m *Manager) Allocate(ctx context.Context, pod *v1.Pod, container *v1.Container) error {
	m.allocMu.Lock()
	defer m.allocMu.Unlock()
	podUID := string(pod.UID)
	reusable := m.reusableDevices(podUID)
	if err := m.allocateContainerResources(ctx, pod, container, reusable); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if init := initContainer(pod, container.Name); init != nil && !isRestartableInitContainer(init) {
		// A regular init container has exited before the next container starts.
		m.podDevices.addContainerDevices(podUID, container.Name, reusable)
	} else {
		// App containers and sidecars (restartable init containers) run on: what they
		// hold is no longer reusable.
		m.podDevices.removeContainerDevices(podUID, container.Name, reusable)
	}
	return nil
}

// reusableDevices returns the devices the pod's init containers left, forgetting those
// of other pods: admission handles one pod at a time.
func (m *Manager) reusableDevices(podUID string) map[string]sets.Set[string] {
	reusable, ok := m.devicesToReuse[podUID]
	if !ok {
		reusable = map[string]sets.Set[string]{}
	}
	m.devicesToReuse = map[string]map[string]sets.Set[string]{podUID: reusable}
	return reusable
}

func initContainer(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}

func isRestartableInitContainer(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// allocateContainerResources allocates each device resource of the container's limits
// (extended resources cannot be overcommitted: requests equal limits) and checkpoints
// when anything was allocated. A failure may leave earlier resources of the container
// allocated; freeing the devices of inactive pods cleans that up.
func (m *Manager) allocateContainerResources(ctx context.Context, pod *v1.Pod, container *v1.Container, reusable map[string]sets.Set[string]) error {
	logger := klog.FromContext(ctx)
	freed, allocated := false, false
	for _, resource := range sortedResourceNames(container.Resources.Limits) {
		limit := container.Resources.Limits[v1.ResourceName(resource)]
		needed := int(limit.Value())
		logger.V(3).Info("Looking for needed resources", "resourceName", resource, "pod", klog.KObj(pod), "containerName", container.Name, "needed", needed)
		if isDRAExtendedResource(pod, container.Name, resource) {
			logger.V(3).Info("Skipping allocation for DRA-backed extended resource", "resourceName", resource, "pod", klog.KObj(pod), "containerName", container.Name)
			continue
		}
		if !m.isDevicePluginResource(resource) {
			continue
		}
		if !freed {
			// Free the devices of pods gone since, before picking.
			m.updateAllocatedDevices(logger)
			freed = true
		}
		devs, err := m.devicesToAllocate(ctx, string(pod.UID), container.Name, resource, needed, reusable[resource])
		if err != nil {
			return err
		}
		if devs.Len() == 0 {
			continue
		}
		allocated = true
		if err := m.allocateFromPlugin(ctx, pod, container, resource, devs); err != nil {
			return err
		}
	}
	if allocated {
		return m.writeCheckpoint(logger)
	}
	return nil
}

func sortedResourceNames(list v1.ResourceList) []string {
	names := make([]string, 0, len(list))
	for name := range list {
		names = append(names, string(name))
	}
	sort.Strings(names)
	return names
}

// isDRAExtendedResource: the scheduler mapped the container's extended resource to a
// DRA claim (DRAExtendedResource, GA in v1.37), so no device plugin serves it.
func isDRAExtendedResource(pod *v1.Pod, container, resource string) bool {
	claims := pod.Status.ExtendedResourceClaimStatus
	if claims == nil {
		return false
	}
	for _, mapping := range claims.RequestMappings {
		if mapping.ContainerName == container && mapping.ResourceName == resource {
			return true
		}
	}
	return false
}

// isDevicePluginResource: a plugin registered the resource, or devices of it are
// allocated.
func (m *Manager) isDevicePluginResource(resource string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, registered := m.healthyDevices[resource]
	_, allocated := m.allocatedDevices[resource]
	return registered || allocated
}

// allocateFromPlugin calls the plugin's Allocate for the picked devices and records its
// answer. On failure the picked devices are released.
func (m *Manager) allocateFromPlugin(ctx context.Context, pod *v1.Pod, container *v1.Container, resource string, devs sets.Set[string]) error {
	start := time.Now()
	m.mu.Lock()
	e, ok := m.endpoints[resource]
	m.mu.Unlock()
	if !ok {
		m.resetAllocatedDevices()
		return fmt.Errorf("unknown Device Plugin %s", resource)
	}
	ids := sets.List(devs)
	klog.FromContext(ctx).V(4).Info("Making allocation request for device plugin", "devices", ids, "resourceName", resource, "pod", klog.KObj(pod), "containerName", container.Name)
	resp, err := e.allocate(ctx, ids)
	AllocationDuration.WithLabelValues(resource).Observe(time.Since(start).Seconds())
	if err != nil {
		m.resetAllocatedDevices()
		return err
	}
	if len(resp.ContainerResponses) == 0 {
		return fmt.Errorf("no containers return in allocation response %v", resp)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.podDevices.insert(string(pod.UID), container.Name, resource, m.devicesByNUMA(resource, devs), resp.ContainerResponses[0])
	return nil
}

// resetAllocatedDevices drops devices picked but not given: the allocated devices are
// those of the recorded allocations again.
func (m *Manager) resetAllocatedDevices() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.allocatedDevices = m.podDevices.devices()
}

// devicesByNUMA groups device IDs by the NUMA nodes their plugin reported, for the
// checkpoint and the pod-resources API.
func (m *Manager) devicesByNUMA(resource string, devs sets.Set[string]) checkpoint.DevicesPerNUMA {
	out := checkpoint.DevicesPerNUMA{}
	for _, id := range sets.List(devs) {
		dev := m.allDevices[resource][id]
		if dev == nil || dev.Topology == nil || len(dev.Topology.Nodes) == 0 {
			out[nodeWithoutTopology] = append(out[nodeWithoutTopology], id)
			continue
		}
		for _, node := range dev.Topology.Nodes {
			out[node.ID] = append(out[node.ID], id)
		}
	}
	return out
}

// UpdateAllocatedDevices frees the devices of pods that are no longer active. Nothing is
// freed until all pod sources are ready: a pod not seen yet may still be running.
func (m *Manager) UpdateAllocatedDevices() {
	m.allocMu.Lock()
	defer m.allocMu.Unlock()
	m.updateAllocatedDevices(m.currentLogger())
}

func (m *Manager) updateAllocatedDevices(logger klog.Logger) {
	activePods, sourcesReady := m.podSources()
	active := activePods()
	if !sourcesReady() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	gone := m.podDevices.pods()
	for _, pod := range active {
		gone.Delete(string(pod.UID))
	}
	if gone.Len() == 0 {
		return
	}
	logger.V(3).Info("Pods to be removed", "podUIDs", sets.List(gone))
	m.podDevices.delete(sets.List(gone))
	m.allocatedDevices = m.podDevices.devices()
}

// podSources returns the kubelet's functions, to be called without the manager's mutex.
func (m *Manager) podSources() (ActivePodsFunc, func() bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.activePods, m.sourcesReady
}

func (m *Manager) isPodActive(pod *v1.Pod) bool {
	activePods, _ := m.podSources()
	for _, active := range activePods() {
		if active.UID == pod.UID {
			return true
		}
	}
	return false
}

// UpdatePluginResources is upstream's sanitizeNodeAllocatable for the admission of pod:
// when the pod already holds devices (the kubelet restarted), allocatable is raised for
// every device resource to at least the number of devices allocated, so that pods
// already running pass the resource fit check while their plugins register again. It
// returns allocatable itself when nothing changes, a changed copy otherwise.
func (m *Manager) UpdatePluginResources(pod *v1.Pod, allocatable v1.ResourceList) v1.ResourceList {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.podDevices[string(pod.UID)]; !ok {
		return allocatable
	}
	out, copied := allocatable, false
	for name, devices := range m.allocatedDevices {
		q, ok := allocatable[v1.ResourceName(name)]
		if ok && q.Value() >= int64(devices.Len()) {
			continue
		}
		if !copied {
			out, copied = allocatable.DeepCopy(), true
			if out == nil {
				out = v1.ResourceList{}
			}
		}
		out[v1.ResourceName(name)] = *resource.NewQuantity(int64(devices.Len()), resource.DecimalSI)
	}
	return out
}
