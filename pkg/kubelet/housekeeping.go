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
	"github.com/nodelet/nodelet/pkg/podworkers"
)

// housekeeper removes what belongs to pods nobody wants any more (upstream's
// HandlePodCleanups). It never acts before every source has been seen once, so a
// restarted nodelet does not kill pods its sources simply have not listed yet.
type housekeeper struct {
	k          *Kubelet
	warnedOnce bool
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
	h.killOrphans(ctx, known)
	h.k.deleteOrphanedMirrorPods(ctx)
	h.k.deps.Status.RemoveOrphanedStatuses(desiredUIDs)
	h.k.allocation.RemoveOrphanedPods(desiredUIDs)
	h.k.resizes.Retain(desiredUIDs)
	h.k.allocation.RetryIfDue()
	h.removeOrphanedDirs(desiredUIDs)
	h.removeOrphanedCgroups(ctx, desiredUIDs)
	h.releaseOrphanedUserNamespaces(desiredUIDs)
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

// killOrphans stops runtime pods that no worker owns: left over from a previous nodelet,
// removed while nodelet was down, or rejected by admission this time. Every admitted
// desired pod has a worker by now.
func (h *housekeeper) killOrphans(ctx context.Context, known map[types.UID]podworkers.PodWorkerState) {
	running, err := h.k.deps.Runtime.GetPods(ctx, false)
	if err != nil {
		outage.ErrorS(err, "Housekeeping: listing running pods failed")
		return
	}
	for _, rp := range running {
		if _, owned := known[rp.ID]; owned {
			continue
		}
		h.k.workers.UpdatePod(podworkers.UpdatePodOptions{RunningPod: rp, UpdateType: podworkers.SyncPodKill, StartTime: time.Now()})
		metrics.OrphanedRuntimePodTotal.Inc()
	}
}

// removeOrphanedDirs deletes pod directories of pods that are neither desired nor still
// being torn down.
func (h *housekeeper) removeOrphanedDirs(desired map[types.UID]bool) {
	uids, err := h.k.deps.Volumes.PodDirs()
	if err != nil {
		klog.ErrorS(err, "Housekeeping: listing pod directories failed")
		return
	}
	cleaned, failed := 0, 0
	for _, uid := range uids {
		if desired[uid] || !h.k.workers.ShouldPodContentBeRemoved(uid) {
			continue
		}
		if err := h.k.deps.Volumes.CleanupPod(uid); err != nil {
			klog.ErrorS(err, "Housekeeping: removing pod directory failed", "podUID", uid)
			failed++
			continue
		}
		cleaned++
	}
	metrics.OrphanPodCleanedVolumes.Set(float64(cleaned))
	metrics.OrphanPodCleanedVolumesErrors.Set(float64(failed))
}

// removeOrphanedCgroups deletes pod cgroups of pods that are not desired and have nothing
// running in the runtime.
func (h *housekeeper) removeOrphanedCgroups(ctx context.Context, desired map[types.UID]bool) {
	cgroups := h.k.deps.Cgroups.Pods()
	if len(cgroups) == 0 {
		return
	}
	running, err := h.k.deps.Runtime.GetPods(ctx, false)
	if err != nil {
		return
	}
	busy := map[types.UID]bool{}
	for _, rp := range running {
		busy[rp.ID] = true
	}
	for uid := range cgroups {
		if desired[uid] || busy[uid] || !h.k.workers.ShouldPodContentBeRemoved(uid) {
			continue
		}
		if err := h.k.deps.Cgroups.Remove(uid); err != nil {
			klog.V(2).InfoS("Housekeeping: pod cgroup not removed yet", "podUID", uid, "err", err)
		}
	}
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
	st, ok := k.deps.Status.GetPodStatus(uid)
	return ok && isTerminalPhase(st.Phase)
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
	for _, pod := range k.activePods(nil) {
		activeN[metrics.StaticLabel(kubetypes.IsStaticPod(pod))]++
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
func (h *housekeeper) releaseOrphanedUserNamespaces(desired map[types.UID]bool) {
	if h.k.deps.UserNamespaces == nil {
		return
	}
	inUse := func(uid types.UID) bool { return desired[uid] || !h.k.workers.ShouldPodContentBeRemoved(uid) }
	if err := h.k.deps.UserNamespaces.CleanupOrphaned(inUse); err != nil {
		klog.ErrorS(err, "Housekeeping: releasing orphaned user namespaces failed")
	}
}
