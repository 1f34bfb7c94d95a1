package kubelet

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/pod/pleg"
	"github.com/nodelet/nodelet/pkg/pod/podworkers"
	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/pod/sources"
)

type podUpdate = sources.PodUpdate

const (
	syncTickPeriod       = time.Second
	runtimeBackOffStart  = 100 * time.Millisecond
	runtimeBackOffLimit  = 5 * time.Second
	plegUnhealthyMessage = "PLEG is not healthy"
)

// syncLoop is the kubelet's main loop (upstream's syncLoop): while the runtime is down it
// backs off from 100 ms to 5 s; otherwise it serves one event at a time. The outage gate
// logs the outage (upstream logs "Skipping pod synchronization" on every back-off step).
func (k *Kubelet) syncLoop(ctx context.Context, updates <-chan podUpdate) {
	klog.InfoS("Starting kubelet main sync loop")
	syncTicker := k.deps.Clock.NewTicker(syncTickPeriod)
	defer syncTicker.Stop()
	housekeeping := k.deps.Clock.NewTicker(k.cfg.HousekeepingPeriod)
	defer housekeeping.Stop()
	delay := runtimeBackOffStart
	runtimeDown := false
	for ctx.Err() == nil {
		if err := k.deps.RuntimeState.RuntimeErr(); err != nil {
			if !runtimeDown {
				klog.V(2).InfoS("Skipping pod synchronization", "err", err)
				runtimeDown = true
			}
			select {
			case <-ctx.Done():
				return
			case <-k.deps.Clock.After(delay):
			}
			delay = min(2*delay, runtimeBackOffLimit)
			continue
		}
		if runtimeDown {
			klog.V(2).InfoS("Resuming pod synchronization")
			runtimeDown = false
		}
		delay = runtimeBackOffStart
		k.loopEntered.Store(k.deps.Clock.Now().UnixNano())
		if !k.syncLoopIteration(ctx, updates, syncTicker.C(), housekeeping.C()) {
			return
		}
		k.loopEntered.Store(k.deps.Clock.Now().UnixNano())
	}
}

// syncLoopIteration waits for one event and hands it to its handler. It returns false when
// the updates channel has closed: a closed channel is always ready, so going on would spin.
func (k *Kubelet) syncLoopIteration(ctx context.Context, updates <-chan podUpdate, syncCh, housekeepingCh <-chan time.Time) bool {
	select {
	case <-ctx.Done():
	case u, ok := <-updates:
		if !ok {
			klog.ErrorS(nil, "Update channel is closed, exiting the sync loop")
			return false
		}
		k.handleConfigUpdate(u)
	case e := <-k.deps.PLEGEvents:
		k.handlePLEGEvent(e)
	case <-syncCh:
		k.handlePodSyncs(k.podsToSync())
	case u := <-k.deps.Liveness.Updates():
		if u.Result == results.Failure {
			k.handleProbeSync(u, "liveness", "unhealthy")
		}
	case u := <-k.deps.Readiness.Updates():
		k.deps.Status.SetContainerReadiness(u.PodUID, u.ContainerID, u.Result == results.Success)
		k.observeStartup(u.PodUID)
		k.handleProbeSync(u, "readiness", resultWord(u.Result))
	case u := <-k.deps.Startup.Updates():
		k.deps.Status.SetContainerStartup(u.PodUID, u.ContainerID, u.Result == results.Success)
		k.handleProbeSync(u, "startup", resultWord(u.Result))
	case uids := <-k.resourceHealthUpdates():
		k.handleResourceHealthSync(uids)
	case <-housekeepingCh:
		k.housekeeper.run(ctx)
	}
	return true
}

// resourceHealthUpdates is nil (never ready) without device health reports.
func (k *Kubelet) resourceHealthUpdates() <-chan []types.UID {
	if k.deps.ResourceHealth == nil {
		return nil
	}
	return k.deps.ResourceHealth.Updates()
}

// handleResourceHealthSync syncs the pods whose devices' health changed, so that their
// status reports it (upstream's containerManager.Updates case).
func (k *Kubelet) handleResourceHealthSync(uids []types.UID) {
	var pods []*v1.Pod
	for _, uid := range uids {
		if pod, ok := k.pods.GetPodByUID(uid); ok {
			pods = append(pods, pod)
		}
	}
	if len(pods) > 0 {
		klog.V(2).InfoS("SyncLoop (containermanager): event for pods", "pods", klog.KObjSlice(pods))
		k.handlePodSyncs(pods)
	}
}

func resultWord(r results.Result) string {
	if r == results.Success {
		return "ready"
	}
	return "not ready"
}

func (k *Kubelet) handleConfigUpdate(u podUpdate) {
	klog.V(2).InfoS("SyncLoop update", "source", u.Source, "op", u.Op, "pods", len(u.Pods))
	switch u.Op {
	case sources.ADD:
		k.handlePodAdditions(u.Pods)
	case sources.UPDATE, sources.DELETE:
		k.handlePodUpdates(u.Pods)
	case sources.REMOVE:
		k.handlePodRemoves(u.Pods)
	case sources.RECONCILE:
		k.handlePodReconcile(u.Pods)
	}
	k.sourcesSeen.add(u.Source)
	if u.Source == kubetypes.APIServerSource {
		// The API pods' start-up SLI ends when their running status comes back here.
		now := k.deps.Clock.Now()
		for _, pod := range u.Pods {
			k.startup.ObservedOnWatch(pod, now)
		}
	}
}

// handlePLEGEvent syncs the pod a runtime event is about; removal events need no sync.
func (k *Kubelet) handlePLEGEvent(e *pleg.PodLifecycleEvent) {
	if e.Type == pleg.ContainerRemoved {
		return
	}
	if pod, ok := k.pods.GetPodByUID(e.ID); ok {
		klog.V(4).InfoS("SyncLoop (PLEG): event for pod", "pod", klog.KObj(pod), "event", e.Type)
		k.handlePodSyncs([]*v1.Pod{pod})
	}
}

func (k *Kubelet) handleProbeSync(u results.Update, probe, word string) {
	pod, ok := k.pods.GetPodByUID(u.PodUID)
	if !ok {
		return
	}
	klog.V(1).InfoS("SyncLoop (probe)", "probe", probe, "status", word, "pod", klog.KObj(pod))
	k.handlePodSyncs([]*v1.Pod{pod})
}

// podsToSync are the pods whose resync time has come and those past their active deadline
// (upstream's getPodsToSync with its PodSyncLoopHandlers).
func (k *Kubelet) podsToSync() []*v1.Pod {
	due := map[types.UID]bool{}
	for _, uid := range k.workQueue.GetWork() {
		due[uid] = true
	}
	var pods []*v1.Pod
	for _, pod := range k.pods.GetPods() {
		if due[pod.UID] || (k.deadlines.pastDeadline(pod) && !k.workers.IsPodTerminationRequested(pod.UID)) {
			pods = append(pods, pod)
		}
	}
	return pods
}

func (k *Kubelet) handlePodSyncs(pods []*v1.Pod) {
	for _, pod := range pods {
		k.dispatch(pod, podworkers.SyncPodSync)
	}
}
