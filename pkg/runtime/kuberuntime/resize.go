package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/pod/allocation"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// In-place resize (upstream's computePodResizeAction and doPodResizeAction). The pod given
// to SyncPod carries its allocated resources; the manager records in its actuated store
// the resources each container was created or last updated with. A running container
// whose allocated CPU or memory differs from its actuated ones is resized: killed and
// started again when its resize policy for a changed resource says RestartContainer,
// otherwise updated in place with UpdateContainerResources, memory before CPU, with the
// pod's cgroup grown before and shrunk after its containers (PodResizer).

// PodResizer resizes a pod's cgroup to the pod's resources around updateContainers, which
// resizes the containers for one resource (implemented by *cm.ContainerManager: memory,
// then CPU; a limit that grows is written before the containers, one that shrinks after;
// a memory limit below the pod's usage is refused before anything changes).
type PodResizer interface {
	ResizePod(pod *v1.Pod, updateContainers func(v1.ResourceName) error) error
}

// resourceAmounts are a container's resizable resources: bytes and milli-CPUs.
type resourceAmounts struct {
	memoryLimit, memoryRequest, cpuLimit, cpuRequest int64
}

// amountsOf reads a container's requirements r as they apply: its requests, and its
// limits or, where it has none, those of its pod (podLevel; upstream's
// containerResourcesFromRequirements). A pod-level limit that changes thus resizes the
// containers that inherit it.
func amountsOf(podLevel, r *v1.ResourceRequirements) resourceAmounts {
	limits := effectiveLimits(podLevel, r)
	return resourceAmounts{
		memoryLimit: limits.Memory().Value(), memoryRequest: r.Requests.Memory().Value(),
		cpuLimit: limits.Cpu().MilliValue(), cpuRequest: r.Requests.Cpu().MilliValue(),
	}
}

// sameAs reports whether a and b agree on one resource.
func (a resourceAmounts) sameAs(b resourceAmounts, name v1.ResourceName) bool {
	if name == v1.ResourceMemory {
		return a.memoryLimit == b.memoryLimit && a.memoryRequest == b.memoryRequest
	}
	return a.cpuLimit == b.cpuLimit && a.cpuRequest == b.cpuRequest
}

// take copies one resource's amounts from b.
func (a *resourceAmounts) take(b resourceAmounts, name v1.ResourceName) {
	if name == v1.ResourceMemory {
		a.memoryLimit, a.memoryRequest = b.memoryLimit, b.memoryRequest
		return
	}
	a.cpuLimit, a.cpuRequest = b.cpuLimit, b.cpuRequest
}

// effectiveLimits are a container's limits, with its pod's CPU and memory limits where
// it has none (upstream's GetLimits).
func effectiveLimits(podLevel, r *v1.ResourceRequirements) v1.ResourceList {
	inherited := v1.ResourceList{}
	if podLevel != nil {
		for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			own, pods := r.Limits[name], podLevel.Limits[name]
			if own.IsZero() && !pods.IsZero() {
				inherited[name] = pods.DeepCopy()
			}
		}
	}
	if len(inherited) == 0 {
		return r.Limits
	}
	limits := r.Limits.DeepCopy()
	if limits == nil {
		limits = v1.ResourceList{}
	}
	maps.Copy(limits, inherited)
	return limits
}

// actuatedRequirements are what the actuated store records for a container started or
// updated with requirements r: its requests and its effective limits, as upstream records
// them, so that either kubelet reads the other's record alike.
func actuatedRequirements(podLevel *v1.ResourceRequirements, r v1.ResourceRequirements) v1.ResourceRequirements {
	r.Limits = effectiveLimits(podLevel, &r)
	return r
}

// withResource returns base with the request and limit of one resource taken from from.
func withResource(base, from v1.ResourceRequirements, name v1.ResourceName) v1.ResourceRequirements {
	out := *base.DeepCopy()
	setEntry(&out.Requests, from.Requests, name)
	setEntry(&out.Limits, from.Limits, name)
	return out
}

func setEntry(dst *v1.ResourceList, src v1.ResourceList, name v1.ResourceName) {
	q, ok := src[name]
	switch {
	case ok && *dst == nil:
		*dst = v1.ResourceList{name: q.DeepCopy()}
	case ok:
		(*dst)[name] = q.DeepCopy()
	default:
		delete(*dst, name)
	}
}

// podLevelAmounts reads pod-level requirements as they are (no defaulting).
func podLevelAmounts(r *v1.ResourceRequirements) resourceAmounts {
	if r == nil {
		return resourceAmounts{}
	}
	return resourceAmounts{
		memoryLimit: r.Limits.Memory().Value(), memoryRequest: r.Requests.Memory().Value(),
		cpuLimit: r.Limits.Cpu().MilliValue(), cpuRequest: r.Requests.Cpu().MilliValue(),
	}
}

// containerToUpdate is a running container resized in place.
type containerToUpdate struct {
	spec    *v1.Container
	id      container.ContainerID
	desired resourceAmounts
	// current is what the runtime was last given, applied the requirements recorded as
	// actuated for it; both are shared by the container's memory and CPU updates, so that
	// the CPU update carries the memory just applied.
	current *resourceAmounts
	applied *v1.ResourceRequirements
}

// addContainerToUpdate queues an update of one resource: decreases first, then increases,
// so that capacity is freed before it is taken.
func (p *podActions) addContainerToUpdate(name v1.ResourceName, u containerToUpdate, grows bool) {
	if p.ContainersToUpdate == nil {
		p.ContainersToUpdate = map[v1.ResourceName][]containerToUpdate{}
	}
	if grows {
		p.ContainersToUpdate[name] = append(p.ContainersToUpdate[name], u)
		return
	}
	p.ContainersToUpdate[name] = append([]containerToUpdate{u}, p.ContainersToUpdate[name]...)
}

// needsResize says whether SyncPod has a resize to do.
func (p *podActions) needsResize() bool {
	return len(p.ContainersToUpdate) > 0 || p.UpdatePodResources || p.UpdatePodLevelResources
}

// computeResizeAction compares a running container's allocated resources (its spec) with
// its actuated ones. When they differ and the resize policy of a changed resource says
// RestartContainer, the container is killed and restarted (restart adds it to the start
// list) and the pod's cgroup follows; otherwise it is queued for an in-place update. It
// returns whether the container is kept running.
func (m *Manager) computeResizeAction(pod *v1.Pod, spec *v1.Container, cs *container.Status, changes *podActions, restart func()) bool {
	if cs.State != container.ContainerStateRunning {
		return true
	}
	actuated, ok := m.actuated.Container(pod.UID, spec.Name)
	if !ok {
		klog.V(4).InfoS("Missing actuated resource record", "pod", klog.KObj(pod), "container", spec.Name)
		return true
	}
	desired, current := amountsOf(pod.Spec.Resources, &spec.Resources), m.actuatedAmounts(pod.UID, &actuated)
	if desired == current {
		return true
	}
	memoryChanged := desired.memoryLimit != current.memoryLimit || desired.memoryRequest != current.memoryRequest
	cpuChanged := desired.cpuLimit != current.cpuLimit || desired.cpuRequest != current.cpuRequest
	if (memoryChanged && restartOnResize(spec, v1.ResourceMemory)) || (cpuChanged && restartOnResize(spec, v1.ResourceCPU)) {
		changes.ContainersToKill[cs.ID] = containerToKill{
			name: cs.Name, container: spec,
			message: fmt.Sprintf("Container %s resize requires restart", spec.Name),
		}
		restart()
		changes.UpdatePodResources = true
		return false
	}
	u := containerToUpdate{spec: spec, id: cs.ID, desired: desired, current: &current, applied: &actuated}
	if memoryChanged {
		changes.addContainerToUpdate(v1.ResourceMemory, u, grows(desired.memoryLimit, current.memoryLimit, desired.memoryRequest, current.memoryRequest))
	}
	if cpuChanged {
		changes.addContainerToUpdate(v1.ResourceCPU, u, grows(desired.cpuLimit, current.cpuLimit, desired.cpuRequest, current.cpuRequest))
	}
	return true
}

// grows judges a resize by its limit when that changes, else by its request.
func grows(limit, currentLimit, request, currentRequest int64) bool {
	if limit != currentLimit {
		return limit > currentLimit
	}
	return request > currentRequest
}

// restartOnResize reads the container's resize policy for a resource; NotRequired is the
// default.
func restartOnResize(c *v1.Container, name v1.ResourceName) bool {
	for _, p := range c.ResizePolicy {
		if p.ResourceName == name {
			return p.RestartPolicy == v1.RestartContainer
		}
	}
	return false
}

// startsResized reports whether a container about to start was resized since it last
// ran: it starts with its new resources, so the pod's cgroup must follow.
func (m *Manager) startsResized(pod *v1.Pod, containers []v1.Container, toStart []int) bool {
	for _, i := range toStart {
		c := &containers[i]
		actuated, ok := m.actuated.Container(pod.UID, c.Name)
		if ok && amountsOf(pod.Spec.Resources, &c.Resources) != m.actuatedAmounts(pod.UID, &actuated) {
			return true
		}
	}
	return false
}

// actuatedAmounts reads a container's actuated record with the pod-level resources last
// applied.
func (m *Manager) actuatedAmounts(uid types.UID, actuated *v1.ResourceRequirements) resourceAmounts {
	podLevel, _ := m.actuated.PodLevel(uid)
	return amountsOf(podLevel, actuated)
}

// podLevelResized reports pod-level resources that differ from those last applied.
func (m *Manager) podLevelResized(pod *v1.Pod) bool {
	actuated, found := m.actuated.PodLevel(pod.UID)
	return found && podLevelAmounts(actuated) != podLevelAmounts(pod.Spec.Resources)
}

// initializeActuated records a pod the store does not know (new, or running since before
// the store existed) as running with its allocated resources, as upstream does once its
// volumes are ready.
func (m *Manager) initializeActuated(pod *v1.Pod) {
	if m.actuated.Has(pod.UID) {
		return
	}
	if err := m.actuated.Set(pod.UID, allocation.ResourceInfoForPod(pod)); err != nil {
		klog.ErrorS(err, "Failed to initialize actuated pod resource info checkpoint", "pod", klog.KObj(pod))
	}
}

// setActuated records the resources a container is created with.
func (m *Manager) setActuated(pod *v1.Pod, c *v1.Container) {
	if err := m.actuated.SetContainer(pod.UID, c.Name, actuatedRequirements(pod.Spec.Resources, c.Resources)); err != nil {
		klog.ErrorS(err, "Failed to record the resources of a container", "pod", klog.KObj(pod), "container", c.Name)
	}
}

// resizePod actuates the pod's resize (SyncPod's step 6): it refuses a container memory
// limit below the container's usage, then resizes the containers through the pod resizer.
// An error leaves the rest for the next sync.
func (m *Manager) resizePod(ctx context.Context, pod *v1.Pod, changes *podActions) *container.SyncResult {
	result := container.NewSyncResult(container.ResizePodInPlace, podFullName(pod))
	start := time.Now()
	defer func() { metrics.ObservePodResize(start, result.Error == nil) }()
	if err := m.checkMemoryDecreases(ctx, changes.ContainersToUpdate[v1.ResourceMemory]); err != nil {
		klog.ErrorS(err, "Allocated pod resize is not currently feasible", "pod", klog.KObj(pod))
		result.Fail(container.ErrResizePodInPlace, err.Error())
		return result
	}
	update := func(name v1.ResourceName) error {
		return m.updateContainers(ctx, pod, name, changes.ContainersToUpdate[name])
	}
	var err error
	if m.opts.PodResizer != nil {
		err = m.opts.PodResizer.ResizePod(pod, update)
	} else if err = update(v1.ResourceMemory); err == nil {
		err = update(v1.ResourceCPU)
	}
	if err == nil && changes.UpdatePodLevelResources {
		err = m.actuated.SetPodLevel(pod.UID, pod.Spec.Resources)
	}
	if err != nil {
		klog.ErrorS(err, "Pod resize failed", "pod", klog.KObj(pod))
		result.Fail(container.ErrResizePodInPlace, err.Error())
	}
	return result
}

// checkMemoryDecreases refuses memory limits that would fall below a container's current
// usage (a limit added counts as a decrease), with upstream's message.
func (m *Manager) checkMemoryDecreases(ctx context.Context, updates []containerToUpdate) error {
	var errs []error
	for _, u := range updates {
		limit := u.desired.memoryLimit
		if limit == 0 || (u.current.memoryLimit != 0 && limit >= u.current.memoryLimit) {
			continue
		}
		usage, err := m.containerMemoryUsage(ctx, u.id.ID)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("missing container %q memory usage", u.spec.Name))
		case usage >= uint64(limit):
			errs = append(errs, fmt.Errorf("attempting to set container %q memory limit (%d) below current usage (%d)", u.spec.Name, limit, usage))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cannot decrease memory limits: %w", utilerrors.NewAggregate(errs))
	}
	return nil
}

// containerMemoryUsage is the container's memory usage as the runtime reports it.
func (m *Manager) containerMemoryUsage(ctx context.Context, id string) (uint64, error) {
	stats, err := m.runtime.ContainerStats(ctx, id)
	if err != nil {
		return 0, err
	}
	memory := stats.GetMemory()
	if u := memory.GetUsageBytes(); u != nil {
		return u.GetValue(), nil
	}
	if ws := memory.GetWorkingSetBytes(); ws != nil {
		return ws.GetValue(), nil
	}
	return 0, errors.New("no memory usage reported")
}

// updateContainers applies one resource's new values to the containers in order; the
// other resource keeps its current values. Each success is recorded as actuated; the
// first failure stops, and the next sync goes on from there.
func (m *Manager) updateContainers(ctx context.Context, pod *v1.Pod, name v1.ResourceName, updates []containerToUpdate) error {
	for _, u := range updates {
		linux := criconfig.LinuxContainerResources(pod, resizedContainer(u, name), m.resourceOptions())
		if err := m.runtime.UpdateContainerResources(ctx, u.id.ID, &runtimeapi.ContainerResources{Linux: linux}); err != nil {
			klog.ErrorS(err, "updateContainerResources failed", "container", u.spec.Name, "cID", u.id.ID,
				"pod", klog.KObj(pod), "resourceName", name)
			return err
		}
		u.current.take(u.desired, name)
		*u.applied = withResource(*u.applied, actuatedRequirements(pod.Spec.Resources, u.spec.Resources), name)
		if err := m.actuated.SetContainer(pod.UID, u.spec.Name, *u.applied); err != nil {
			return err
		}
	}
	return nil
}

// resizedContainer is the container as its update of one resource leaves it: its
// allocated requirements, except for the other resource while that one still awaits its
// own update, which keeps its applied requirements. Its CRI resources are then made as
// for a container started with these requirements.
func resizedContainer(u containerToUpdate, name v1.ResourceName) *v1.Container {
	other := v1.ResourceCPU
	if name == v1.ResourceCPU {
		other = v1.ResourceMemory
	}
	c := *u.spec
	if !u.current.sameAs(u.desired, other) {
		c.Resources = withResource(u.spec.Resources, *u.applied, other)
	}
	return &c
}

// resourceOptions are the options container resources are made with, at start
// (containerConfig) as on resize.
func (m *Manager) resourceOptions() criconfig.ResourceOptions {
	return criconfig.ResourceOptions{
		CPUCFSQuota: m.opts.CPUCFSQuota, CPUCFSQuotaPeriod: m.opts.CPUCFSQuotaPeriod, MachineMemory: m.opts.MachineMemory,
		Host: m.opts.Host, SingleProcessOOMKill: m.opts.SingleProcessOOMKill, MemoryQoS: m.opts.MemoryQoS,
	}
}

// IsPodResizeInProgress reports whether the allocated resources of pod differ from those
// last applied: for any running regular container or sidecar, or for the pod-level
// resources. Containers not running are sized when they start.
func (m *Manager) IsPodResizeInProgress(pod *v1.Pod, status *container.PodStatus) bool {
	differs := func(c *v1.Container) bool {
		cs := status.FindContainerStatusByName(c.Name)
		if cs == nil || cs.State != container.ContainerStateRunning {
			return false
		}
		actuated, ok := m.actuated.Container(pod.UID, c.Name)
		return ok && amountsOf(pod.Spec.Resources, &c.Resources) != m.actuatedAmounts(pod.UID, &actuated)
	}
	if status != nil {
		for i := range pod.Spec.Containers {
			if differs(&pod.Spec.Containers[i]) {
				return true
			}
		}
		for i := range pod.Spec.InitContainers {
			if isRestartableInitContainer(&pod.Spec.InitContainers[i]) && differs(&pod.Spec.InitContainers[i]) {
				return true
			}
		}
	}
	return pod.Spec.Resources != nil && m.podLevelResized(pod)
}

// ActuatedContainerResources returns the resources last applied to the container (for
// the container status when the runtime does not report them).
func (m *Manager) ActuatedContainerResources(uid types.UID, name string) (v1.ResourceRequirements, bool) {
	return m.actuated.Container(uid, name)
}
