package kubelet

import (
	"sort"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/metrics/podstartup"
	"github.com/nodelet/nodelet/pkg/pod/allocation"
	"github.com/nodelet/nodelet/pkg/pod/podworkers"
	"github.com/nodelet/nodelet/pkg/pod/status"
)

// handlePodAdditions admits new pods, oldest first, and starts their workers. A mirror pod
// is not run: its static pod is synced, which keeps the mirror in line.
func (k *Kubelet) handlePodAdditions(pods []*v1.Pod) {
	sort.Slice(pods, func(i, j int) bool { return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp) })
	var pendingResizes []types.UID
	defer func() { k.resumeResizes(pods, pendingResizes) }()
	for _, pod := range pods {
		k.pods.AddPod(pod)
		if k.syncStaticPodOf(pod) {
			continue
		}
		// A pod already being torn down (same UID, re-added) or already terminal in the
		// API is not admitted again; its worker finds it terminal.
		if !k.workers.IsPodTerminationRequested(pod.UID) && !isTerminalPhase(pod.Status.Phase) {
			endAdmission := k.startup.Start(pod).Begin(podstartup.Admission)
			reason, msg, ok := k.admit(pod)
			endAdmission()
			if !ok {
				k.startup.Forget(pod.UID)
				k.rejectPod(pod, reason, msg)
				continue
			}
			// A pod admitted before a restart may have a resize pending: it is decided
			// once every pod of this update is known.
			if _, resized := k.allocation.UpdatePodFromAllocation(pod); resized {
				pendingResizes = append(pendingResizes, pod.UID)
			}
		}
		// Probes start with the pod's first sync (SyncPod adds them).
		k.dispatch(pod, podworkers.SyncPodCreate)
	}
}

// syncStaticPodOf handles a mirror pod: it syncs the static pod it stands for, if any,
// and reports true; for any other pod it reports false.
func (k *Kubelet) syncStaticPodOf(pod *v1.Pod) bool {
	if !kubetypes.IsMirrorPod(pod) {
		return false
	}
	static, ok := k.pods.GetPodByMirrorPod(pod)
	if !ok {
		klog.V(2).InfoS("Unable to find pod for mirror pod, skipping", "mirrorPod", klog.KObj(pod), "mirrorPodUID", pod.UID)
		return true
	}
	if !k.rejected.Has(static.UID) {
		k.dispatch(static, podworkers.SyncPodUpdate)
	}
	return true
}

// resumeResizes takes the resize conditions the API shows for newly added pods and
// decides the resizes left pending (upstream's HandlePodAdditions, after its loop).
func (k *Kubelet) resumeResizes(pods []*v1.Pod, pending []types.UID) {
	k.resizes.Backfill(pods)
	for _, uid := range pending {
		k.allocation.PushPendingResize(uid)
	}
	if len(pending) > 0 {
		k.allocation.RetryPendingResizes(allocation.TriggerPodsAdded)
	}
}

// admit applies the admission rules (pkg/pod/admission through Deps.Admitter) to a new pod,
// against the pods already admitted that are still active, with their allocated
// resources; an admitted pod's resources are allocated.
func (k *Kubelet) admit(pod *v1.Pod) (reason, message string, ok bool) {
	ok, reason, message = k.allocation.AddPod(k.activePods(pod), pod)
	return reason, message, ok
}

// admitAgainst runs the admit handlers for a new pod or a resize against the other pods;
// without handlers only maxPods counts.
func (k *Kubelet) admitAgainst(pod *v1.Pod, others []*v1.Pod, resize bool) (bool, string, string) {
	switch {
	case k.deps.Admitter != nil && resize:
		return k.deps.Admitter.AdmitResize(pod, others)
	case k.deps.Admitter != nil:
		return k.deps.Admitter.Admit(pod, others)
	case !resize && k.cfg.MaxPods > 0 && len(others) >= k.cfg.MaxPods:
		return false, "OutOfpods", "Node didn't have enough resource: pods"
	}
	return true, "", ""
}

// ActivePods are the pods that may hold resources (for the container manager).
func (k *Kubelet) ActivePods() []*v1.Pod { return k.activePods(nil) }

// activePods are the admitted pods but except (which may be nil) that may still hold
// resources (upstream's filterOutInactivePods): not rejected, not known to be terminated,
// and not terminal unless still being torn down.
func (k *Kubelet) activePods(except *v1.Pod) []*v1.Pod {
	var active []*v1.Pod
	for _, p := range k.pods.GetPods() {
		if (except == nil || p.UID != except.UID) && k.isActive(p) {
			active = append(active, p)
		}
	}
	return active
}

// isActive reports whether an admitted pod may still hold resources (see activePods).
func (k *Kubelet) isActive(p *v1.Pod) bool {
	if k.rejected.Has(p.UID) || k.workers.IsPodKnownTerminated(p.UID) {
		return false
	}
	return !k.isAdmittedPodTerminal(p) || k.workers.IsPodTerminationRequested(p.UID)
}

// isAdmittedPodTerminal reports a pod whose API or cached status shows a terminal phase.
func (k *Kubelet) isAdmittedPodTerminal(pod *v1.Pod) bool {
	if isTerminalPhase(pod.Status.Phase) {
		return true
	}
	phase, ok := k.deps.Status.GetPodPhase(pod.UID)
	return ok && isTerminalPhase(phase)
}

// rejectPod marks a pod Failed without running it, as upstream's admission does.
func (k *Kubelet) rejectPod(pod *v1.Pod, reason, message string) {
	metrics.RecordAdmissionRejection(reason)
	k.rejected.Insert(pod.UID)
	k.deps.Recorder.Event(pod, v1.EventTypeWarning, reason, message)
	k.deps.Status.SetPodStatus(pod, v1.PodStatus{Phase: v1.PodFailed, Reason: reason, Message: "Pod was rejected: " + message})
	klog.InfoS("Pod rejected", "pod", klog.KObj(pod), "reason", reason)
}

func (k *Kubelet) handlePodUpdates(pods []*v1.Pod) {
	for _, pod := range pods {
		old, _ := k.pods.GetPodByUID(pod.UID)
		k.pods.UpdatePod(pod)
		if k.syncStaticPodOf(pod) || k.rejected.Has(pod.UID) {
			continue
		}
		k.handleResizeRequest(old, pod)
		k.dispatch(pod, podworkers.SyncPodUpdate)
	}
}

// handleResizeRequest decides a change of an admitted pod's resources at once: allocated
// if it fits, else pending (upstream's HandlePodUpdates). A change reverted before it was
// allocated clears the pending condition.
func (k *Kubelet) handleResizeRequest(old, pod *v1.Pod) {
	if !k.allocation.HasAllocation(pod.UID) || (old != nil && !resourcesChanged(old, pod)) {
		return
	}
	metrics.RecordContainerRequestedResizes(old, pod)
	if _, resized := k.allocation.UpdatePodFromAllocation(pod); resized {
		k.allocation.PushPendingResize(pod.UID)
		k.allocation.RetryPendingResizes(allocation.TriggerPodUpdated)
		return
	}
	k.resizes.ClearPending(pod.UID, metrics.ResizeReverted)
}

// resourcesChanged compares the resources of two versions of a pod: pod-level and of its
// init and regular containers.
func resourcesChanged(old, pod *v1.Pod) bool {
	if !apiequality.Semantic.DeepEqual(old.Spec.Resources, pod.Spec.Resources) ||
		len(old.Spec.InitContainers) != len(pod.Spec.InitContainers) || len(old.Spec.Containers) != len(pod.Spec.Containers) {
		return true
	}
	for i := range pod.Spec.InitContainers {
		if !apiequality.Semantic.DeepEqual(old.Spec.InitContainers[i].Resources, pod.Spec.InitContainers[i].Resources) {
			return true
		}
	}
	for i := range pod.Spec.Containers {
		if !apiequality.Semantic.DeepEqual(old.Spec.Containers[i].Resources, pod.Spec.Containers[i].Resources) {
			return true
		}
	}
	return false
}

// handlePodRemoves stops pods whose source no longer lists them; housekeeping forgets them
// once their worker has finished. A removed mirror pod makes its static pod sync, which
// creates a new one.
func (k *Kubelet) handlePodRemoves(pods []*v1.Pod) {
	// The removed pods' capacity may let a pending resize through.
	defer k.allocation.RetryPendingResizes(allocation.TriggerPodsRemoved)
	for _, pod := range pods {
		k.pods.RemovePod(pod)
		k.allocation.RemovePod(pod.UID)
		if k.syncStaticPodOf(pod) {
			continue
		}
		k.rejected.Delete(pod.UID)
		k.startup.Forget(pod.UID)
		k.deps.Prober.RemovePod(pod)
		k.workers.UpdatePod(podworkers.UpdatePodOptions{
			Pod: pod, UpdateType: podworkers.SyncPodKill, StartTime: k.deps.Clock.Now(),
		})
	}
}

// handlePodReconcile records a status-only change; nothing in the runtime changes. The
// status manager compares its statuses with these pods on its periodic pass; a readiness
// gate another controller turned is synced at once, so Ready follows it.
func (k *Kubelet) handlePodReconcile(pods []*v1.Pod) {
	retry := ""
	for _, pod := range pods {
		old, _ := k.pods.GetPodByUID(pod.UID)
		k.pods.UpdatePod(pod)
		if retry == "" && old != nil && k.allocation.HasPendingResizes() {
			retry = k.resizeRetryTrigger(old, pod)
		}
		if kubetypes.IsMirrorPod(pod) {
			continue
		}
		if status.NeedToReconcilePodReadiness(pod) && !k.rejected.Has(pod.UID) {
			k.dispatch(pod, podworkers.SyncPodSync)
		}
	}
	if retry != "" {
		k.allocation.RetryPendingResizes(retry)
	}
}

// resizeRetryTrigger says why a status change may let pending resizes through: the pod
// became terminal, or its CPU or memory requests shrank (its status shows a downsize
// applied); "" when neither.
func (k *Kubelet) resizeRetryTrigger(old, pod *v1.Pod) string {
	if isTerminalPhase(pod.Status.Phase) && !isTerminalPhase(old.Status.Phase) {
		return allocation.TriggerPodTerminated
	}
	opts := resourcehelper.PodResourcesOptions{UseStatusResources: true, InPlacePodLevelResourcesVerticalScalingEnabled: true}
	oldAllocated, _ := k.allocation.UpdatePodFromAllocation(old)
	allocated, _ := k.allocation.UpdatePodFromAllocation(pod)
	before, after := resourcehelper.PodRequests(oldAllocated, opts), resourcehelper.PodRequests(allocated, opts)
	if after.Memory().Cmp(*before.Memory()) < 0 || after.Cpu().Cmp(*before.Cpu()) < 0 {
		return allocation.TriggerPodResized
	}
	return ""
}

// dispatch hands the pod to its worker with its allocated resources: a resize not yet
// allocated is never actuated.
func (k *Kubelet) dispatch(pod *v1.Pod, t podworkers.SyncPodType) {
	pod, _ = k.allocation.UpdatePodFromAllocation(pod)
	k.workers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, UpdateType: t, StartTime: k.deps.Clock.Now()})
}

func isTerminalPhase(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }
