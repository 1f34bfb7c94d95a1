package metrics

import (
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// How a deferred resize ended, the resolution label of
// kubelet_pod_deferred_resize_duration_seconds (upstream's DeferredResizeResolution).
const (
	ResizeAccepted   = "accepted"
	ResizeReverted   = "reverted"
	ResizeTerminated = "terminated"
)

// Upstream's priority classes, for the priority_bucket label.
const (
	systemCriticalPriority = 2000000000
	highPriority           = 100000
	veryLowPriority        = -1000
)

// PriorityBucket is the priority_bucket label of the resize metrics for pod (upstream's
// GetPriorityBucketLabel): "unknown" for no pod, "normal" for no or zero priority, then
// system-critical (>= 2000000000), high (>= 100000), medium (> 0), low (> -1000) and
// very-low.
func PriorityBucket(pod *v1.Pod) string {
	if pod == nil {
		return "unknown"
	}
	if pod.Spec.Priority == nil || *pod.Spec.Priority == 0 {
		return "normal"
	}
	switch p := *pod.Spec.Priority; {
	case p >= systemCriticalPriority:
		return "system-critical"
	case p >= highPriority:
		return "high"
	case p > 0:
		return "medium"
	case p > veryLowPriority:
		return "low"
	}
	return "very-low"
}

// RecordContainerRequestedResizes counts, in kubelet_container_requested_resizes_total,
// every CPU and memory request and limit that changed between two versions of an admitted
// pod's init and regular containers (matched by name and kind), as upstream's
// HandlePodUpdates does. It reports whether any did.
func RecordContainerRequestedResizes(old, pod *v1.Pod) bool {
	if old == nil || pod == nil {
		return false
	}
	resized := false
	for _, lists := range [][2][]v1.Container{
		{old.Spec.InitContainers, pod.Spec.InitContainers},
		{old.Spec.Containers, pod.Spec.Containers},
	} {
		for i := range lists[0] {
			before := &lists[0][i]
			after := containerNamed(lists[1], before.Name)
			if after == nil {
				continue
			}
			for _, r := range []struct {
				resource, requirement string
				after, before         *resource.Quantity
			}{
				{"memory", "requests", after.Resources.Requests.Memory(), before.Resources.Requests.Memory()},
				{"memory", "limits", after.Resources.Limits.Memory(), before.Resources.Limits.Memory()},
				{"cpu", "requests", after.Resources.Requests.Cpu(), before.Resources.Requests.Cpu()},
				{"cpu", "limits", after.Resources.Limits.Cpu(), before.Resources.Limits.Cpu()},
			} {
				if op := resizeOperation(r.after, r.before); op != "" {
					resized = true
					ContainerRequestedResizes.WithLabelValues(r.resource, r.requirement, op).Inc()
				}
			}
		}
	}
	return resized
}

func containerNamed(cs []v1.Container, name string) *v1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// resizeOperation is upstream's resizeOperationForResources: add, remove, increase,
// decrease, or "" when the quantity did not change.
func resizeOperation(after, before *resource.Quantity) string {
	switch {
	case after.IsZero() && !before.IsZero():
		return "remove"
	case before.IsZero() && !after.IsZero():
		return "add"
	case after.Cmp(*before) < 0:
		return "decrease"
	case after.Cmp(*before) > 0:
		return "increase"
	}
	return ""
}

// ObservePodResize records, in kubelet_pod_resize_duration_milliseconds, one actuation of
// a resize by the runtime manager that began at start.
func ObservePodResize(start time.Time, success bool) {
	PodResizeDurationMilliseconds.WithLabelValues(strconv.FormatBool(success)).Observe(float64(time.Since(start).Milliseconds()))
}

// ObserveDeferredResize records, in kubelet_pod_deferred_resize_duration_seconds, how long
// a resize stayed deferred when its PodResizePending condition goes with resolution; a
// condition that is not Deferred is not counted.
func ObserveDeferredResize(pending *v1.PodCondition, pod *v1.Pod, resolution string, now time.Time) {
	if pending == nil || pending.Reason != v1.PodReasonDeferred || pending.LastTransitionTime.IsZero() {
		return
	}
	PodDeferredResizeDurationSeconds.WithLabelValues(resolution, PriorityBucket(pod)).
		Observe(now.Sub(pending.LastTransitionTime.Time).Seconds())
}

// PendingResize is one pod's PodResizePending condition, for kubelet_pod_pending_resizes.
type PendingResize struct {
	// Reason is the condition's reason (Deferred, Infeasible).
	Reason string
	Pod    *v1.Pod
}

// SetPendingResizes sets kubelet_pod_pending_resizes to the count of the pending resizes by
// lower-cased reason and priority bucket.
func SetPendingResizes(pending []PendingResize) {
	type key struct{ reason, bucket string }
	counts := map[key]int{}
	for _, p := range pending {
		counts[key{strings.ToLower(p.Reason), PriorityBucket(p.Pod)}]++
	}
	PodPendingResizes.Reset()
	for k, n := range counts {
		PodPendingResizes.WithLabelValues(k.reason, k.bucket).Set(float64(n))
	}
}

// RecordUserNamespacedPodStart counts a sandbox created for a pod with hostUsers: false in
// kubelet_started_user_namespaced_pods_total and, when that sync failed anywhere (an
// action's error or the sync's own, as upstream's runtime manager checks once SyncPod
// ends), in kubelet_started_user_namespaced_pods_errors_total.
func RecordUserNamespacedPodStart(failed bool) {
	StartedUserNamespacedPodsTotal.Inc()
	if failed {
		StartedUserNamespacedPodsErrorsTotal.Inc()
	}
}
