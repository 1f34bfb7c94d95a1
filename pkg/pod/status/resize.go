package status

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/metrics"
)

// ResizeConditions holds each pod's PodResizePending and PodResizeInProgress conditions
// (upstream keeps them in the status manager): the allocation manager sets them when it
// decides a resize, the kubelet when it actuates one, and GenerateAPIPodStatus publishes
// them (GenerateOptions.ResizeConditions). It is safe for concurrent use.
type ResizeConditions struct {
	now func() time.Time
	// podByUID finds a pod for the priority bucket of the resize metrics; nil counts
	// every pod as "unknown".
	podByUID func(types.UID) (*v1.Pod, bool)

	mu   sync.Mutex
	pods map[types.UID]*podResizeConditions
}

type podResizeConditions struct {
	pending, inProgress *v1.PodCondition
}

// NewResizeConditions returns an empty set; now may be nil (time.Now).
func NewResizeConditions(now func() time.Time) *ResizeConditions {
	if now == nil {
		now = time.Now
	}
	return &ResizeConditions{now: now, pods: map[types.UID]*podResizeConditions{}}
}

// SetPodLookup gives the conditions the pods, for the priority bucket of
// kubelet_pod_pending_resizes and kubelet_pod_deferred_resize_duration_seconds.
func (r *ResizeConditions) SetPodLookup(podByUID func(types.UID) (*v1.Pod, bool)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.podByUID = podByUID
}

func (r *ResizeConditions) pod(uid types.UID) *v1.Pod {
	if r.podByUID == nil {
		return nil
	}
	pod, _ := r.podByUID(uid)
	return pod
}

// recordLocked sets kubelet_pod_pending_resizes and kubelet_pod_in_progress_resizes from
// the conditions held; pending resizes of pods the kubelet no longer has are not counted,
// as upstream. Callers hold r.mu.
func (r *ResizeConditions) recordLocked() {
	var pending []metrics.PendingResize
	inProgress := 0
	for uid, c := range r.pods {
		if c.inProgress != nil {
			inProgress++
		}
		if c.pending == nil {
			continue
		}
		pod := r.pod(uid)
		if r.podByUID != nil && pod == nil {
			continue
		}
		pending = append(pending, metrics.PendingResize{Reason: c.pending.Reason, Pod: pod})
	}
	metrics.SetPendingResizes(pending)
	metrics.PodInProgressResizes.Set(float64(inProgress))
}

func (r *ResizeConditions) of(uid types.UID) *podResizeConditions {
	c, ok := r.pods[uid]
	if !ok {
		c = &podResizeConditions{}
		r.pods[uid] = c
	}
	return c
}

// List returns copies of the pod's conditions, PodResizePending first.
func (r *ResizeConditions) List(uid types.UID) []v1.PodCondition {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []v1.PodCondition
	if c, ok := r.pods[uid]; ok {
		for _, cond := range []*v1.PodCondition{c.pending, c.inProgress} {
			if cond != nil {
				out = append(out, *cond.DeepCopy())
			}
		}
	}
	return out
}

// Pending returns a copy of the pod's PodResizePending condition, or nil.
func (r *ResizeConditions) Pending(uid types.UID) *v1.PodCondition {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.pods[uid]; ok {
		return c.pending.DeepCopy()
	}
	return nil
}

// InProgress returns a copy of the pod's PodResizeInProgress condition, or nil.
func (r *ResizeConditions) InProgress(uid types.UID) *v1.PodCondition {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.pods[uid]; ok {
		return c.inProgress.DeepCopy()
	}
	return nil
}

// SetPending sets PodResizePending for the pod: reason Infeasible stays, every other
// reason (an admission's OutOfcpu, say) becomes Deferred. It reports whether the reason
// or the generation changed (a new condition counts).
func (r *ResizeConditions) SetPending(uid types.UID, reason, message string, generation int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reason != v1.PodReasonInfeasible {
		reason = v1.PodReasonDeferred
	}
	c := r.of(uid)
	previous := c.pending
	c.pending = r.resizeCondition(v1.PodResizePending, previous, reason, message, generation)
	if previous == nil || previous.Reason != reason {
		r.recordLocked()
	}
	return previous == nil || previous.Reason != reason || previous.ObservedGeneration != generation
}

// SetInProgress sets PodResizeInProgress for the pod. An existing condition keeps its
// generation (clear it first to start a new one) and, when reason and message are both
// empty, its reason and message (an error stays until the resize is done). It returns
// the condition's generation and whether the condition changed.
func (r *ResizeConditions) SetInProgress(uid types.UID, reason, message string, generation int64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.of(uid)
	previous := c.inProgress
	if previous != nil {
		if reason == "" && message == "" {
			reason, message = previous.Reason, previous.Message
		}
		generation = previous.ObservedGeneration
	}
	c.inProgress = r.resizeCondition(v1.PodResizeInProgress, previous, reason, message, generation)
	if previous == nil {
		r.recordLocked()
	}
	changed := previous == nil || previous.Reason != reason || previous.Message != message
	return generation, changed
}

// ClearPending removes the pod's PodResizePending condition. resolution says how the
// resize ended (metrics.ResizeAccepted, ResizeReverted, ResizeTerminated): a Deferred one
// is timed in kubelet_pod_deferred_resize_duration_seconds.
func (r *ResizeConditions) ClearPending(uid types.UID, resolution string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.pods[uid]; ok && c.pending != nil {
		metrics.ObserveDeferredResize(c.pending, r.pod(uid), resolution, r.now())
		c.pending = nil
		r.recordLocked()
	}
}

// ClearInProgress removes the pod's PodResizeInProgress condition; it returns the
// removed condition's generation and whether there was one.
func (r *ResizeConditions) ClearInProgress(uid types.UID) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.pods[uid]
	if !ok || c.inProgress == nil {
		return 0, false
	}
	generation := c.inProgress.ObservedGeneration
	c.inProgress = nil
	r.recordLocked()
	return generation, true
}

// Backfill takes the resize conditions the API shows for pods the kubelet has just
// learnt of (after a restart), so that a resize in flight keeps its conditions.
func (r *ResizeConditions) Backfill(pods []*v1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pod := range pods {
		for i := range pod.Status.Conditions {
			cond := &pod.Status.Conditions[i]
			switch cond.Type {
			case v1.PodResizePending:
				r.of(pod.UID).pending = r.resizeCondition(cond.Type, nil, cond.Reason, cond.Message, cond.ObservedGeneration)
			case v1.PodResizeInProgress:
				r.of(pod.UID).inProgress = r.resizeCondition(cond.Type, nil, cond.Reason, cond.Message, cond.ObservedGeneration)
			}
		}
	}
	r.recordLocked()
}

// Retain forgets the pods not in keep; a deferred resize of a pod forgotten ends as
// terminated.
func (r *ResizeConditions) Retain(keep map[types.UID]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	forgot := false
	for uid, c := range r.pods {
		if !keep[uid] {
			metrics.ObserveDeferredResize(c.pending, r.pod(uid), metrics.ResizeTerminated, r.now())
			delete(r.pods, uid)
			forgot = true
		}
	}
	if forgot {
		r.recordLocked()
	}
}

// resizeCondition is a True condition probed now; its transition time moves only when
// its reason changes.
func (r *ResizeConditions) resizeCondition(t v1.PodConditionType, old *v1.PodCondition, reason, message string, generation int64) *v1.PodCondition {
	now := metav1.NewTime(r.now())
	transition := now
	if old != nil && old.Reason == reason {
		transition = old.LastTransitionTime
	}
	return &v1.PodCondition{Type: t, Status: v1.ConditionTrue, LastProbeTime: now, LastTransitionTime: transition,
		ObservedGeneration: generation, Reason: reason, Message: message}
}
