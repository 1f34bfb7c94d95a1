package podstartup

import (
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/metrics"
)

// ObservedOnWatch is told about every API pod the API server delivers, at when. The first
// time an API pod shows all its containers running (the kubelet's own status update come
// back through the watch), it records upstream's start-up SLI: from the pod's creation,
// less the time spent pulling images and running init containers. Stateful pods count
// only in the total, as upstream.
func (t *Tracker) ObservedOnWatch(pod *v1.Pod, when time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := t.pods[pod.UID]
	if tr == nil || tr.sliDone {
		return
	}
	switch {
	case pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed, isUnschedulable(pod):
		tr.sliDone = true
	case allContainersRunning(pod):
		t.recordSLI(tr, when)
		tr.sliDone = true
	default:
		return
	}
	t.dropIfDone(tr)
}

// recordSLI observes the SLI histograms for tr at when. Callers hold t.mu.
func (t *Tracker) recordSLI(tr *Trace, when time.Time) {
	total := when.Sub(tr.created)
	pulling := pullingTime(tr.pulls)
	sli := total - pulling - tr.spent[InitContainers]
	klog.V(2).InfoS("Observed pod startup duration", "pod", tr.pod, "podStartSLOduration", sli.Seconds(),
		"podStartE2EDuration", total, "totalImagesPullingTime", pulling, "totalInitContainerRuntime", tr.spent[InitContainers],
		"isStatefulPod", tr.stateful, "podCreationTimestamp", tr.created, "watchObservedRunningTime", when)
	metrics.PodStartTotalDuration.WithLabelValues().Observe(total.Seconds())
	if tr.stateful {
		return
	}
	metrics.PodStartSLIDuration.WithLabelValues().Observe(sli.Seconds())
	if !tr.hostNet && !t.firstNetworkPodSeen {
		metrics.FirstNetworkPodStartSLIDuration.Set(sli.Seconds())
		t.firstNetworkPodSeen = true
	}
}

// pullingTime is the wall time covered by the pulls; overlapping pulls count once.
func pullingTime(pulls []interval) time.Duration {
	sorted := slices.Clone(pulls)
	slices.SortFunc(sorted, func(a, b interval) int { return a.start.Compare(b.start) })
	var total time.Duration
	var coveredTo time.Time
	for _, p := range sorted {
		start := p.start
		if start.Before(coveredTo) {
			start = coveredTo
		}
		if p.end.After(start) {
			total += p.end.Sub(start)
			coveredTo = p.end
		}
	}
	return total
}

// allContainersRunning is upstream's hasPodStartedSLO: every container has started
// running. A status without container statuses is not one the kubelet wrote yet.
func allContainersRunning(pod *v1.Pod) bool {
	if len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running == nil || cs.State.Running.StartedAt.IsZero() {
			return false
		}
	}
	return true
}

// isStateful is upstream's SLI definition: a volume other than a secret, config map,
// downward API, emptyDir or projected volume.
func isStateful(pod *v1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Secret == nil && v.ConfigMap == nil && v.DownwardAPI == nil && v.EmptyDir == nil && v.Projected == nil {
			return true
		}
	}
	return false
}

// isUnschedulable: a pod whose PodScheduled condition is False is left out of the SLI.
func isUnschedulable(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
			return true
		}
	}
	return false
}
