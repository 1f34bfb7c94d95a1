package kubelet

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pod/status"
)

// Upstream's reason and message for a pod past spec.activeDeadlineSeconds.
const (
	deadlineExceededReason  = "DeadlineExceeded"
	deadlineExceededMessage = "Pod was active on the node longer than the specified deadline"
)

// activeDeadlines fails pods that have been active longer than activeDeadlineSeconds
// (upstream's activeDeadlineHandler): the sync ticker syncs them, and their status turns
// Failed with reason DeadlineExceeded, which terminates them.
type activeDeadlines struct {
	status   status.Manager
	recorder record.EventRecorder
	clock    clock.PassiveClock
}

// pastDeadline reports a pod whose deadline, counted from its start time, has passed.
func (d *activeDeadlines) pastDeadline(pod *v1.Pod) bool {
	if pod.Spec.ActiveDeadlineSeconds == nil {
		return false
	}
	st, ok := d.status.GetPodStatus(pod.UID)
	if !ok {
		st = pod.Status
	}
	if st.StartTime.IsZero() {
		return false
	}
	allowed := time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second
	return d.clock.Since(st.StartTime.Time) >= allowed
}

// shouldEvict is the status generator's eviction hook. The event is recorded once, when the
// pod is first found past its deadline.
func (d *activeDeadlines) shouldEvict(pod *v1.Pod) (bool, string, string) {
	if !d.pastDeadline(pod) {
		return false, "", ""
	}
	if st, ok := d.status.GetPodStatus(pod.UID); !ok || st.Reason != deadlineExceededReason {
		d.recorder.Event(pod, v1.EventTypeNormal, deadlineExceededReason, deadlineExceededMessage)
	}
	return true, deadlineExceededReason, deadlineExceededMessage
}
