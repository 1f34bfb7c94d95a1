package status

import (
	"context"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Manager keeps the latest status of every pod: the kubelet's source of truth for pod status
// (upstream's status manager). Standalone it only keeps them in memory; with a
// PodStatusSyncer it also pushes them to the API server. All methods are thread-safe.
type Manager interface {
	// Start runs the sync loop to the API server; it does nothing without a syncer.
	Start(ctx context.Context)
	// GetPodStatus returns the cached status of the pod.
	GetPodStatus(uid types.UID) (v1.PodStatus, bool)
	// GetPodPhase returns the cached status's phase, without copying the status.
	GetPodPhase(uid types.UID) (v1.PodPhase, bool)
	// SetPodStatus caches a newly generated status for the pod.
	SetPodStatus(pod *v1.Pod, status v1.PodStatus)
	// SetContainerReadiness updates a container's readiness and the Ready conditions.
	SetContainerReadiness(podUID types.UID, containerID container.ContainerID, ready bool)
	// SetContainerStartup updates a container's started flag.
	SetContainerStartup(podUID types.UID, containerID container.ContainerID, started bool)
	// TerminatePod makes the status final once the pod's containers are stopped: any
	// container not known to have terminated is reported failed, and the phase terminal.
	TerminatePod(pod *v1.Pod)
	// RemoveOrphanedStatuses forgets every pod not in podUIDs.
	RemoveOrphanedStatuses(podUIDs map[types.UID]bool)
	// Subscribe is for the local CLI/API: it delivers every status change of any pod until
	// cancel is called. A subscriber that falls more than a buffer behind misses changes
	// (it can catch up with GetPodStatus); it never slows the manager down.
	Subscribe() (updates <-chan PodStatusUpdate, cancel func())
}

// PodStatusUpdate is one new version of a pod's status.
type PodStatusUpdate struct {
	UID       types.UID
	Name      string
	Namespace string
	// Version increases with every change of the pod's status.
	Version uint64
	// PodIsFinished is set from TerminatePod on: the pod's containers are all stopped, so a
	// pod being deleted can be removed from the API server.
	PodIsFinished bool
	Status        v1.PodStatus
	// ConsistentWith is what NeedsReconcile last returned for this version of the status
	// ("": nothing): the syncer may skip comparing again while it still holds.
	ConsistentWith string
	// changedAt is when the first change not yet acknowledged by the syncer was made.
	changedAt time.Time
}

// PodStatusSyncer pushes statuses to the API server (cluster mode); standalone passes nil.
// It is called from the manager's single sync goroutine with the newest version of each pod
// whose status changed; an error leaves that version unacknowledged, to be offered again on
// the next periodic pass. forget says the pod's status is done with (the pod was deleted
// from the API server, or replaced by a new pod of the same name). Merging with the API's
// status and deleting finished pods are the syncer's business (APISyncer).
type PodStatusSyncer interface {
	SyncPodStatus(ctx context.Context, update PodStatusUpdate) (forget bool, err error)
	// NeedsReconcile is asked on every periodic pass about acknowledged statuses: true
	// offers the status again (the API shows something else, or the pod can be deleted).
	// When false it may say what it found the status consistent with (the API object's
	// resourceVersion), which the next pass passes back as update.ConsistentWith while
	// the status's version is the same.
	NeedsReconcile(update PodStatusUpdate) (needs bool, consistentWith string)
}

// syncPeriod is how often every unacknowledged status is offered to the syncer again.
const syncPeriod = 10 * time.Second

// subscriberBuffer is how many updates a subscriber may lag behind.
const subscriberBuffer = 128

// versionedStatus is the cached status of one pod.
type versionedStatus struct {
	version uint64
	// pod is the pod last given with a status; the readiness updates need its spec.
	pod           *v1.Pod
	podIsFinished bool
	status        v1.PodStatus
	// changedAt is when the first change not yet acknowledged by the syncer was made:
	// kubelet_pod_status_sync_duration_seconds runs from there to the acknowledgement.
	changedAt time.Time
	// consistentWith is NeedsReconcile's answer for this version (see PodStatusUpdate).
	consistentWith string
}

type manager struct {
	syncer  PodStatusSyncer
	mirrors MirrorPods
	now     func() time.Time

	mu       sync.RWMutex
	statuses map[types.UID]versionedStatus
	// changed wakes the sync loop; one pending signal is enough.
	changed     chan struct{}
	subscribers map[int]chan PodStatusUpdate
	nextSubID   int

	// apiVersions is the last version the syncer acknowledged, per pod. Only the sync
	// goroutine touches it.
	apiVersions map[types.UID]uint64
	// failures counts failed updates since the last pass without one.
	failures int
}

// MirrorPods finds a static pod's mirror pod in the API.
type MirrorPods interface {
	GetMirrorPodByPod(pod *v1.Pod) (*v1.Pod, bool)
}

// NewManager returns an empty manager; syncer and mirrors may be nil (standalone).
func NewManager(syncer PodStatusSyncer, mirrors MirrorPods) Manager {
	return &manager{
		syncer:      syncer,
		mirrors:     mirrors,
		now:         time.Now,
		statuses:    map[types.UID]versionedStatus{},
		changed:     make(chan struct{}, 1),
		subscribers: map[int]chan PodStatusUpdate{},
		apiVersions: map[types.UID]uint64{},
	}
}

func (m *manager) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	cached, ok := m.statuses[uid]
	return *cached.status.DeepCopy(), ok
}

func (m *manager) GetPodPhase(uid types.UID) (v1.PodPhase, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	cached, ok := m.statuses[uid]
	if !ok {
		return "", false
	}
	return cached.status.Phase, true
}

func (m *manager) SetPodStatus(pod *v1.Pod, status v1.PodStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	status = *status.DeepCopy()
	status.ObservedGeneration = pod.Generation
	// A pod being deleted must always get its update through, even if it looks unchanged,
	// so that its termination can progress.
	m.updateStatus(pod, status, pod.DeletionTimestamp != nil, false)
}

func (m *manager) SetContainerReadiness(podUID types.UID, containerID container.ContainerID, ready bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cached, cs, ok := m.cachedContainer(podUID, containerID, "readiness")
	if !ok || cs.Ready == ready {
		return
	}
	status := *cached.status.DeepCopy()
	cs, _ = findContainerByID(&status, containerID.String())
	cs.Ready = ready

	pod := cached.pod
	all := append(append([]v1.ContainerStatus{}, status.InitContainerStatuses...), status.ContainerStatuses...)
	status.Conditions = setCondition(status.Conditions, GeneratePodReadyCondition(pod, status.Conditions, all, status.Phase))
	status.Conditions = setCondition(status.Conditions, GenerateContainersReadyCondition(pod, all, status.Phase))
	m.updateStatus(pod, status, false, false)
}

func (m *manager) SetContainerStartup(podUID types.UID, containerID container.ContainerID, started bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cached, cs, ok := m.cachedContainer(podUID, containerID, "startup")
	if !ok || (cs.Started != nil && *cs.Started == started) {
		return
	}
	status := *cached.status.DeepCopy()
	cs, _ = findContainerByID(&status, containerID.String())
	cs.Started = &started
	m.updateStatus(cached.pod, status, false, false)
}

// cachedContainer finds the pod's cached status and the container's status in it. Probe
// results may arrive before the pod's first status, or for a container already replaced.
func (m *manager) cachedContainer(podUID types.UID, containerID container.ContainerID, what string) (versionedStatus, *v1.ContainerStatus, bool) {
	cached, ok := m.statuses[podUID]
	if !ok {
		klog.V(4).InfoS("Container "+what+" changed before pod has synced", "podUID", podUID, "containerID", containerID.String())
		return cached, nil, false
	}
	cs, ok := findContainerByID(&cached.status, containerID.String())
	if !ok {
		klog.V(4).InfoS("Container "+what+" changed for unknown container", "pod", klog.KObj(cached.pod), "containerID", containerID.String())
		return cached, nil, false
	}
	return cached, cs, true
}

func findContainerByID(status *v1.PodStatus, id string) (*v1.ContainerStatus, bool) {
	for _, list := range [][]v1.ContainerStatus{status.ContainerStatuses, status.InitContainerStatuses} {
		for i := range list {
			if list[i].ContainerID == id {
				return &list[i], true
			}
		}
	}
	return nil, false
}

// uncachedStatus is the status a pod had before this kubelet cached one: the mirror pod's
// for a static pod (a manifest carries none), else the pod's own. After a kubelet restart
// or a switch between kubelets, this keeps start times and condition transition times.
func (m *manager) uncachedStatus(pod *v1.Pod) v1.PodStatus {
	if m.mirrors != nil && kubetypes.IsStaticPod(pod) {
		if mirror, ok := m.mirrors.GetMirrorPodByPod(pod); ok {
			return mirror.Status
		}
	}
	return pod.Status
}

func setCondition(conditions []v1.PodCondition, c v1.PodCondition) []v1.PodCondition {
	return replaceOrAppendCondition(conditions, &c)
}

func (m *manager) RemoveOrphanedStatuses(podUIDs map[types.UID]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid := range m.statuses {
		if !podUIDs[uid] {
			klog.V(5).InfoS("Removing pod from status map", "podUID", uid)
			delete(m.statuses, uid)
		}
	}
}

// updateStatus caches status as the pod's next version unless nothing the kubelet owns
// changed (and the update is not forced). Callers hold m.mu.
func (m *manager) updateStatus(pod *v1.Pod, status v1.PodStatus, force, podIsFinished bool) {
	oldStatus := m.uncachedStatus(pod)
	cached, isCached := m.statuses[pod.UID]
	if isCached {
		oldStatus = cached.status
		if cached.podIsFinished && !podIsFinished && !kubetypes.IsStaticPod(pod) {
			klog.InfoS("Got unexpected podIsFinished=false, while podIsFinished=true in status cache, programmer error", "pod", klog.KObj(pod))
			podIsFinished = true
		}
	}
	if err := checkContainerStateTransition(&oldStatus, &status, &pod.Spec); err != nil {
		klog.ErrorS(err, "Status update on pod aborted", "pod", klog.KObj(pod))
		return
	}
	recordTerminations(&oldStatus, &status)
	now := metav1.NewTime(m.now())
	for _, t := range []v1.PodConditionType{v1.ContainersReady, v1.PodReady, v1.PodInitialized, v1.PodReadyToStartContainers, v1.PodScheduled, v1.DisruptionTarget} {
		updateLastTransitionTime(&status, &oldStatus, t, now)
	}
	// The start time never changes once set.
	if oldStatus.StartTime != nil && !oldStatus.StartTime.IsZero() {
		status.StartTime = oldStatus.StartTime
	} else if status.StartTime.IsZero() {
		status.StartTime = &now
	}
	status.ObservedGeneration = max(status.ObservedGeneration, oldStatus.ObservedGeneration)
	normalizeStatus(pod, &status)

	// Identical updates are dropped so that the version (and the phase) only moves forward
	// on real changes.
	if isCached && !force && statusByKubeletEqual(&cached.status, &status) {
		klog.V(5).InfoS("Ignoring same status for pod", "pod", klog.KObj(pod))
		return
	}
	next := versionedStatus{version: cached.version + 1, pod: pod, podIsFinished: podIsFinished, status: status, changedAt: cached.changedAt}
	if next.changedAt.IsZero() {
		next.changedAt = now.Time
	}
	m.statuses[pod.UID] = next
	m.announce(pod, next)
}

// announce wakes the sync loop and tells the subscribers. Callers hold m.mu.
func (m *manager) announce(pod *v1.Pod, s versionedStatus) {
	select {
	case m.changed <- struct{}{}:
	default: // a sync is already pending
	}
	if len(m.subscribers) == 0 {
		return
	}
	for _, ch := range m.subscribers {
		// Each subscriber gets its own copy: they may keep or modify it.
		update := PodStatusUpdate{UID: pod.UID, Name: pod.Name, Namespace: pod.Namespace, Version: s.version, PodIsFinished: s.podIsFinished, Status: *s.status.DeepCopy()}
		select {
		case ch <- update:
		default:
			klog.V(4).InfoS("Status subscriber is behind, dropping an update", "pod", klog.KObj(pod), "version", s.version)
		}
	}
}

func (m *manager) Subscribe() (<-chan PodStatusUpdate, func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.nextSubID
	m.nextSubID++
	ch := make(chan PodStatusUpdate, subscriberBuffer)
	m.subscribers[id] = ch
	var once sync.Once
	cancel := func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			delete(m.subscribers, id)
			close(ch)
		})
	}
	return ch, cancel
}

// updateLastTransitionTime stamps a condition with now if its status changed, else keeps the
// old transition time.
func updateLastTransitionTime(status, oldStatus *v1.PodStatus, t v1.PodConditionType, now metav1.Time) {
	c := findCondition(status.Conditions, t)
	if c == nil {
		return
	}
	c.LastTransitionTime = now
	if old := findCondition(oldStatus.Conditions, t); old != nil && old.Status == c.Status {
		c.LastTransitionTime = old.LastTransitionTime
	}
}

// statusByKubeletEqual compares two statuses ignoring the transition times of the kubelet's
// conditions and any condition the kubelet does not own or share.
func statusByKubeletEqual(oldStatus, status *v1.PodStatus) bool {
	// A kubelet condition that went away (a resize condition) is a change.
	if countKubeletConditions(oldStatus.Conditions) != countKubeletConditions(status.Conditions) {
		return false
	}
	oldCopy := oldStatus.DeepCopy()
	for _, c := range status.Conditions {
		if !kubeletOwnsCondition(c.Type) && c.Type != v1.DisruptionTarget {
			continue
		}
		oc := findCondition(oldCopy.Conditions, c.Type)
		if oc == nil || oc.Status != c.Status || oc.Message != c.Message || oc.Reason != c.Reason {
			return false
		}
	}
	oldCopy.Conditions = status.Conditions
	return apiequality.Semantic.DeepEqual(oldCopy, status)
}

func countKubeletConditions(conditions []v1.PodCondition) int {
	n := 0
	for _, c := range conditions {
		if kubeletOwnsCondition(c.Type) {
			n++
		}
	}
	return n
}

// recordTerminations counts each container that has terminated since oldStatus, once
// (kubelet_terminated_containers_total, as upstream's status manager does).
func recordTerminations(oldStatus, status *v1.PodStatus) {
	lists := []struct {
		old, new      []v1.ContainerStatus
		containerType string
	}{
		{oldStatus.InitContainerStatuses, status.InitContainerStatuses, metrics.InitContainer},
		{oldStatus.ContainerStatuses, status.ContainerStatuses, metrics.Container},
		{oldStatus.EphemeralContainerStatuses, status.EphemeralContainerStatuses, metrics.EphemeralContainer},
	}
	for _, l := range lists {
		for _, cs := range l.new {
			t := cs.State.Terminated
			if t == nil || wasTerminated(l.old, cs.Name) {
				continue
			}
			metrics.TerminatedContainersTotal.WithLabelValues(l.containerType, strconv.Itoa(int(t.ExitCode)), t.Reason).Inc()
		}
	}
}

func wasTerminated(statuses []v1.ContainerStatus, name string) bool {
	for _, cs := range statuses {
		if cs.Name == name {
			return cs.State.Terminated != nil
		}
	}
	return false
}
