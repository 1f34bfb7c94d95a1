package kubelet

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/outage"
	"github.com/nodelet/nodelet/pkg/pod/pleg"
	"github.com/nodelet/nodelet/pkg/pod/podworkers"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// housekeeper removes what belongs to pods nobody wants any more (upstream's
// HandlePodCleanups). It never acts before every source has been seen once, so a
// restarted nodelet does not kill pods its sources simply have not listed yet.
type housekeeper struct {
	k          *Kubelet
	warnedOnce bool
	// podCgroups and podDirs are the pods that may have a pod cgroup or a pod directory
	// (SyncPod notes each pod before it creates them).
	podCgroups, podDirs *leftovers
}

func newHousekeeper(k *Kubelet) *housekeeper {
	return &housekeeper{k: k, podCgroups: newLeftovers(), podDirs: newLeftovers()}
}

// noteSynced notes a pod whose sync may create its cgroup and directory.
func (h *housekeeper) noteSynced(uid types.UID) {
	h.podCgroups.noteSynced(uid)
	h.podDirs.noteSynced(uid)
}

// inUse reports whether a pod's cgroup, directory and user namespace must stay: it is
// desired, or its worker has not finished with it.
func (h *housekeeper) inUse(desired map[types.UID]bool) func(types.UID) bool {
	return func(uid types.UID) bool { return desired[uid] || !h.k.workers.ShouldPodContentBeRemoved(uid) }
}

func (h *housekeeper) run(ctx context.Context) {
	if !h.k.sourcesReady() {
		if !h.warnedOnce {
			klog.V(2).InfoS("Skipping housekeeping until all pod sources are ready")
			h.warnedOnce = true
		}
		return
	}
	start := time.Now()
	desired := h.k.pods.GetPods()
	desiredUIDs := map[types.UID]bool{}
	probed := map[types.UID]sets.Empty{}
	for _, p := range desired {
		desiredUIDs[p.UID] = true
		probed[p.UID] = sets.Empty{}
	}
	h.k.deps.Prober.CleanupPods(probed)
	h.k.startup.Retain(desiredUIDs)
	known := h.k.workers.SyncKnownPods(desired)
	h.k.recordPodCounts(desired)
	h.restartRecreatedPods(desired, known)
	running, err := h.runningPods(ctx)
	if err != nil {
		outage.ErrorS(err, "Housekeeping: listing running pods failed")
	} else {
		h.killOrphans(running, known)
	}
	// The workers now include the pods just restarted and the orphans just found.
	metrics.RecordWorkingPods(h.k.workers.WorkingPods(desiredUIDs))
	h.k.deleteOrphanedMirrorPods(ctx)
	h.k.deps.Status.RemoveOrphanedStatuses(desiredUIDs)
	h.k.allocation.RemoveOrphanedPods(desiredUIDs)
	h.k.resizes.Retain(desiredUIDs)
	h.k.allocation.RetryIfDue()
	h.removeOrphanedDirs(desiredUIDs)
	if err == nil {
		h.removeOrphanedCgroups(running, desiredUIDs)
	}
	// Forget back-off entries that have not been touched for a while, so a container
	// that ran well starts its next crash loop from the initial delay again.
	h.k.backOff.GC()
	klog.V(4).InfoS("Housekeeping done", "duration", time.Since(start))
}

// restartRecreatedPods starts a worker for every admitted pod that has none: its UID was
// removed and added again (static pods reuse UIDs) while the old pod was torn down, and
// the pod workers forgot the old pod. The old pod's status goes first, so that the new
// pod does not inherit its terminal phase.
func (h *housekeeper) restartRecreatedPods(desired []*v1.Pod, known map[types.UID]podworkers.PodWorkerState) {
	var restart []*v1.Pod
	keepStatus := map[types.UID]bool{}
	for _, pod := range desired {
		if _, ok := known[pod.UID]; ok || h.k.rejected.Has(pod.UID) {
			keepStatus[pod.UID] = true
			continue
		}
		restart = append(restart, pod)
	}
	if len(restart) == 0 {
		return
	}
	h.k.deps.Status.RemoveOrphanedStatuses(keepStatus)
	for _, pod := range restart {
		klog.V(3).InfoS("Pod will be restarted because it is in the desired set and not known to the pod workers (likely due to UID reuse)", "pod", klog.KObj(pod), "podUID", pod.UID)
		h.k.startup.Start(pod)
		h.k.dispatch(pod, podworkers.SyncPodCreate)
		known[pod.UID] = podworkers.SyncPod
		metrics.RestartedPodTotal.WithLabelValues(metrics.StaticLabel(kubetypes.IsStaticPod(pod))).Inc()
	}
}

// runningPods lists the runtime's running pods once per housekeeping, for both the
// orphaned pods and the orphaned cgroups (upstream reads its runtime cache, up to two
// seconds old, then lists again for the cgroups). A PLEG that has listed within that
// period, or that follows the runtime's events, answers instead of a new listing: with
// 100 pods a listing is two CRI calls with 100 items each, every two seconds.
func (h *housekeeper) runningPods(ctx context.Context) ([]*container.Pod, error) {
	if src, ok := h.k.deps.PLEG.(pleg.RunningPodsSource); ok {
		if pods, ok := src.RunningPods(); ok {
			return pods, nil
		}
	}
	return h.k.deps.Runtime.GetPods(ctx, false)
}

// killOrphans stops runtime pods that no worker owns: left over from a previous nodelet,
// removed while nodelet was down, or rejected by admission this time. Every admitted
// desired pod has a worker by now.
func (h *housekeeper) killOrphans(running []*container.Pod, known map[types.UID]podworkers.PodWorkerState) {
	for _, rp := range running {
		if _, owned := known[rp.ID]; owned {
			continue
		}
		h.k.workers.UpdatePod(podworkers.UpdatePodOptions{RunningPod: rp, UpdateType: podworkers.SyncPodKill, StartTime: time.Now()})
		metrics.OrphanedRuntimePodTotal.Inc()
	}
}

// removeOrphanedDirs deletes pod directories of pods that are neither desired nor still
// being torn down, then frees the user namespaces of such pods (whose IDs are kept in
// their directories). It lists the directories only when one may be an orphan (see
// leftovers); otherwise the sweep cleaned nothing, and the gauges say so, as upstream's
// would.
func (h *housekeeper) removeOrphanedDirs(desired map[types.UID]bool) {
	inUse := h.inUse(desired)
	now := h.k.deps.Clock.Now()
	if !h.podDirs.scanDue(now, inUse) {
		metrics.OrphanPodCleanedVolumes.Set(0)
		metrics.OrphanPodCleanedVolumesErrors.Set(0)
		return
	}
	h.podDirs.beginScan()
	uids, err := h.k.deps.Volumes.PodDirs()
	if err != nil {
		klog.ErrorS(err, "Housekeeping: listing pod directories failed")
		h.podDirs.abortScan()
		return
	}
	remaining := map[types.UID]bool{}
	cleaned, failed := 0, 0
	for _, uid := range uids {
		remaining[uid] = true
		if inUse(uid) {
			continue
		}
		if err := h.k.deps.Volumes.CleanupPod(uid); err != nil {
			klog.ErrorS(err, "Housekeeping: removing pod directory failed", "podUID", uid)
			failed++
			continue
		}
		delete(remaining, uid)
		cleaned++
	}
	metrics.OrphanPodCleanedVolumes.Set(float64(cleaned))
	metrics.OrphanPodCleanedVolumesErrors.Set(float64(failed))
	h.releaseOrphanedUserNamespaces(inUse)
	h.podDirs.endScan(now, remaining)
}

// removeOrphanedCgroups deletes pod cgroups of pods that are not desired and have nothing
// running in the runtime. It lists the cgroup hierarchies only when a pod that may have
// a cgroup is no longer in use (see leftovers).
func (h *housekeeper) removeOrphanedCgroups(running []*container.Pod, desired map[types.UID]bool) {
	inUse := h.inUse(desired)
	now := h.k.deps.Clock.Now()
	if !h.podCgroups.scanDue(now, inUse) {
		return
	}
	h.podCgroups.beginScan()
	cgroups := h.k.deps.Cgroups.Pods()
	busy := map[types.UID]bool{}
	for _, rp := range running {
		busy[rp.ID] = true
	}
	for uid := range cgroups {
		if inUse(uid) || busy[uid] {
			continue
		}
		if err := h.k.deps.Cgroups.Remove(uid); err != nil {
			klog.V(2).InfoS("Housekeeping: pod cgroup not removed yet", "podUID", uid, "err", err)
			continue
		}
		delete(cgroups, uid)
	}
	h.podCgroups.endScan(now, cgroups)
}

// garbageCollect runs container GC; pods are "deleted" for GC once no source wants them
// and their worker is done. It waits out a runtime outage.
func (k *Kubelet) garbageCollect(ctx context.Context) {
	if outage.Down() {
		return
	}
	if err := k.deps.Runtime.GarbageCollect(ctx, k.cfg.GCPolicy, k.sourcesReady(), false); err != nil {
		outage.ErrorS(err, "Container garbage collection failed")
	}
}

// IsPodDeleted tells the garbage collector that a pod's containers may all go.
func (k *Kubelet) IsPodDeleted(uid types.UID) bool {
	_, desired := k.pods.GetPodByUID(uid)
	return !desired && k.workers.ShouldPodContentBeRemoved(uid)
}

// IsPodTerminated tells the garbage collector that a pod's containers are all stopped.
func (k *Kubelet) IsPodTerminated(uid types.UID) bool {
	if k.IsPodDeleted(uid) {
		return true
	}
	phase, ok := k.deps.Status.GetPodPhase(uid)
	return ok && isTerminalPhase(phase)
}

// recordPodCounts sets the gauges of desired, active and mirror pods and of ephemeral
// containers (upstream's HandlePodCleanups and pod manager), by static label.
func (k *Kubelet) recordPodCounts(desired []*v1.Pod) {
	desiredN, activeN := map[string]int{"": 0, "true": 0}, map[string]int{"": 0, "true": 0}
	mirrors, ephemeral := len(k.pods.GetOrphanedMirrorPodNames()), 0
	for _, pod := range desired {
		static := kubetypes.IsStaticPod(pod)
		desiredN[metrics.StaticLabel(static)]++
		ephemeral += len(pod.Spec.EphemeralContainers)
		if _, ok := k.pods.GetMirrorPodByPod(pod); ok && static {
			mirrors++
		}
	}
	for _, pod := range desired {
		if k.isActive(pod) {
			activeN[metrics.StaticLabel(kubetypes.IsStaticPod(pod))]++
		}
	}
	for static, n := range desiredN {
		metrics.DesiredPodCount.WithLabelValues(static).Set(float64(n))
		metrics.ActivePodCount.WithLabelValues(static).Set(float64(activeN[static]))
	}
	metrics.MirrorPodCount.Set(float64(mirrors))
	metrics.ManagedEphemeralContainers.Set(float64(ephemeral))
}

// releaseOrphanedUserNamespaces frees the ID blocks of pods that are neither desired nor
// still being torn down.
func (h *housekeeper) releaseOrphanedUserNamespaces(inUse func(types.UID) bool) {
	if h.k.deps.UserNamespaces == nil {
		return
	}
	if err := h.k.deps.UserNamespaces.CleanupOrphaned(inUse); err != nil {
		klog.ErrorS(err, "Housekeeping: releasing orphaned user namespaces failed")
	}
}
