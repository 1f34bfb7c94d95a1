package deviceplugin

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
)

// devicePicker chooses the devices of one resource for one container (upstream's
// devicesToAllocate without topology alignment: nodelet has no topology manager, so
// every available device is "without affinity"). Its methods need the manager's mutex.
type devicePicker struct {
	m         *Manager
	resource  string
	required  int
	needed    int
	allocated sets.Set[string]
	available sets.Set[string]
	endpoint  *endpoint
}

// devicesToAllocate returns the devices to ask the plugin for; none when the container
// has its devices already (it restarted, or it was running before the kubelet
// restarted).
func (m *Manager) devicesToAllocate(ctx context.Context, podUID, container, resource string, required int, reusable sets.Set[string]) (sets.Set[string], error) {
	logger := klog.FromContext(ctx)
	_, sourcesReady := m.podSources()
	ready := sourcesReady()
	m.mu.Lock()
	p, err := m.startPick(logger, podUID, container, resource, required, reusable, ready)
	m.mu.Unlock()
	if err != nil || p == nil {
		return nil, err
	}
	if p.needed == 0 {
		return p.allocated, nil
	}
	// The plugin is asked without the mutex: it may take its time.
	preferred, err := p.preferredDevices(ctx, logger, podUID, container)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p.take(preferred.Intersection(p.available)) || p.take(p.available) {
		return p.allocated, nil
	}
	return nil, fmt.Errorf("unexpectedly allocated less resources than required. Requested: %d, Got: %d", p.required, p.required-p.needed)
}

// startPick checks the resource can be allocated at all and takes the reusable devices
// first; the picker it returns still needs p.needed devices from p.available. It returns
// no picker when nothing is to be allocated.
func (m *Manager) startPick(logger klog.Logger, podUID, container, resource string, required int, reusable sets.Set[string], sourcesReady bool) (*devicePicker, error) {
	needed, err := m.neededDevices(logger, podUID, container, resource, required, sourcesReady)
	if err != nil || needed == 0 {
		return nil, err
	}
	p := &devicePicker{m: m, resource: resource, required: required, needed: needed, allocated: sets.New[string]()}
	if p.take(reusable) {
		return p, nil
	}
	p.available = m.healthyDevices[resource].Difference(m.allocatedDevices[resource])
	if p.available.Len() < p.needed {
		return nil, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", resource, p.needed, p.available.Len())
	}
	e, ok := m.endpoints[resource]
	if !ok {
		return nil, fmt.Errorf("endpoint not found in cache for a registered resource: %s", resource)
	}
	p.endpoint = e
	return p, nil
}

// neededDevices is how many devices the container still needs of the resource. The
// checks of the registration and the devices' health come before that count: at node
// reboot a container may be admitted before its plugin registered (upstream's #109595).
func (m *Manager) neededDevices(logger klog.Logger, podUID, container, resource string, required int, sourcesReady bool) (int, error) {
	needed := required
	devices := m.podDevices.containerDevices(podUID, container, resource)
	if devices != nil {
		logger.V(3).Info("Found pre-allocated devices for resource on pod", "resourceName", resource, "containerName", container, "podUID", podUID, "devices", sets.List(devices))
		needed -= devices.Len()
		// A pod's resources cannot change once admitted.
		if needed != 0 {
			return 0, fmt.Errorf("pod %q container %q changed request for resource %q from %d to %d", podUID, container, resource, devices.Len(), required)
		}
	}
	// While sources are not ready the kubelet is starting: a container the runtime
	// reported running at start has its devices already (a kubelet restart, not a node
	// reboot).
	if !sourcesReady && m.runningAtStart.Has(ContainerKey{PodUID: podUID, ContainerName: container}) {
		logger.V(3).Info("Container detected running, nothing to do", "deviceNumber", needed, "resourceName", resource, "podUID", podUID, "containerName", container)
		return 0, nil
	}
	healthy, registered := m.healthyDevices[resource]
	if !registered {
		return 0, fmt.Errorf("cannot allocate unregistered device %s", resource)
	}
	if healthy.Len() == 0 {
		return 0, fmt.Errorf("no healthy devices present; cannot allocate unhealthy devices %s", resource)
	}
	if !healthy.IsSuperset(devices) {
		return 0, fmt.Errorf("previously allocated devices are no longer healthy; cannot allocate unhealthy devices %s", resource)
	}
	return needed, nil
}

// take allocates devices not taken yet from devices, in ID order, until none is needed;
// it reports whether that point was reached.
func (p *devicePicker) take(devices sets.Set[string]) bool {
	inUse := p.m.allocatedDevices[p.resource]
	if inUse == nil {
		// Freeing devices rebuilds the map without empty resources.
		inUse = sets.New[string]()
		p.m.allocatedDevices[p.resource] = inUse
	}
	for _, id := range sets.List(devices.Difference(p.allocated)) {
		inUse.Insert(id)
		p.allocated.Insert(id)
		p.needed--
		if p.needed == 0 {
			return true
		}
	}
	return false
}

// preferredDevices asks the plugin to choose, when its options say it can, among the
// available devices and those taken already (which it must include).
func (p *devicePicker) preferredDevices(ctx context.Context, logger klog.Logger, podUID, container string) (sets.Set[string], error) {
	opts := p.endpoint.opts
	if opts == nil || !opts.GetPreferredAllocationAvailable {
		logger.V(5).Info("Plugin options indicate to skip GetPreferredAllocation for resource", "resourceName", p.resource, "podUID", podUID, "containerName", container)
		return nil, nil
	}
	logger.V(4).Info("Issuing a GetPreferredAllocation call for container", "resourceName", p.resource, "containerName", container, "podUID", podUID)
	resp, err := p.endpoint.getPreferredAllocation(ctx, sets.List(p.available.Union(p.allocated)), sets.List(p.allocated), p.required)
	if err != nil {
		return nil, fmt.Errorf("device plugin GetPreferredAllocation rpc failed with err: %v", err)
	}
	if resp != nil && len(resp.ContainerResponses) > 0 {
		return sets.New(resp.ContainerResponses[0].DeviceIDs...), nil
	}
	return sets.New[string](), nil
}
