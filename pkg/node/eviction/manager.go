// Package eviction is nodelet's eviction manager, upstream's
// pkg/kubelet/eviction: it watches memory, disk and PID signals from the
// stats summary, reports MemoryPressure, DiskPressure and PIDPressure, and
// when a hard threshold (or a soft one past its grace period) is met it
// first reclaims what the node can (dead containers, unused images) and
// then evicts one pod per check, in upstream's order. It also evicts pods
// that outgrow their emptyDir sizeLimit or ephemeral-storage limits.
package eviction

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/outage"
)

// Reason is the evicted pod's status reason, and the reason of the Warning
// event recorded on it and of an admission refusal under pressure.
const Reason = "Evicted"

const (
	// hardEvictionGracePeriodSeconds is the grace period of a pod evicted on
	// a hard threshold or for outgrowing its local storage.
	hardEvictionGracePeriodSeconds = 1
	// podCleanupTimeout and podCleanupPollPeriod bound the wait for an
	// evicted pod to be cleaned up before the next check.
	podCleanupTimeout    = 30 * time.Second
	podCleanupPollPeriod = time.Second
	// notifierRefreshInterval is how often the memcg thresholds are re-armed
	// from fresh stats.
	notifierRefreshInterval = 10 * time.Second
)

// KillPodFunc stops pod, giving its containers gracePeriodOverride seconds,
// and sets its final status with statusFn (Failed, Evicted, the message).
// It returns once the pod's containers are stopped, or with an error.
type KillPodFunc func(pod *v1.Pod, statusFn func(*v1.PodStatus), gracePeriodOverride int64) error

// Deps are the manager's collaborators. Summary, ActivePods and KillPod are
// required.
type Deps struct {
	// Summary returns a full stats summary (pkg/node/stats Provider.Get).
	Summary func(ctx context.Context) (*statsapi.Summary, error)
	// NodeSummary, optional, returns the summary without pods (Provider.GetNode): while
	// no threshold is met and no pod has a local storage limit, that is all a check
	// needs, and it spares the runtime's per-container stats every 10 s.
	NodeSummary func(ctx context.Context) (*statsapi.Summary, error)
	// ActivePods are the pods that may be evicted: admitted and not yet
	// terminated (upstream's GetActivePods).
	ActivePods func() []*v1.Pod
	// KillPod evicts one pod, through the pod workers.
	KillPod KillPodFunc
	// PodCleanedUp reports whether an evicted pod's resources are released.
	// Optional: after an eviction the manager waits up to 30 s for it before
	// checking again; without it, it waits for the next check.
	PodCleanedUp func(*v1.Pod) bool
	// DeleteAllUnusedContainers and DeleteUnusedImages reclaim disk before
	// any pod is evicted for disk pressure (the container GC with no age or
	// count limits, and image GC). Optional.
	DeleteAllUnusedContainers func(ctx context.Context) error
	DeleteUnusedImages        func(ctx context.Context) error
	// HasDedicatedImageFs reports whether the runtime's image filesystem is
	// another device than the kubelet's root directory; it decides which pod
	// usage counts for which filesystem. Optional: nil means one filesystem.
	// ImageFsOnOwnDevice builds one.
	HasDedicatedImageFs func(ctx context.Context) (bool, error)
	// Recorder records the Evicted events on pods and EvictionThresholdMet
	// on NodeRef. A nil Recorder records nothing, a nil NodeRef no node
	// event.
	Recorder record.EventRecorder
	NodeRef  *v1.ObjectReference
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// Notifiers arms memcg threshold notifications; nil means the kernel's
	// (cgroup v1 cgroup.event_control). Tests pass fakes.
	Notifiers NotifierFactory
}

// Manager is the eviction manager. Its pressure getters and
// PressureConditions are safe for concurrent use.
type Manager struct {
	cfg   Config
	deps  Deps
	clock clock.WithTicker

	// syncMu serialises checks: the periodic loop and memcg notifications
	// both run one. The fields below it are only used under it.
	syncMu           sync.Mutex
	ready            bool
	dedicatedImageFs bool
	thresholds       []Threshold // cfg.Thresholds with the containerfs ones
	rank             map[Signal]rankFunc
	reclaim          map[Signal][]func(context.Context) error
	firstObserved    map[int]time.Time // threshold index → when first met
	met              map[int]bool      // thresholds met past their grace period
	conditionSeen    map[v1.NodeConditionType]time.Time
	lastObservations observations
	notifiers        []*memoryNotifier
	notifiersUpdated time.Time

	mu         sync.RWMutex
	conditions []v1.NodeConditionType
}

// NewManager returns a manager; Start runs it.
func NewManager(cfg Config, deps Deps) (*Manager, error) {
	if deps.Summary == nil || deps.ActivePods == nil || deps.KillPod == nil {
		return nil, errors.New("eviction manager needs Summary, ActivePods and KillPod")
	}
	if cfg.MonitoringInterval <= 0 {
		cfg.MonitoringInterval = DefaultMonitoringInterval
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Recorder == nil {
		deps.Recorder = &record.FakeRecorder{}
	}
	if deps.Notifiers == nil {
		deps.Notifiers = kernelNotifiers{}
	}
	return &Manager{
		cfg:           cfg,
		deps:          deps,
		clock:         deps.Clock,
		firstObserved: map[int]time.Time{},
		met:           map[int]bool{},
		conditionSeen: map[v1.NodeConditionType]time.Time{},
	}, nil
}

// Start checks the thresholds every MonitoringInterval until ctx ends and,
// with KernelMemcgNotification, also as soon as the kernel reports a memory
// threshold crossed. After an eviction it waits for the pod to be cleaned up
// and checks again at once, as upstream does.
func (m *Manager) Start(ctx context.Context) {
	logger := klog.FromContext(ctx)
	logger.Info("Eviction manager: starting control loop")
	if m.cfg.KernelMemcgNotification {
		m.startNotifiers(ctx)
	}
	go func() {
		for ctx.Err() == nil {
			evicted := m.synchronize(ctx)
			if len(evicted) > 0 && m.deps.PodCleanedUp != nil {
				logger.Info("Eviction manager: pods evicted, waiting for pod to be cleaned up", "pods", klog.KObjSlice(evicted))
				m.waitForCleanup(ctx, evicted)
				continue
			}
			select {
			case <-ctx.Done():
			case <-m.clock.After(m.cfg.MonitoringInterval):
			}
		}
		logger.Info("Eviction manager: monitoring loop exiting")
	}()
}

// PressureConditions are the pressure conditions the node has now, in the
// order MemoryPressure, DiskPressure, PIDPressure: what pkg/pod/admission's
// Options.PressureConditions wants.
func (m *Manager) PressureConditions() []v1.NodeConditionType {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.conditions)
}

func (m *Manager) hasCondition(c v1.NodeConditionType) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Contains(m.conditions, c)
}

// IsUnderMemoryPressure reports the MemoryPressure condition.
func (m *Manager) IsUnderMemoryPressure() bool { return m.hasCondition(v1.NodeMemoryPressure) }

// IsUnderDiskPressure reports the DiskPressure condition.
func (m *Manager) IsUnderDiskPressure() bool { return m.hasCondition(v1.NodeDiskPressure) }

// IsUnderPIDPressure reports the PIDPressure condition.
func (m *Manager) IsUnderPIDPressure() bool { return m.hasCondition(v1.NodePIDPressure) }

// MemoryPressure, DiskPressure and PIDPressure make *Manager a
// nodestatus.Pressure.
func (m *Manager) MemoryPressure() bool { return m.IsUnderMemoryPressure() }

// DiskPressure reports the DiskPressure condition.
func (m *Manager) DiskPressure() bool { return m.IsUnderDiskPressure() }

// PIDPressure reports the PIDPressure condition.
func (m *Manager) PIDPressure() bool { return m.IsUnderPIDPressure() }

// synchronize is one check: observe, update the conditions, and evict at
// most one pod for the most urgent threshold met (all pods over their local
// storage limits first). It returns the pods it evicted.
// summary is the full summary, or the node's only.
func (m *Manager) summary(ctx context.Context, full bool) (*statsapi.Summary, error) {
	if full {
		return m.deps.Summary(ctx)
	}
	return m.deps.NodeSummary(ctx)
}

func (m *Manager) synchronize(ctx context.Context) []*v1.Pod {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	// The summary needs the runtime: while it is down, the outage gate keeps these
	// errors to its own lines instead of one every monitoring interval.
	logger := outage.Default.Logger(klog.FromContext(ctx))
	if len(m.cfg.Thresholds) == 0 && !m.cfg.LocalStorageCapacityIsolation {
		return nil
	}
	if err := m.init(ctx); err != nil {
		logger.Error(err, "Eviction manager: failed to get HasDedicatedImageFs")
		return nil
	}
	pods := slices.Clone(m.deps.ActivePods())
	full := m.deps.NodeSummary == nil || m.cfg.LocalStorageCapacityIsolation && slices.ContainsFunc(pods, hasLocalStorageLimit)
	summary, err := m.summary(ctx, full)
	if err != nil {
		logger.Error(err, "Eviction manager: failed to get summary stats")
		return nil
	}
	m.refreshNotifiers(ctx, summary)
	obs, stats := observe(summary)
	actionable := m.updateState(logger, obs)
	if len(actionable) > 0 && !full {
		// A threshold is met: ranking needs the pods' usage.
		if summary, err = m.summary(ctx, true); err != nil {
			logger.Error(err, "Eviction manager: failed to get summary stats")
			return nil
		}
		_, stats = observe(summary)
	}

	if m.cfg.LocalStorageCapacityIsolation {
		if evicted := m.localStorageEviction(ctx, pods, stats); len(evicted) > 0 {
			return evicted
		}
	}
	if len(actionable) == 0 {
		logger.V(3).Info("Eviction manager: no resources are starved")
		return nil
	}
	t := actionable[0]
	res := signalInfos[t.Signal].resource
	logger.Info("Eviction manager: attempting to reclaim", "resourceName", res)
	if m.deps.NodeRef != nil {
		m.deps.Recorder.Eventf(m.deps.NodeRef, v1.EventTypeWarning, "EvictionThresholdMet", "Attempting to reclaim %s", res)
	}
	if m.reclaimNodeLevel(ctx, t.Signal) {
		logger.Info("Eviction manager: able to reduce resource pressure without evicting pods.", "resourceName", res)
		return nil
	}
	logger.Info("Eviction manager: must evict pod(s) to reclaim", "resourceName", res)
	if len(pods) == 0 {
		logger.Error(nil, "Eviction manager: eviction thresholds have been met, but no pods are active to evict")
		return nil
	}
	m.rank[t.Signal](pods, stats)
	logger.Info("Eviction manager: pods ranked for eviction", "pods", klog.KObjSlice(pods))
	// How old the stats behind each threshold met are, as upstream records them before
	// it evicts.
	for _, t := range actionable {
		if o, ok := obs[t.Signal]; ok && !o.time.IsZero() {
			metrics.EvictionStatsAge.WithLabelValues(string(t.Signal)).Observe(m.clock.Since(o.time).Seconds())
		}
	}
	for _, pod := range pods {
		message, annotations := evictionMessage(res, pod, stats, actionable, obs)
		condition := &v1.PodCondition{
			Type: v1.DisruptionTarget, ObservedGeneration: pod.Generation, Status: v1.ConditionTrue,
			Reason: v1.PodReasonTerminationByKubelet, Message: message,
		}
		if m.evictPod(ctx, pod, m.gracePeriod(t, pod), message, annotations, condition, string(t.Signal)) {
			return []*v1.Pod{pod}
		}
	}
	logger.Info("Eviction manager: unable to evict any pods from the node")
	return nil
}

// init settles what depends on the filesystems, once: whether the image
// filesystem is dedicated decides the containerfs thresholds, how pods are
// ranked and what reclaims disk.
func (m *Manager) init(ctx context.Context) error {
	if m.ready {
		return nil
	}
	if m.deps.HasDedicatedImageFs != nil {
		dedicated, err := m.deps.HasDedicatedImageFs(ctx)
		if err != nil {
			return err
		}
		m.dedicatedImageFs = dedicated
	}
	m.thresholds = withContainerFsThresholds(m.cfg.Thresholds, m.dedicatedImageFs)
	m.rank = rankFuncs(m.dedicatedImageFs)
	m.reclaim = m.reclaimFuncs()
	m.ready = true
	klog.FromContext(ctx).V(2).Info("Eviction manager: thresholds", "thresholds", m.thresholds, "dedicatedImageFs", m.dedicatedImageFs)
	return nil
}

// updateState works out, from this check's observations, which thresholds
// are met and since when, which pressure conditions the node has, and
// returns the thresholds to act on: met past their grace period, on stats
// newer than the last check's, memory first.
func (m *Manager) updateState(logger klog.Logger, obs observations) []Threshold {
	now := m.clock.Now()
	firstObserved := map[int]time.Time{}
	for i, t := range m.thresholds {
		// A threshold acted on stays met until its minimum reclaim is back.
		if obs.met(t, false) || (m.met[i] && obs.met(t, true)) {
			firstObserved[i] = now
			if at, ok := m.firstObserved[i]; ok {
				firstObserved[i] = at
			}
			m.conditionSeen[signalInfos[t.Signal].condition] = now
		}
	}
	var conditions []v1.NodeConditionType
	for _, c := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		if at, ok := m.conditionSeen[c]; ok && now.Sub(at) < m.cfg.PressureTransitionPeriod {
			conditions = append(conditions, c)
		}
	}
	if len(conditions) > 0 {
		logger.V(3).Info("Eviction manager: node conditions", "nodeCondition", conditions)
	}
	m.mu.Lock()
	m.conditions = conditions
	m.mu.Unlock()

	met := map[int]bool{}
	var actionable []Threshold
	for i, t := range m.thresholds {
		at, ok := firstObserved[i]
		if !ok {
			continue
		}
		if since := now.Sub(at); since < t.GracePeriod {
			logger.V(2).Info("Eviction manager: eviction criteria not yet met", "threshold", t.String(), "duration", since)
			continue
		}
		met[i] = true
		if m.statsUpdated(t.Signal, obs) {
			actionable = append(actionable, t)
		}
	}
	m.firstObserved, m.met, m.lastObservations = firstObserved, met, obs
	slices.SortStableFunc(actionable, func(a, b Threshold) int {
		return compareTrueFirst(isMemorySignal(a.Signal), isMemorySignal(b.Signal))
	})
	return actionable
}

// statsUpdated reports whether the signal's stats are newer than those of
// the last check, so that one reading never causes two evictions.
func (m *Manager) statsUpdated(s Signal, obs observations) bool {
	last, ok := m.lastObservations[s]
	o := obs[s]
	return !ok || o.time.IsZero() || o.time.After(last.time)
}

// reclaimNodeLevel runs the signal's reclaim functions and reports whether
// that brought every threshold back above its minimum reclaim, so that no
// pod need be evicted.
func (m *Manager) reclaimNodeLevel(ctx context.Context, s Signal) bool {
	funcs := m.reclaim[s]
	if len(funcs) == 0 {
		return false
	}
	logger := outage.Default.Logger(klog.FromContext(ctx))
	for _, reclaim := range funcs {
		if err := reclaim(ctx); err != nil {
			logger.Info("Eviction manager: unexpected error when attempting to reduce resource pressure", "resourceName", signalInfos[s].resource, "err", err)
		}
	}
	summary, err := m.deps.Summary(ctx)
	if err != nil {
		logger.Error(err, "Eviction manager: failed to get summary stats after resource reclaim")
		return false
	}
	obs, _ := observe(summary)
	for _, t := range m.thresholds {
		if obs.met(t, true) {
			return false
		}
	}
	return true
}

// gracePeriod is one second on a hard threshold; on a soft one the pod's
// own, capped at MaxPodGracePeriodSeconds.
func (m *Manager) gracePeriod(t Threshold, pod *v1.Pod) int64 {
	if t.hard() {
		return hardEvictionGracePeriodSeconds
	}
	grace := m.cfg.MaxPodGracePeriodSeconds
	if tgps := pod.Spec.TerminationGracePeriodSeconds; tgps != nil {
		grace = min(grace, *tgps)
	}
	return grace
}

// evictPod records the Evicted event and kills the pod with its final
// status. Critical pods are never evicted: static pods would not come back.
// It reports whether the pod was evicted (a kill that fails still counts,
// as upstream: the pod is on its way out).
func (m *Manager) evictPod(ctx context.Context, pod *v1.Pod, grace int64, message string, annotations map[string]string, condition *v1.PodCondition, signal string) bool {
	logger := klog.FromContext(ctx)
	if kubetypes.IsCriticalPod(pod) {
		logger.Error(nil, "Eviction manager: cannot evict a critical pod", "pod", klog.KObj(pod))
		return false
	}
	m.deps.Recorder.AnnotatedEventf(pod, annotations, v1.EventTypeWarning, Reason, "%s", message)
	logger.V(3).Info("Evicting pod", "pod", klog.KObj(pod), "podUID", pod.UID, "message", message)
	now := metav1.NewTime(m.clock.Now())
	err := m.deps.KillPod(pod, func(status *v1.PodStatus) {
		status.Phase = v1.PodFailed
		status.Reason = Reason
		status.Message = message
		if condition != nil {
			setPodCondition(status, *condition, now)
		}
	}, grace)
	if err != nil {
		logger.Error(err, "Eviction manager: pod failed to evict", "pod", klog.KObj(pod))
	} else {
		logger.Info("Eviction manager: pod is evicted successfully", "pod", klog.KObj(pod))
	}
	metrics.Evictions.WithLabelValues(signal).Inc()
	return true
}

// setPodCondition sets c in status, keeping the transition time of an
// existing condition of its type whose status is unchanged.
func setPodCondition(status *v1.PodStatus, c v1.PodCondition, now metav1.Time) {
	c.LastTransitionTime = now
	for i := range status.Conditions {
		if status.Conditions[i].Type == c.Type {
			if status.Conditions[i].Status == c.Status {
				c.LastTransitionTime = status.Conditions[i].LastTransitionTime
			}
			status.Conditions[i] = c
			return
		}
	}
	status.Conditions = append(status.Conditions, c)
}

// waitForCleanup waits until every evicted pod is cleaned up, or 30 s.
func (m *Manager) waitForCleanup(ctx context.Context, pods []*v1.Pod) {
	logger := klog.FromContext(ctx)
	timeout := m.clock.NewTimer(podCleanupTimeout)
	defer timeout.Stop()
	ticker := m.clock.NewTicker(podCleanupPollPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timeout.C():
			logger.Info("Eviction manager: timed out waiting for pods to be cleaned up", "pods", klog.KObjSlice(pods))
			return
		case <-ticker.C():
			if !slices.ContainsFunc(pods, func(p *v1.Pod) bool { return !m.deps.PodCleanedUp(p) }) {
				logger.Info("Eviction manager: pods successfully cleaned up", "pods", klog.KObjSlice(pods))
				return
			}
		}
	}
}

// rankFuncs is how pods are ranked for each signal. With one filesystem,
// every disk signal counts writable layers, logs and local volumes; with a
// dedicated image filesystem (holding the writable layers too), nodefs
// counts logs and local volumes and imagefs/containerfs the writable layers.
func rankFuncs(dedicatedImageFs bool) map[Signal]rankFunc {
	out := map[Signal]rankFunc{
		SignalMemoryAvailable:            rankMemoryPressure,
		SignalAllocatableMemoryAvailable: rankMemoryPressure,
		SignalPIDAvailable:               rankPIDPressure,
	}
	nodeFs := diskMeasure{writableLayers: true, logs: true, localVolumes: true}
	imageFs := nodeFs
	if dedicatedImageFs {
		nodeFs = diskMeasure{logs: true, localVolumes: true}
		imageFs = diskMeasure{writableLayers: true}
	}
	for _, s := range []Signal{SignalNodeFsAvailable, SignalNodeFsInodesFree, SignalImageFsAvailable, SignalImageFsInodesFree, SignalContainerFsAvailable, SignalContainerFsInodesFree} {
		measure := imageFs
		if s == SignalNodeFsAvailable || s == SignalNodeFsInodesFree {
			measure = nodeFs
		}
		out[s] = rankDiskPressure(measure, signalInfos[s].resource)
	}
	return out
}

// reclaimFuncs is what frees disk for each signal before pods are evicted:
// dead containers, then unused images, on the filesystem holding them.
// With a dedicated image filesystem, nodefs pressure reclaims nothing.
func (m *Manager) reclaimFuncs() map[Signal][]func(context.Context) error {
	var gc []func(context.Context) error
	for _, f := range []func(context.Context) error{m.deps.DeleteAllUnusedContainers, m.deps.DeleteUnusedImages} {
		if f != nil {
			gc = append(gc, f)
		}
	}
	out := map[Signal][]func(context.Context) error{}
	for _, s := range []Signal{SignalImageFsAvailable, SignalImageFsInodesFree, SignalContainerFsAvailable, SignalContainerFsInodesFree} {
		out[s] = gc
	}
	if !m.dedicatedImageFs {
		out[SignalNodeFsAvailable] = gc
		out[SignalNodeFsInodesFree] = gc
	}
	return out
}
