package kubelet

import (
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/podworkers"
)

// handlePodAdditions admits new pods, oldest first, and starts their workers.
func (k *Kubelet) handlePodAdditions(pods []*v1.Pod) {
	sort.Slice(pods, func(i, j int) bool { return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp) })
	for _, pod := range pods {
		k.pods.AddPod(pod)
		if reason, msg, ok := k.admit(pod); !ok {
			k.rejectPod(pod, reason, msg)
			continue
		}
		// Probes start with the pod's first sync (SyncPod adds them).
		k.dispatch(pod, podworkers.SyncPodCreate)
	}
}

// admit applies the admission rules nodelet has today: the maxPods limit.
func (k *Kubelet) admit(pod *v1.Pod) (reason, message string, ok bool) {
	if k.cfg.MaxPods <= 0 {
		return "", "", true
	}
	active := 0
	for _, p := range k.pods.GetPods() {
		if p.UID != pod.UID && !k.rejected.Has(p.UID) && !k.workers.IsPodTerminationRequested(p.UID) {
			active++
		}
	}
	if active >= k.cfg.MaxPods {
		return "OutOfpods", "Node didn't have enough resource: pods", false
	}
	return "", "", true
}

// rejectPod marks a pod Failed without running it, as upstream's admission does.
func (k *Kubelet) rejectPod(pod *v1.Pod, reason, message string) {
	k.rejected.Insert(pod.UID)
	k.deps.Recorder.Event(pod, v1.EventTypeWarning, reason, message)
	k.deps.Status.SetPodStatus(pod, v1.PodStatus{Phase: v1.PodFailed, Reason: reason, Message: "Pod was rejected: " + message})
	klog.InfoS("Pod rejected", "pod", klog.KObj(pod), "reason", reason)
}

func (k *Kubelet) handlePodUpdates(pods []*v1.Pod) {
	for _, pod := range pods {
		k.pods.UpdatePod(pod)
		if k.rejected.Has(pod.UID) {
			continue
		}
		k.dispatch(pod, podworkers.SyncPodUpdate)
	}
}

// handlePodRemoves stops pods whose source no longer lists them; housekeeping forgets them
// once their worker has finished.
func (k *Kubelet) handlePodRemoves(pods []*v1.Pod) {
	for _, pod := range pods {
		k.pods.RemovePod(pod)
		k.rejected.Delete(pod.UID)
		k.deps.Prober.RemovePod(pod)
		k.workers.UpdatePod(podworkers.UpdatePodOptions{
			Pod: pod, UpdateType: podworkers.SyncPodKill, StartTime: k.deps.Clock.Now(),
		})
	}
}

// handlePodReconcile records a status-only change; nothing in the runtime changes.
func (k *Kubelet) handlePodReconcile(pods []*v1.Pod) {
	for _, pod := range pods {
		k.pods.UpdatePod(pod)
	}
}

func (k *Kubelet) dispatch(pod *v1.Pod, t podworkers.SyncPodType) {
	k.workers.UpdatePod(podworkers.UpdatePodOptions{Pod: pod, UpdateType: t, StartTime: k.deps.Clock.Now()})
}

func isTerminalPhase(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }
