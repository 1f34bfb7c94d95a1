package pleg

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/outage"
	"github.com/nodelet/nodelet/pkg/pod/podcache"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// GenericPLEG finds changes by listing every pod in the runtime each RelistPeriod and
// comparing each container's state with the previous listing. Only pods that changed are
// inspected (GetPodStatus) and written to the cache.
//
// A container created, finished and removed within one period leaves no trace, so no
// event; the kubelet's periodic sync is the safety net for such misses.
type GenericPLEG struct {
	runtime      container.Runtime
	eventChannel chan *PodLifecycleEvent
	cache        podcache.Cache
	clock        clock.Clock

	// relistMu serialises relists; it guards records and podsToReinspect.
	relistMu sync.Mutex
	records  podRecords
	// podsToReinspect failed inspection in the last relist and are inspected again in the
	// next one even if nothing changed.
	podsToReinspect map[types.UID]*container.Pod
	// podRelisted is when each pod's last one-pod relist started, since the last full
	// relist: a request made before that has been served (an evented PLEG asks once per
	// container event, and a pod's events come in bursts).
	podRelisted map[types.UID]time.Time
	// allListedAt is when the last listing of all pods started (zero: none yet).
	allListedAt time.Time

	// podCacheMu serialises inspections, so relists and UpdateCache calls reach the cache in
	// the order their timestamps were taken.
	podCacheMu sync.Mutex

	// lastRelist is when the last successful relist started (zero before the first one).
	lastRelist atomic.Pointer[time.Time]

	// runMu guards durations, restarted and stopCh.
	runMu     sync.Mutex
	durations RelistDuration
	// restarted is when the loop last (re)started: Healthy does not hold the time before
	// against new settings (an evented PLEG shortening the threshold on fallback).
	restarted time.Time
	stopCh    chan struct{} // nil while stopped

	// askMu guards asked, the work asked for out of turn (see ondemand.go), and serving,
	// set while the loop does work it took from asked; a value on wake tells the loop
	// there is some. It is taken after relistMu when both are.
	askMu   sync.Mutex
	asked   askedWork
	serving bool
	wake    chan struct{}
}

// NewGenericPLEG returns a relisting PLEG that writes statuses into cache and events into
// eventChannel (make it ChannelCapacity big). A nil relistDuration means
// DefaultRelistDuration.
func NewGenericPLEG(runtime container.Runtime, eventChannel chan *PodLifecycleEvent,
	relistDuration *RelistDuration, cache podcache.Cache, clock clock.Clock) PodLifecycleEventGenerator {
	if cache == nil {
		panic("pleg: the pod cache must not be nil")
	}
	if relistDuration == nil {
		relistDuration = DefaultRelistDuration()
	}
	return &GenericPLEG{
		runtime:      runtime,
		eventChannel: eventChannel,
		cache:        cache,
		clock:        clock,
		records:      podRecords{},
		podRelisted:  map[types.UID]time.Time{},
		durations:    *relistDuration,
		wake:         make(chan struct{}, 1),
	}
}

// Watch returns the event channel. There is one subscriber: the kubelet loop.
func (g *GenericPLEG) Watch() chan *PodLifecycleEvent { return g.eventChannel }

// Start relists now and then every RelistPeriod after the previous relist ends, until Stop.
func (g *GenericPLEG) Start() {
	g.runMu.Lock()
	defer g.runMu.Unlock()
	if g.stopCh != nil {
		return
	}
	g.startLocked(true)
}

// startLocked starts the loop, relisting at once or only after a period.
func (g *GenericPLEG) startLocked(relistNow bool) {
	g.stopCh = make(chan struct{})
	g.restarted = g.clock.Now()
	go g.relistUntil(g.durations.RelistPeriod, relistNow, g.stopCh)
}

// Stop ends the relist loop; a relist in progress finishes.
func (g *GenericPLEG) Stop() {
	g.runMu.Lock()
	defer g.runMu.Unlock()
	if g.stopCh != nil {
		close(g.stopCh)
		g.stopCh = nil
	}
}

// Update changes the relist settings. A new period applies from the next Start.
func (g *GenericPLEG) Update(relistDuration *RelistDuration) {
	g.runMu.Lock()
	defer g.runMu.Unlock()
	g.durations = *relistDuration
}

// switchDuration changes the relist settings at once: a running loop is restarted, and
// relists now when relistNow is set, else after the new period.
func (g *GenericPLEG) switchDuration(relistDuration *RelistDuration, relistNow bool) {
	g.runMu.Lock()
	defer g.runMu.Unlock()
	g.durations = *relistDuration
	if g.stopCh != nil {
		close(g.stopCh)
		g.startLocked(relistNow)
	}
}

// relistPeriod is the current pause between full relists.
func (g *GenericPLEG) relistPeriod() time.Duration {
	g.runMu.Lock()
	defer g.runMu.Unlock()
	return g.durations.RelistPeriod
}

// relistUntil relists every period (the first time at once when relistNow is set), and
// does what is asked for out of turn in between.
func (g *GenericPLEG) relistUntil(period time.Duration, relistNow bool, stop <-chan struct{}) {
	if !relistNow && !g.serveAskedUntil(g.clock.NewTimer(period), stop) {
		return
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		g.Relist()
		if !g.serveAskedUntil(g.clock.NewTimer(period), stop) {
			return
		}
	}
}

// serveAskedUntil does the work asked for out of turn until the timer fires (true) or
// stop closes (false).
func (g *GenericPLEG) serveAskedUntil(t clock.Timer, stop <-chan struct{}) bool {
	for {
		select {
		case <-stop:
			t.Stop()
			return false
		case <-t.C():
			return true
		case <-g.wake:
			g.serveAsked()
		}
	}
}

// Healthy reports false when no relist has succeeded within RelistThreshold: the runtime
// is hanging or the PLEG is stuck, and the node should not take pods. After the loop
// restarts with new settings, the time is counted from the restart.
func (g *GenericPLEG) Healthy() (bool, error) {
	last := g.lastRelistTime()
	if last.IsZero() {
		return false, errors.New("pleg has yet to be successful")
	}
	g.runMu.Lock()
	threshold := g.durations.RelistThreshold
	if g.restarted.After(last) {
		last = g.restarted
	}
	g.runMu.Unlock()
	if elapsed := g.clock.Since(last); elapsed > threshold {
		return false, fmt.Errorf("pleg was last seen active %v ago; threshold is %v", elapsed, threshold)
	}
	return true, nil
}

func (g *GenericPLEG) lastRelistTime() time.Time {
	if t := g.lastRelist.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// Relist lists the runtime's pods, sends events for the containers whose state changed
// and refreshes the cache for the pods they belong to. While the runtime is known to be
// down it does nothing: every call would fail, and the first relist after the outage
// catches up.
func (g *GenericPLEG) Relist() {
	g.relistMu.Lock()
	defer g.relistMu.Unlock()
	ctx := context.Background()
	if outage.Down() {
		klog.V(5).InfoS("GenericPLEG: Runtime is down, not relisting")
		return
	}
	klog.V(5).InfoS("GenericPLEG: Relisting")

	if last := g.lastRelistTime(); !last.IsZero() {
		metrics.PLEGRelistInterval.Observe(g.clock.Since(last).Seconds())
	}
	timestamp := g.clock.Now()
	defer func() { metrics.PLEGRelistDuration.Observe(g.clock.Since(timestamp).Seconds()) }()

	pods, err := g.runtime.GetPods(ctx, true)
	if err != nil {
		outage.ErrorS(err, "GenericPLEG: Unable to retrieve pods")
		return
	}
	g.lastRelist.Store(&timestamp)
	g.allListedAt = timestamp
	// Exposed so one can alert on time() - kubelet_pleg_last_seen_seconds. Upstream sets
	// it when its health is checked, on every loop iteration; nodelet checks health only
	// for the node's Ready condition, so it is set here.
	metrics.PLEGLastSeen.Set(float64(timestamp.Unix()))
	recordRunning(pods)
	g.records.setCurrent(pods)

	failed := map[types.UID]*container.Pod{}
	for uid := range g.records {
		if pod, ok := g.relistPod(ctx, uid, timestamp); !ok {
			failed[uid] = pod
		}
	}
	// Only now is every change up to timestamp in the cache; pods waiting in GetNewerThan
	// for a status newer than their last sync can go.
	g.cache.UpdateTime(timestamp)
	g.podsToReinspect = failed
	// Requests from before timestamp are served by this relist.
	clear(g.podRelisted)
}

// relistPod handles one pod of a relist whose listing started at listed. It returns false,
// with the pod as listed, when the pod's status could not be read: its record is then
// kept as it was, so the same change is found and its events sent by the next relist.
func (g *GenericPLEG) relistPod(ctx context.Context, uid types.UID, listed time.Time) (*container.Pod, bool) {
	old, current := g.records.old(uid), g.records.current(uid)
	events := podEvents(uid, old, current)
	_, reinspect := g.podsToReinspect[uid]
	if len(events) == 0 && !reinspect {
		g.records.update(uid) // nothing to do; also forgets a pod that listed empty and left
		return nil, true
	}
	status, _, err := g.updateCache(ctx, current, uid, listed)
	if err != nil {
		klog.V(4).ErrorS(err, "PLEG: Ignoring events for pod", "pod", podRef(current, uid))
		return current, false
	}
	g.records.update(uid)
	g.send(events, status)
	return nil, true
}

// send delivers events without blocking: a relist must not stall behind a busy kubelet
// loop, and the periodic sync catches what is dropped.
func (g *GenericPLEG) send(events []*PodLifecycleEvent, status *container.PodStatus) {
	for _, e := range events {
		if e.Type == ContainerChanged {
			continue
		}
		select {
		case g.eventChannel <- e:
		default:
			metrics.PLEGDiscardEvents.Inc()
			klog.ErrorS(nil, "Event channel is full, discard this relist() cycle event")
		}
		if e.Type == ContainerDied {
			logExitCode(e, status)
		}
	}
}

func logExitCode(e *PodLifecycleEvent, status *container.PodStatus) {
	if status == nil {
		return
	}
	id, _ := e.Data.(string)
	for _, c := range status.ContainerStatuses {
		if c.ID.ID == id {
			klog.V(2).InfoS("Generic (PLEG): container finished", "podID", e.ID, "containerID", id, "exitCode", c.ExitCode)
			return
		}
	}
}

// UpdateCache reads the pod's status now and stores it, for a pod worker that must see its
// own changes before the next relist. The (error, bool) order is upstream's.
func (g *GenericPLEG) UpdateCache(pod *container.Pod, pid types.UID) (error, bool) {
	if pod == nil {
		return errors.New("pod cannot be nil"), false
	}
	_, updated, err := g.updateCache(context.Background(), pod, pid, time.Time{})
	return err, updated
}

// updateCache inspects the pod and stores its status (or the error) in the cache, which
// then reports whether it took it. A pod gone from the listing is dropped from the cache.
// A relist (listed: when its listing started) reads the statuses of what it listed; a
// pod worker's UpdateCache (listed zero) lists the pod afresh.
func (g *GenericPLEG) updateCache(ctx context.Context, pod *container.Pod, uid types.UID, listed time.Time) (*container.PodStatus, bool, error) {
	if pod == nil {
		klog.V(4).InfoS("PLEG: Delete status for pod", "podUID", uid)
		g.cache.Delete(uid)
		return nil, true, nil
	}
	g.podCacheMu.Lock()
	defer g.podCacheMu.Unlock()
	// The status is at least as fresh as the listing it is read for, or as the read.
	var status *container.PodStatus
	var err error
	timestamp := listed
	if timestamp.IsZero() {
		timestamp = g.clock.Now()
		status, err = g.runtime.GetPodStatus(ctx, pod.ID, pod.Name, pod.Namespace)
	} else {
		status, err = g.runtime.GetPodStatusOf(ctx, pod)
	}
	if err == nil && status == nil {
		err = errors.New("runtime returned no pod status")
	}
	if err != nil {
		outage.ErrorS(err, "PLEG: Write status", "pod", podRef(pod, uid))
	} else {
		klog.V(4).InfoS("PLEG: Write status", "pod", podRef(pod, uid))
		status.IPs = g.keepPodIPs(uid, status)
	}
	return status, g.cache.Set(pod.ID, status, err, timestamp), err
}

// keepPodIPs returns the IPs to store for a freshly read status. A pod whose sandboxes have
// all exited has lost its network, yet the API must go on showing the finished pod's IPs,
// so they are carried over from the cached status.
func (g *GenericPLEG) keepPodIPs(uid types.UID, status *container.PodStatus) []string {
	if len(status.IPs) != 0 {
		return status.IPs
	}
	for _, sb := range status.SandboxStatuses {
		if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			return nil
		}
	}
	old, err := g.cache.Get(uid)
	if err != nil || old == nil {
		return nil
	}
	return old.IPs
}

func podRef(pod *container.Pod, uid types.UID) klog.ObjectRef {
	if pod == nil {
		return klog.ObjectRef{Name: string(uid)}
	}
	return klog.KRef(pod.Namespace, pod.Name)
}
