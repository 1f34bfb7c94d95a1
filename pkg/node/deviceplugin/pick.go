package deviceplugin

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/node/topologymanager"
)

// devicePicker chooses the devices of one resource for one container (upstream's
// devicesToAllocate). Its methods that touch the manager's state need its mutex.
type devicePicker struct {
	m         *Manager
	resource  string
	required  int
	needed    int
	allocated sets.Set[string]
	available sets.Set[string]
	groups    affinityGroups
	endpoint  *endpoint
}

// devicesToAllocate returns the devices to ask the plugin for; none when the container
// has its devices already (it restarted, or it was running before the kubelet
// restarted). The devices picked count as allocated until the allocation is recorded,
// or until it fails: then they are released.
func (m *Manager) devicesToAllocate(ctx context.Context, podUID, container, resource string, required int, reusable sets.Set[string]) (sets.Set[string], error) {
	devs, err := m.pickDevices(ctx, podUID, container, resource, required, reusable)
	if err != nil {
		m.resetAllocatedDevices()
	}
	return devs, err
}

func (m *Manager) pickDevices(ctx context.Context, podUID, container, resource string, required int, reusable sets.Set[string]) (sets.Set[string], error) {
	logger := klog.FromContext(ctx)
	_, sourcesReady := m.podSources()
	ready := sourcesReady()
	affinity := m.affinityFor(podUID, container)
	m.mu.Lock()
	p, err := m.startPick(logger, podUID, container, resource, required, reusable, ready)
	if p != nil && p.needed > 0 {
		p.groups = m.filterByAffinity(resource, p.available, affinity)
	}
	m.mu.Unlock()
	switch {
	case err != nil || p == nil:
		return nil, err
	case p.needed == 0:
		return p.allocated, nil
	case p.needed < p.groups.aligned.Len():
		return p.pickAligned(ctx, logger, podUID, container)
	}
	return p.pickBeyondAligned(ctx, logger, podUID, container)
}

// pickAligned picks among the aligned devices, which are more than needed: the plugin
// chooses which of them.
func (p *devicePicker) pickAligned(ctx context.Context, logger klog.Logger, podUID, container string) (sets.Set[string], error) {
	aligned := p.groups.aligned
	// The plugin is asked without the mutex: it may take its time.
	preferred, err := p.preferredDevices(ctx, logger, podUID, container, aligned)
	if err != nil {
		return nil, err
	}
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	if p.take(preferred.Intersection(aligned)) || p.take(aligned) {
		return p.allocated, nil
	}
	return nil, p.shortfall()
}

// pickBeyondAligned takes all the aligned devices, which are not enough (or none, when
// there is no affinity), then lets the plugin choose the rest among the available
// devices, then falls back to the unaligned devices and last to those without NUMA
// node.
func (p *devicePicker) pickBeyondAligned(ctx context.Context, logger klog.Logger, podUID, container string) (sets.Set[string], error) {
	groups := p.groups
	p.m.mu.Lock()
	done := p.take(groups.aligned)
	p.m.mu.Unlock()
	if done {
		return p.allocated, nil
	}
	preferred, err := p.preferredDevices(ctx, logger, podUID, container, p.available)
	if err != nil {
		return nil, err
	}
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	if p.take(preferred.Intersection(p.available)) || p.take(groups.unaligned) || p.take(groups.withoutTopology) {
		return p.allocated, nil
	}
	return nil, p.shortfall()
}

func (p *devicePicker) shortfall() error {
	return fmt.Errorf("unexpectedly allocated less resources than required. Requested: %d, Got: %d", p.required, p.required-p.needed)
}

// affinityGroups split the available devices by the container's NUMA affinity.
type affinityGroups struct {
	// aligned have a NUMA node in the affinity, unaligned only NUMA nodes outside it,
	// withoutTopology none at all.
	aligned, unaligned, withoutTopology sets.Set[string]
}

// filterByAffinity splits available by the affinity (upstream's filterByAffinity). With
// no affinity, or devices of the resource without topology, every device is "without
// topology": nothing to align. A device on several NUMA nodes is aligned when any of
// them is in the affinity. It needs the mutex.
func (m *Manager) filterByAffinity(resource string, available sets.Set[string], affinity topologymanager.Mask) affinityGroups {
	g := affinityGroups{aligned: sets.New[string](), unaligned: sets.New[string](), withoutTopology: sets.New[string]()}
	if affinity.IsEmpty() || !m.hasTopology(resource) {
		g.withoutTopology = available.Clone()
		return g
	}
	for id := range available {
		dev := m.allDevices[resource][id]
		switch {
		case len(dev.GetTopology().GetNodes()) == 0:
			g.withoutTopology.Insert(id)
		case onAnyNode(dev, affinity):
			g.aligned.Insert(id)
		default:
			g.unaligned.Insert(id)
		}
	}
	return g
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
	p.available = m.availableDevices(resource)
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

// preferredDevices asks the plugin to choose, when its options say it can, among
// candidates and the devices taken already (which it must include).
func (p *devicePicker) preferredDevices(ctx context.Context, logger klog.Logger, podUID, container string, candidates sets.Set[string]) (sets.Set[string], error) {
	opts := p.endpoint.opts
	if opts == nil || !opts.GetPreferredAllocationAvailable {
		logger.V(5).Info("Plugin options indicate to skip GetPreferredAllocation for resource", "resourceName", p.resource, "podUID", podUID, "containerName", container)
		return nil, nil
	}
	logger.V(4).Info("Issuing a GetPreferredAllocation call for container", "resourceName", p.resource, "containerName", container, "podUID", podUID)
	resp, err := p.endpoint.getPreferredAllocation(ctx, sets.List(candidates.Union(p.allocated)), sets.List(p.allocated), p.required)
	if err != nil {
		return nil, fmt.Errorf("device plugin GetPreferredAllocation rpc failed with err: %v", err)
	}
	if resp != nil && len(resp.ContainerResponses) > 0 {
		return sets.New(resp.ContainerResponses[0].DeviceIDs...), nil
	}
	return sets.New[string](), nil
}
