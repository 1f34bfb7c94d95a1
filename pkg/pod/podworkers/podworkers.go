// Package podworkers runs one goroutine per pod UID (upstream's pod workers). A pod moves
// through three phases — syncing, terminating, terminated — and syncs of one pod never
// overlap while different pods sync concurrently.
package podworkers

import (
	"context"
	"errors"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/outage"
	"github.com/nodelet/nodelet/pkg/pod/podcache"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// SyncPodType says why a pod is being synced.
type SyncPodType int

const (
	SyncPodSync SyncPodType = iota
	SyncPodUpdate
	SyncPodCreate
	// SyncPodKill asks for the pod to be terminated (it stays known until housekeeping forgets it).
	SyncPodKill
)

func (t SyncPodType) String() string {
	return [...]string{"sync", "update", "create", "kill"}[t]
}

// KillPodOptions carries a termination request's details.
type KillPodOptions struct {
	// PodStatusFunc lets the requester set the final status (e.g. eviction reason).
	PodStatusFunc func(*v1.PodStatus)
	// GracePeriodOverride wins over the pod's own grace period when shorter.
	GracePeriodOverride *int64
}

// UpdatePodOptions is one request to a pod's worker.
type UpdatePodOptions struct {
	UpdateType SyncPodType
	StartTime  time.Time
	// Pod is the desired pod; nil when only RunningPod is known (an orphan in the runtime).
	Pod            *v1.Pod
	RunningPod     *container.Pod
	KillPodOptions *KillPodOptions
}

// Syncer does the work of each phase (implemented by the kubelet).
type Syncer interface {
	// SyncPod converges a pod; isTerminal reports that it has finished for good. postSync,
	// when not nil, is called once the worker has recorded the sync's time (the kubelet
	// asks the PLEG to relist the pod then, so its next status is newer than this sync).
	SyncPod(ctx context.Context, updateType SyncPodType, pod *v1.Pod, status *container.PodStatus) (isTerminal bool, postSync func(), err error)
	// SyncTerminatingPod stops every container within gracePeriod; nil means all stopped.
	SyncTerminatingPod(ctx context.Context, pod *v1.Pod, status *container.PodStatus, gracePeriod *int64, statusFn func(*v1.PodStatus)) error
	// SyncTerminatingRuntimePod kills a pod known only from the runtime.
	SyncTerminatingRuntimePod(ctx context.Context, runningPod *container.Pod) error
	// SyncTerminatedPod releases what the pod held (volumes, directories, cgroups).
	SyncTerminatedPod(ctx context.Context, pod *v1.Pod, status *container.PodStatus) error
}

// ErrBackOffWait is returned by a sync that is only waiting out a back-off
// (CrashLoopBackOff, ImagePullBackOff): the pod is retried after retryBackOffPeriod,
// without an error log, so restarts follow the back-off schedule closely.
var ErrBackOffWait = errors.New("waiting for back-off to expire")

// PodWorkerState is a pod's phase.
type PodWorkerState int

const (
	SyncPod PodWorkerState = iota
	TerminatingPod
	TerminatedPod
)

// String is the phase's name as upstream writes it (the lifecycle label of
// kubelet_working_pods).
func (s PodWorkerState) String() string {
	switch s {
	case SyncPod:
		return "sync"
	case TerminatingPod:
		return "terminating"
	case TerminatedPod:
		return "terminated"
	}
	return "unknown"
}

// Timing of the worker loop (upstream's backOffPeriod and resync jitter).
const (
	backOffPeriod           = 10 * time.Second
	backOffJitterFactor     = 0.5
	resyncJitterFactor      = 0.5
	defaultGracePeriodFloor = 1
	retryBackOffPeriod      = time.Second
)

type podState struct {
	pod         *v1.Pod
	runningPod  *container.Pod
	updateType  SyncPodType
	notify      chan struct{}
	ctx         context.Context
	cancel      context.CancelFunc
	terminating bool
	terminated  bool
	finished    bool // the worker goroutine has exited
	working     bool
	// restartRequested: a pod with this UID was created again while this one was being
	// torn down (a static pod removed and restored unchanged); once finished, the worker
	// is forgotten so that housekeeping can start the new pod.
	restartRequested bool
	// staticName is a static pod's full name; staticStarted: it has been let start.
	staticName    string
	staticStarted bool
	gracePeriod   *int64
	statusFn      func(*v1.PodStatus)
	// pendingSince is the StartTime of the oldest update the worker has not picked up
	// yet: kubelet_pod_worker_duration_seconds counts from there.
	pendingSince time.Time
}

// PodWorkers dispatches pod updates to per-pod goroutines.
type PodWorkers struct {
	mu             sync.Mutex
	pods           map[types.UID]*podState
	syncer         Syncer
	cache          podcache.Cache
	queue          *WorkQueue
	clock          clock.Clock
	resyncInterval time.Duration
	// workerDone is told when a worker finishes a round (tests and the loop may watch it).
	workerDone func(uid types.UID)
	// podsSynced is set by the first SyncKnownPods: from then on every pod that may have
	// containers has a worker, so a pod without one has none running.
	podsSynced bool
	// static orders the start of static pods that share a full name.
	static staticPods
}

// New returns pod workers; resyncInterval is syncFrequency.
func New(syncer Syncer, cache podcache.Cache, queue *WorkQueue, c clock.Clock, resyncInterval time.Duration) *PodWorkers {
	return &PodWorkers{pods: map[types.UID]*podState{}, syncer: syncer, cache: cache, queue: queue, clock: c, resyncInterval: resyncInterval,
		static: newStaticPods()}
}

// UpdatePod hands an update to the pod's worker, starting it if needed. It never blocks on
// a sync: a busy worker picks up the newest update when it finishes the current one.
func (p *PodWorkers) UpdatePod(o UpdatePodOptions) {
	uid := updateUID(o)
	p.mu.Lock()
	defer p.mu.Unlock()
	s, known := p.pods[uid]
	if known && o.UpdateType == SyncPodCreate && o.Pod != nil && (s.terminating || s.finished) {
		// The old pod finishes tearing down undisturbed; housekeeping then restarts it.
		klog.V(4).InfoS("Pod is terminating but has been requested to restart with same UID, will be reconciled later", "pod", klog.KObj(o.Pod), "podUID", uid)
		s.restartRequested = true
		return
	}
	if known && s.finished {
		// A terminated pod stays terminated; only housekeeping forgets it.
		return
	}
	if !known {
		s = &podState{notify: make(chan struct{}, 1)}
		s.ctx, s.cancel = context.WithCancel(context.Background())
		p.pods[uid] = s
		go p.workerLoop(uid, s)
		if o.Pod != nil && o.UpdateType != SyncPodKill {
			metrics.ContainersPerPodCount.Observe(float64(len(o.Pod.Spec.Containers)))
			s.staticName = staticFullName(o.Pod)
			p.queueStaticLocked(uid, s)
		}
	}
	if o.Pod != nil {
		s.pod = o.Pod
	}
	if o.RunningPod != nil {
		s.runningPod = o.RunningPod
	}
	s.updateType = o.UpdateType
	if !o.StartTime.IsZero() && (s.pendingSince.IsZero() || o.StartTime.Before(s.pendingSince)) {
		s.pendingSince = o.StartTime
	}
	if p.wantsTermination(o, s) {
		p.beginTerminating(uid, s, o)
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func updateUID(o UpdatePodOptions) types.UID {
	if o.Pod != nil {
		return o.Pod.UID
	}
	return o.RunningPod.ID
}

func (p *PodWorkers) wantsTermination(o UpdatePodOptions, s *podState) bool {
	return o.UpdateType == SyncPodKill || o.Pod == nil && s.pod == nil ||
		(s.pod != nil && s.pod.DeletionTimestamp != nil)
}

// beginTerminating moves the pod to terminating; a shorter grace period than the one in
// force cancels the running sync so the kill restarts with it.
func (p *PodWorkers) beginTerminating(uid types.UID, s *podState, o UpdatePodOptions) {
	grace := gracePeriodFor(s.pod, o.KillPodOptions)
	if o.KillPodOptions != nil && o.KillPodOptions.PodStatusFunc != nil {
		s.statusFn = o.KillPodOptions.PodStatusFunc
	}
	if !s.terminating {
		klog.V(2).InfoS("Pod is marked for termination", "podUID", uid, "gracePeriod", derefOr(grace, -1))
		s.terminating, s.gracePeriod = true, grace
		s.cancel()
		return
	}
	if grace != nil && (s.gracePeriod == nil || *grace < *s.gracePeriod) {
		s.gracePeriod = grace
		s.cancel()
	}
}

// gracePeriodFor picks the override, the pod's deletion grace, or its spec, with a floor
// of 1 s as upstream (0 would mean "force" only for the API server).
func gracePeriodFor(pod *v1.Pod, k *KillPodOptions) *int64 {
	var g *int64
	switch {
	case k != nil && k.GracePeriodOverride != nil:
		g = k.GracePeriodOverride
	case pod != nil && pod.DeletionGracePeriodSeconds != nil:
		g = pod.DeletionGracePeriodSeconds
	case pod != nil && pod.Spec.TerminationGracePeriodSeconds != nil:
		g = pod.Spec.TerminationGracePeriodSeconds
	default:
		return nil
	}
	v := *g
	if v < defaultGracePeriodFloor {
		v = defaultGracePeriodFloor
	}
	return &v
}

func derefOr(p *int64, d int64) int64 {
	if p == nil {
		return d
	}
	return *p
}

// workerLoop serves one pod until it has terminated.
func (p *PodWorkers) workerLoop(uid types.UID, s *podState) {
	var lastSync time.Time
	for range s.notify {
		ctx, work, ok := p.startWork(uid, s)
		if !ok {
			continue
		}
		status, err := p.statusNewerThan(uid, work, lastSync)
		started := p.clock.Now()
		var postSync func()
		if err == nil {
			postSync, err = p.runPhase(ctx, uid, s, work, status)
		}
		lastSync = p.clock.Now()
		if err == nil && work.phase == TerminatingPod && work.pod != nil {
			// SyncTerminatingPod stores the status it read after the kill in the cache:
			// the terminated phase may use it rather than wait for the next relist.
			lastSync = started
		}
		if postSync != nil {
			postSync()
		}
		done := p.completeWork(uid, s, work, err)
		p.observeDuration(work, err)
		if done {
			return
		}
	}
}

// work is a snapshot of what a round must do.
type work struct {
	phase       PodWorkerState
	pod         *v1.Pod
	runningPod  *container.Pod
	updateType  SyncPodType
	gracePeriod *int64
	statusFn    func(*v1.PodStatus)
	// startTime is when the oldest update this round serves was made (or the previous
	// phase ended, for the next phase of a termination); zero when unknown.
	startTime time.Time
}

func (p *PodWorkers) startWork(uid types.UID, s *podState) (context.Context, work, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.finished {
		return nil, work{}, false
	}
	if s.ctx.Err() != nil {
		s.ctx, s.cancel = context.WithCancel(context.Background())
	}
	w := work{pod: s.pod, runningPod: s.runningPod, updateType: s.updateType, gracePeriod: s.gracePeriod, statusFn: s.statusFn, startTime: s.pendingSince}
	s.pendingSince = time.Time{}
	switch {
	case s.terminated:
		w.phase = TerminatedPod
	case s.terminating:
		w.phase = TerminatingPod
	case !p.staticMayStartLocked(uid, s):
		klog.V(4).InfoS("Static pod waits for the previous pod of its name to terminate", "pod", klog.KObj(s.pod), "podUID", uid)
		p.queue.Enqueue(uid, wait.Jitter(backOffPeriod, backOffJitterFactor))
		s.pendingSince = w.startTime
		return nil, work{}, false
	}
	s.working = true
	return s.ctx, w, true
}

// statusNewerThan waits until the pod cache holds a status read after the last sync, so
// a sync never acts on stale state (upstream's GetNewerThan).
func (p *PodWorkers) statusNewerThan(uid types.UID, w work, lastSync time.Time) (*container.PodStatus, error) {
	if w.pod == nil {
		return &container.PodStatus{ID: uid}, nil
	}
	return p.cache.GetNewerThan(uid, lastSync)
}

func (p *PodWorkers) runPhase(ctx context.Context, uid types.UID, s *podState, w work, status *container.PodStatus) (func(), error) {
	switch w.phase {
	case SyncPod:
		terminal, postSync, err := p.syncer.SyncPod(ctx, w.updateType, w.pod, status)
		if err == nil && terminal {
			p.mu.Lock()
			if !s.terminating {
				s.terminating, s.gracePeriod = true, gracePeriodFor(s.pod, nil)
			}
			p.mu.Unlock()
		}
		return postSync, err
	case TerminatingPod:
		var err error
		if w.pod == nil {
			err = p.syncer.SyncTerminatingRuntimePod(ctx, w.runningPod)
		} else {
			err = p.syncer.SyncTerminatingPod(ctx, w.pod, status, w.gracePeriod, w.statusFn)
		}
		if err == nil {
			p.mu.Lock()
			s.terminated = true
			p.mu.Unlock()
		}
		return nil, err
	default:
		if w.pod == nil {
			return nil, nil
		}
		return nil, p.syncer.SyncTerminatedPod(ctx, w.pod, status)
	}
}

// completeWork decides what comes next and reports whether the worker is done for good.
func (p *PodWorkers) completeWork(uid types.UID, s *podState, w work, err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.working = false
	switch {
	case err != nil && s.ctx.Err() != nil:
		// Cancelled for a more urgent update (termination): go again at once.
		p.notifyLocked(s)
	case errors.Is(err, ErrBackOffWait):
		p.queue.Enqueue(uid, retryBackOffPeriod)
	case err != nil:
		outage.ErrorS(err, "Error syncing pod, skipping", "pod", podName(w), "podUID", uid)
		p.queue.Enqueue(uid, wait.Jitter(backOffPeriod, backOffJitterFactor))
	case w.phase == TerminatedPod:
		s.finished = true
		p.releaseStaticLocked(uid, s)
		return true
	case s.terminating:
		// The next phase follows at once; its round is timed from here.
		if s.pendingSince.IsZero() {
			s.pendingSince = p.clock.Now()
		}
		p.notifyLocked(s)
	default:
		p.queue.Enqueue(uid, wait.Jitter(p.resyncInterval, resyncJitterFactor))
	}
	if p.workerDone != nil {
		p.workerDone(uid)
	}
	return false
}

// observeDuration records how long a round took from the update it served, as upstream:
// by update type, and "terminated" for the round that finished the pod.
func (p *PodWorkers) observeDuration(w work, err error) {
	if w.startTime.IsZero() {
		return
	}
	op := w.updateType.String()
	if w.phase == TerminatedPod && err == nil {
		op = "terminated"
	}
	metrics.PodWorkerDuration.WithLabelValues(op).Observe(p.clock.Since(w.startTime).Seconds())
}

func (p *PodWorkers) notifyLocked(s *podState) {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func podName(w work) string {
	if w.pod != nil {
		return w.pod.Namespace + "/" + w.pod.Name
	}
	if w.runningPod != nil {
		return w.runningPod.Namespace + "/" + w.runningPod.Name
	}
	return ""
}

// State reports a known pod's phase.
func (p *PodWorkers) State(uid types.UID) (PodWorkerState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.pods[uid]
	if !ok {
		return 0, false
	}
	return s.state(), true
}

func (s *podState) state() PodWorkerState {
	switch {
	case s.terminated:
		return TerminatedPod
	case s.terminating:
		return TerminatingPod
	default:
		return SyncPod
	}
}

// IsPodTerminationRequested reports a pod that is terminating or terminated.
func (p *PodWorkers) IsPodTerminationRequested(uid types.UID) bool {
	st, ok := p.State(uid)
	return ok && st != SyncPod
}

// IsPodKnownTerminated reports a pod whose containers are all stopped.
func (p *PodWorkers) IsPodKnownTerminated(uid types.UID) bool {
	st, ok := p.State(uid)
	return ok && st == TerminatedPod
}

// CouldHaveRunningContainers is false once a pod is known to be terminated, and for a pod
// without a worker (rejected by admission, say) once housekeeping has synced the known
// pods; before that an unknown pod may have containers left from a previous nodelet.
func (p *PodWorkers) CouldHaveRunningContainers(uid types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.pods[uid]; ok {
		return s.state() != TerminatedPod
	}
	return !p.podsSynced
}

// ShouldPodContentBeRemoved reports that a pod's directories and volumes may go: it is
// terminated and its worker finished, or nothing is known about it.
func (p *PodWorkers) ShouldPodContentBeRemoved(uid types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.pods[uid]
	return !ok || s.finished
}

// SyncKnownPods forgets finished workers of pods that are no longer desired or were
// created again with the same UID (the caller starts those afresh: they are left out of
// the result), drives the other workers of pods no longer desired to termination, and
// returns the state of every pod still known.
func (p *PodWorkers) SyncKnownPods(desired []*v1.Pod) map[types.UID]PodWorkerState {
	want := make(map[types.UID]bool, len(desired))
	for _, pod := range desired {
		want[pod.UID] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.podsSynced = true
	out := map[types.UID]PodWorkerState{}
	for uid, s := range p.pods {
		orphan := !want[uid]
		if s.finished && (orphan || s.restartRequested) {
			delete(p.pods, uid)
			continue
		}
		if orphan && !s.finished {
			p.terminateOrphanLocked(uid, s)
		}
		out[uid] = s.state()
	}
	return out
}

// WorkingPods describes every known worker for kubelet_working_pods: its phase, whether
// desired (a UID in desired) or orphaned, whether it has the pod's spec or only the
// runtime's pod, and whether the pod is static.
func (p *PodWorkers) WorkingPods(desired map[types.UID]bool) []metrics.WorkingPod {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]metrics.WorkingPod, 0, len(p.pods))
	for uid, s := range p.pods {
		w := metrics.WorkingPod{Lifecycle: s.state().String(), Orphan: !desired[uid], HasConfig: s.pod != nil}
		if s.pod != nil {
			w.Static = kubetypes.IsStaticPod(s.pod)
		}
		out = append(out, w)
	}
	return out
}

// terminateOrphanLocked makes sure a pod no source wants is being torn down and wakes its
// idle worker: the sync ticker only resyncs desired pods, so a failed kill or cleanup of a
// removed pod is retried from here (as upstream's housekeeping does).
func (p *PodWorkers) terminateOrphanLocked(uid types.UID, s *podState) {
	if !s.terminating {
		klog.V(2).InfoS("Pod is no longer desired, terminating", "podUID", uid)
		s.terminating, s.gracePeriod = true, gracePeriodFor(s.pod, nil)
		s.cancel()
	}
	if !s.working {
		p.notifyLocked(s)
	}
}
