package kubelet

import (
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/metrics/podstartup"
	"github.com/nodelet/nodelet/pkg/podworkers"
	"github.com/nodelet/nodelet/pkg/status"
)

// handlePodAdditions admits new pods, oldest first, and starts their workers. A mirror pod
// is not run: its static pod is synced, which keeps the mirror in line.
func (k *Kubelet) handlePodAdditions(pods []*v1.Pod) {
	sort.Slice(pods, func(i, j int) bool { return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp) })
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

// admit applies the admission rules (pkg/admission through Deps.Admitter) to a new pod,
// against the pods already admitted that are still active.
func (k *Kubelet) admit(pod *v1.Pod) (reason, message string, ok bool) {
	active := k.activePods(pod)
	if k.deps.Admitter != nil {
		ok, reason, message := k.deps.Admitter.Admit(pod, active)
		return reason, message, ok
	}
	if k.cfg.MaxPods > 0 && len(active) >= k.cfg.MaxPods {
		return "OutOfpods", "Node didn't have enough resource: pods", false
	}
	return "", "", true
}

// ActivePods are the pods that may hold resources (for the container manager).
func (k *Kubelet) ActivePods() []*v1.Pod { return k.activePods(nil) }

// activePods are the admitted pods but except (which may be nil) that may still hold
// resources (upstream's filterOutInactivePods): not rejected, not known to be terminated,
// and not terminal unless still being torn down.
func (k *Kubelet) activePods(except *v1.Pod) []*v1.Pod {
	var active []*v1.Pod
	for _, p := range k.pods.GetPods() {
		if (except != nil && p.UID == except.UID) || k.rejected.Has(p.UID) || k.workers.IsPodKnownTerminated(p.UID) {
			continue
		}
		if k.isAdmittedPodTerminal(p) && !k.workers.IsPodTerminationRequested(p.UID) {
			continue
		}
		active = append(active, p)
	}
	return active
}

// isAdmittedPodTerminal reports a pod whose API or cached status shows a terminal phase.
func (k *Kubelet) isAdmittedPodTerminal(pod *v1.Pod) bool {
	if isTerminalPhase(pod.Status.Phase) {
		return true
	}
	st, ok := k.deps.Status.GetPodStatus(pod.UID)
	return ok && isTerminalPhase(st.Phase)
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
		k.pods.UpdatePod(pod)
		if k.syncStaticPodOf(pod) || k.rejected.Has(pod.UID) {
			continue
		}
		k.dispatch(pod, podworkers.SyncPodUpdate)
	}
}

// handlePodRemoves stops pods whose source no longer lists them; housekeeping forgets them
// once their worker has finished. A removed mirror pod makes its static pod sync, which
// creates a new one.
func (k *Kubelet) handlePodRemoves(pods []*v1.Pod) {
	for _, pod := range pods {
		k.pods.RemovePod(pod)
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
	for _, pod := range pods {
		k.pods.UpdatePod(pod)
		if kubetypes.IsMirrorPod(pod) {
			continue
		}
		if status.NeedToReconcilePodReadiness(pod) && !k.rejected.Has(pod.UID) {
			k.dispatch(pod, podworkers.SyncPodSync)
		}
	}
}

func (k *Kubelet) dispatch(pod *v1.Pod, t podworkers.SyncPodType) {
	k.workers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, UpdateType: t, StartTime: k.deps.Clock.Now()})
}

func isTerminalPhase(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }
