// Package allocation keeps the resources the kubelet has admitted for each pod
// (upstream's pkg/kubelet/allocation): a pod is admitted with the resources of its spec,
// and an in-place resize (a changed spec) takes effect only once it fits the node next to
// the other pods' allocations. Until then the pod keeps running with its allocated
// resources and shows PodResizePending: Deferred while other pods hold the capacity,
// Infeasible when the node can never do it. Pending resizes are tried again when pods
// change and periodically. The pod workers always run the allocated pod
// (UpdatePodFromAllocation), never the desired one.
package allocation

import (
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/qos"
)

// Triggers of a retry of the pending resizes, as upstream names them.
const (
	TriggerPodResized    = "pod_resized"
	TriggerPodUpdated    = "pod_updated"
	TriggerPodsAdded     = "pods_added"
	TriggerPodsRemoved   = "pods_removed"
	TriggerPodTerminated = "pod_terminated"
	triggerPeriodic      = "periodic_retry"
)

// Retry periods of the pending resizes: the first retry waits for the pods to settle
// after a start, later ones run this often (upstream's ticker).
const (
	initialRetryDelay = 30 * time.Second
	retryDelay        = 3 * time.Minute
)

// podLevelResizeDisabled is the message of a pod-level resize on a node whose
// InPlacePodLevelResourcesVerticalScaling gate is off.
const podLevelResizeDisabled = "InPlacePodLevelResourcesVerticalScaling is disabled"

// ResizeConditions hold the PodResizePending and PodResizeInProgress conditions of the
// pods (status.ResizeConditions).
type ResizeConditions interface {
	// Pending returns the pod's PodResizePending condition, if any.
	Pending(uid types.UID) *v1.PodCondition
	// SetPending sets PodResizePending: reason Infeasible stays, any other becomes
	// Deferred. It reports whether the reason or generation changed.
	SetPending(uid types.UID, reason, message string, generation int64) bool
	// ClearPending removes PodResizePending; resolution says how the resize ended
	// (metrics.ResizeAccepted, ResizeReverted, ResizeTerminated).
	ClearPending(uid types.UID, resolution string)
	// SetInProgress sets PodResizeInProgress, keeping the generation and, unless new
	// ones are given, the reason and message of an existing condition.
	SetInProgress(uid types.UID, reason, message string, generation int64) (int64, bool)
	ClearInProgress(uid types.UID) (int64, bool)
}

// Options are the allocation manager's collaborators, all from the kubelet.
type Options struct {
	// Store holds the allocations; nil keeps them in memory only.
	Store *Store
	// Admit runs the admit handlers for pod against the other pods with their allocated
	// resources; resize says it is a resize of an admitted pod rather than a new pod.
	Admit func(pod *v1.Pod, others []*v1.Pod, resize bool) (ok bool, reason, message string)
	// Conditions receive the resize conditions.
	Conditions ResizeConditions
	// Recorder receives the ResizeStarted, ResizeDeferred and ResizeInfeasible events.
	Recorder record.EventRecorder
	// ActivePods are the pods that hold resources (admitted and not terminated).
	ActivePods func() []*v1.Pod
	// PodByUID returns the pod as its source last delivered it.
	PodByUID func(types.UID) (*v1.Pod, bool)
	// SourcesReady says every pod source has delivered its pods: before that no resize
	// is decided, since pods that will free capacity may not be known yet.
	SourcesReady func() bool
	// TriggerSync makes the pod's worker sync it (with its allocated resources).
	TriggerSync func(*v1.Pod)
	// PodLevelResize is the InPlacePodLevelResourcesVerticalScaling gate: when off, a
	// change of spec.resources is Infeasible.
	PodLevelResize bool
	// StaticCPUManager and StaticMemoryManager: the CPU manager's policy is static, the
	// memory manager's Static. A Guaranteed pod's CPU (memory) cannot then be resized
	// in place: its CPUs (NUMA memory) are pinned (upstream's gates for that are off).
	StaticCPUManager, StaticMemoryManager bool
	// Now is the clock of the periodic retries; nil is time.Now.
	Now func() time.Time
}

// Manager is the allocation manager. Its methods are meant for the kubelet's sync loop;
// the store and UpdatePodFromAllocation are safe to use from any goroutine.
type Manager struct {
	opts  Options
	store *Store

	mu        sync.Mutex // serializes admissions and resize decisions
	pending   []types.UID
	nextRetry time.Time
}

// NewManager returns a manager; it restores nothing itself (the store has done that).
func NewManager(opts Options) *Manager {
	if opts.Store == nil {
		opts.Store = NewMemoryStore()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Manager{opts: opts, store: opts.Store, nextRetry: opts.Now().Add(initialRetryDelay)}
}

// ResourceInfoForPod is what a pod's allocation records: the resources of its init and
// regular containers (all are resizable) and its pod-level resources.
func ResourceInfoForPod(pod *v1.Pod) PodResourceInfo {
	info := PodResourceInfo{ContainerResources: map[string]v1.ResourceRequirements{}, PodLevelResources: pod.Spec.Resources.DeepCopy()}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			info.ContainerResources[list[i].Name] = *list[i].Resources.DeepCopy()
		}
	}
	return info
}

// UpdatePodFromAllocation returns the pod with its allocated resources in place of the
// spec's, and whether they differ (the pod is copied only then). A pod without an
// allocation is returned as is.
func (m *Manager) UpdatePodFromAllocation(pod *v1.Pod) (*v1.Pod, bool) {
	if pod == nil {
		return nil, false
	}
	out, differs := pod, false
	m.store.read(pod.UID, func(info PodResourceInfo) { out, differs = applyAllocation(pod, info) })
	return out, differs
}

func applyAllocation(pod *v1.Pod, info PodResourceInfo) (*v1.Pod, bool) {
	out := pod
	copied := false
	copyOnce := func() {
		if !copied {
			out, copied = pod.DeepCopy(), true
		}
	}
	if !apiequality.Semantic.DeepEqual(pod.Spec.Resources, info.PodLevelResources) {
		copyOnce()
		out.Spec.Resources = info.PodLevelResources.DeepCopy()
	}
	// allocated returns the container's allocation when it differs from its spec.
	allocated := func(c *v1.Container) (v1.ResourceRequirements, bool) {
		alloc, ok := info.ContainerResources[c.Name]
		return alloc, ok && !apiequality.Semantic.DeepEqual(c.Resources, alloc)
	}
	for i := range pod.Spec.InitContainers {
		if alloc, ok := allocated(&pod.Spec.InitContainers[i]); ok {
			copyOnce()
			out.Spec.InitContainers[i].Resources = *alloc.DeepCopy()
		}
	}
	for i := range pod.Spec.Containers {
		if alloc, ok := allocated(&pod.Spec.Containers[i]); ok {
			copyOnce()
			out.Spec.Containers[i].Resources = *alloc.DeepCopy()
		}
	}
	return out, copied
}

// HasAllocation reports whether the pod has been admitted with resources.
func (m *Manager) HasAllocation(uid types.UID) bool { return m.store.Has(uid) }

// AddPod admits a new pod against the active pods (with their allocated resources) and
// records its allocation when it fits. A pod allocated before a restart is admitted
// with its allocated resources: a resize pending then is decided afterwards.
func (m *Manager) AddPod(active []*v1.Pod, pod *v1.Pod) (ok bool, reason, message string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pod, _ = m.UpdatePodFromAllocation(pod)
	ok, reason, message = m.opts.Admit(pod, m.allocatedPods(active, pod.UID), false)
	if ok {
		if err := m.store.Set(pod.UID, ResourceInfoForPod(pod)); err != nil {
			klog.ErrorS(err, "SetPodAllocation failed", "pod", klog.KObj(pod))
		}
	}
	return ok, reason, message
}

// AllocatedPods are the active pods that have an allocation, with their allocated
// resources: what the node's capacity is shared by.
func (m *Manager) AllocatedPods(active []*v1.Pod) []*v1.Pod {
	return m.allocatedPods(active, "")
}

func (m *Manager) allocatedPods(active []*v1.Pod, except types.UID) []*v1.Pod {
	out := make([]*v1.Pod, 0, len(active))
	for _, p := range active {
		if p.UID == except || !m.store.Has(p.UID) {
			continue // pods not admitted yet hold nothing
		}
		allocated, _ := m.UpdatePodFromAllocation(p)
		out = append(out, allocated)
	}
	return out
}

// RemovePod forgets the pod's allocation.
func (m *Manager) RemovePod(uid types.UID) { m.store.Remove(uid) }

// RemoveOrphanedPods forgets the allocations of pods not in keep.
func (m *Manager) RemoveOrphanedPods(keep map[types.UID]bool) {
	m.store.RemoveOrphans(func(uid types.UID) bool { return keep[uid] })
}

// PushPendingResize queues the pod's resize for (re)evaluation, in priority order.
func (m *Manager) PushPendingResize(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if slices.Contains(m.pending, uid) {
		return
	}
	m.pending = append(m.pending, uid)
	m.sortPending()
}

// HasPendingResizes reports whether any resize waits.
func (m *Manager) HasPendingResizes() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pending) > 0
}

// RetryIfDue retries the pending resizes when the periodic retry is due; the kubelet
// calls it from housekeeping.
func (m *Manager) RetryIfDue() {
	m.mu.Lock()
	due := !m.opts.Now().Before(m.nextRetry)
	m.mu.Unlock()
	if due {
		m.RetryPendingResizes(triggerPeriodic)
	}
}

// RetryPendingResizes tries every pending resize again, most important first: each is
// allocated if it fits now, stays pending when Deferred, and is dropped when Infeasible
// or gone. A pod whose allocation or resize conditions changed is synced.
func (m *Manager) RetryPendingResizes(trigger string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.opts.Now()
	if m.opts.SourcesReady != nil && !m.opts.SourcesReady() {
		klog.V(4).InfoS("Skipping evaluation of pending resizes; sources are not ready")
		m.nextRetry = now.Add(initialRetryDelay)
		return
	}
	m.nextRetry = now.Add(retryDelay)
	var still []types.UID
	for _, uid := range m.pending {
		pod, found := m.opts.PodByUID(uid)
		if !found {
			klog.V(4).InfoS("Pod not found; removing from pending resizes", "podUID", uid)
			continue
		}
		before := conditionOf(m.opts.Conditions.Pending(uid))
		allocated, err := m.handlePodResourcesResize(pod)
		if allocated && before.Reason == v1.PodReasonDeferred {
			metrics.PodDeferredAcceptedResizes.WithLabelValues(trigger).Inc()
		}
		after := m.opts.Conditions.Pending(uid)
		switch {
		case err != nil:
			klog.ErrorS(err, "Failed to handle pod resources resize", "pod", klog.KObj(pod))
			still = append(still, uid)
		case after != nil && after.Reason == v1.PodReasonDeferred:
			klog.V(4).InfoS("Pod resize is deferred; will reevaluate later", "pod", klog.KObj(pod), "trigger", trigger)
			still = append(still, uid)
		case after != nil && after.Reason == v1.PodReasonInfeasible:
			klog.V(4).InfoS("Pod resize is infeasible", "pod", klog.KObj(pod))
		default:
			klog.V(4).InfoS("Pod resize successfully allocated", "pod", klog.KObj(pod), "trigger", trigger)
		}
		if allocated || !apiequality.Semantic.DeepEqual(before, conditionOf(after)) {
			m.opts.TriggerSync(pod)
		}
	}
	m.pending = still
}

func conditionOf(c *v1.PodCondition) v1.PodCondition {
	if c == nil {
		return v1.PodCondition{}
	}
	return *c
}

// handlePodResourcesResize allocates the pod's desired resources if they differ from its
// allocation and fit, else marks the resize pending. It reports whether it allocated.
// Callers hold m.mu.
func (m *Manager) handlePodResourcesResize(pod *v1.Pod) (bool, error) {
	allocatedPod, differs := m.UpdatePodFromAllocation(pod)
	conds := m.opts.Conditions
	if !differs {
		conds.ClearPending(pod.UID, metrics.ResizeReverted) // reverted, or already allocated
		return false, nil
	}
	ok, reason, message := m.canResize(pod, allocatedPod)
	if ok {
		if err := m.store.Set(pod.UID, ResourceInfoForPod(pod)); err != nil {
			return false, err
		}
		conds.ClearPending(pod.UID, metrics.ResizeAccepted)
		// A new allocation starts a new in-progress condition: earlier errors go, and
		// the generation is this resize's.
		conds.ClearInProgress(pod.UID)
		conds.SetInProgress(pod.UID, "", "", pod.Generation)
		m.event(pod, v1.EventTypeNormal, EventResizeStarted, ResizeEventMessage(ResizeStartedPrefix, pod, pod.Generation, ""))
		return true, nil
	}
	if reason != "" && conds.SetPending(pod.UID, reason, message, pod.Generation) {
		eventReason := EventResizeDeferred
		if reason == v1.PodReasonInfeasible {
			eventReason = EventResizeInfeasible
		}
		m.event(pod, v1.EventTypeWarning, eventReason, ResizeEventMessage(resizePendingPrefix(reason), pod, pod.Generation, message))
	}
	return false, nil
}

// canResize is the admission of a resize: the resize handler's own checks, then the
// admit handlers against the other pods' allocations.
func (m *Manager) canResize(pod, allocatedPod *v1.Pod) (bool, string, string) {
	if !m.opts.PodLevelResize && !apiequality.Semantic.DeepEqual(pod.Spec.Resources, allocatedPod.Spec.Resources) {
		metrics.PodInfeasibleResizes.WithLabelValues("plr_feature_gate_off").Inc()
		return false, v1.PodReasonInfeasible, podLevelResizeDisabled
	}
	if ok, message := m.pinnedResize(pod, allocatedPod); !ok {
		return false, v1.PodReasonInfeasible, message
	}
	var active []*v1.Pod
	if m.opts.ActivePods != nil {
		active = m.opts.ActivePods()
	}
	return m.opts.Admit(pod, m.allocatedPods(active, pod.UID), true)
}

// pinnedResize refuses, as Infeasible with upstream's message, a resize of a
// Guaranteed pod's CPU under the static CPU manager or of its memory under the Static
// memory manager.
func (m *Manager) pinnedResize(pod, allocatedPod *v1.Pod) (bool, string) {
	if qos.GetPodQOS(pod) != v1.PodQOSGuaranteed {
		return true, ""
	}
	if m.opts.StaticCPUManager && resizesRequest(pod, allocatedPod, v1.ResourceCPU) {
		metrics.PodInfeasibleResizes.WithLabelValues("guaranteed_pod_cpu_manager_static_policy").Inc()
		return false, `Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"`
	}
	if m.opts.StaticMemoryManager && resizesRequest(pod, allocatedPod, v1.ResourceMemory) {
		metrics.PodInfeasibleResizes.WithLabelValues("guaranteed_pod_memory_manager_static_policy").Inc()
		return false, `Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"`
	}
	return true, ""
}

// resizesRequest says whether a resizable container (an app container, or a sidecar)
// asks for another request of the resource than it was allocated; a Guaranteed pod's
// limits equal its requests.
func resizesRequest(pod, allocatedPod *v1.Pod, name v1.ResourceName) bool {
	allocated := map[string]v1.ResourceList{}
	for _, c := range append(append([]v1.Container{}, allocatedPod.Spec.InitContainers...), allocatedPod.Spec.Containers...) {
		allocated[c.Name] = c.Resources.Requests
	}
	resizable := pod.Spec.Containers
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			resizable = append(resizable, c)
		}
	}
	for _, c := range resizable {
		want, had := c.Resources.Requests[name], allocated[c.Name][name]
		if !want.Equal(had) {
			return true
		}
	}
	return false
}

func (m *Manager) event(pod *v1.Pod, eventType, reason, message string) {
	if m.opts.Recorder != nil {
		m.opts.Recorder.Event(pod, eventType, reason, message)
	}
}

// sortPending orders the pending resizes as upstream evaluates them: resizes that do not
// grow requests first (they always fit), then higher priority, then Guaranteed before
// Burstable, then the longest pending. Callers hold m.mu.
func (m *Manager) sortPending() {
	type entry struct {
		uid        types.UID
		increasing bool
		priority   int32
		guaranteed bool
		since      *time.Time
	}
	var entries []entry
	for _, uid := range m.pending {
		pod, found := m.opts.PodByUID(uid)
		if !found {
			continue
		}
		e := entry{uid: uid, increasing: m.increasesRequests(pod), guaranteed: qos.GetPodQOS(pod) == v1.PodQOSGuaranteed}
		if pod.Spec.Priority != nil {
			e.priority = *pod.Spec.Priority
		}
		if c := m.opts.Conditions.Pending(uid); c != nil {
			t := c.LastTransitionTime.Time
			e.since = &t
		}
		entries = append(entries, e)
	}
	slices.SortStableFunc(entries, func(a, b entry) int {
		switch {
		case a.increasing != b.increasing:
			return boolOrder(!a.increasing)
		case a.priority != b.priority:
			return boolOrder(a.priority > b.priority)
		case a.guaranteed != b.guaranteed:
			return boolOrder(a.guaranteed)
		case a.since == nil && b.since == nil:
			return 0
		case a.since == nil || b.since == nil:
			return boolOrder(a.since != nil)
		}
		return a.since.Compare(*b.since)
	})
	m.pending = m.pending[:0]
	for _, e := range entries {
		m.pending = append(m.pending, e.uid)
	}
}

// boolOrder is -1 when first should sort first, else 1.
func boolOrder(first bool) int {
	if first {
		return -1
	}
	return 1
}

// increasesRequests reports whether the pod's desired CPU or memory requests exceed its
// allocated ones.
func (m *Manager) increasesRequests(pod *v1.Pod) bool {
	allocated, differs := m.UpdatePodFromAllocation(pod)
	if !differs {
		return false
	}
	before := resourcehelper.PodRequests(allocated, resourcehelper.PodResourcesOptions{})
	after := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	return after.Memory().Cmp(*before.Memory()) > 0 || after.Cpu().Cmp(*before.Cpu()) > 0
}
