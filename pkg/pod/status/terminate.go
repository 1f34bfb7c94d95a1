package status

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// maxPodTerminationMessageLogLength bounds the termination messages of all of a pod's
// containers together (upstream's kubecontainer.MaxPodTerminationMessageLogLength).
const maxPodTerminationMessageLogLength = 1024 * 12

func (m *manager) TerminatePod(pod *v1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	oldStatus := &pod.Status
	cached, isCached := m.statuses[pod.UID]
	if isCached {
		oldStatus = &cached.status
	}
	status := oldStatus.DeepCopy()

	// The runtime may have lost some containers (garbage collection, admin action, a
	// restart losing state): without proof of success, each counts as failed. Before
	// initialization, the init containers' failure describes the pod well enough.
	if hasPodInitialized(pod, oldStatus) {
		markUnterminatedLost(status.ContainerStatuses)
	}
	markUnterminatedLost(initializedContainers(status.InitContainerStatuses))

	// Every pod ends in a terminal phase (static pods excepted, as upstream's TODO #116484).
	if !kubetypes.IsStaticPod(pod) && !isTerminal(status.Phase) {
		if status.Phase == v1.PodRunning && isCached {
			klog.InfoS("Terminal running pod should have already been marked as failed, programmer error", "pod", klog.KObj(pod), "podUID", pod.UID)
		}
		klog.V(3).InfoS("Marking terminal pod as failed", "oldPhase", status.Phase, "pod", klog.KObj(pod), "podUID", pod.UID)
		status.Phase = v1.PodFailed
	}
	m.updateStatus(pod, *status, true, true)
}

// markUnterminatedLost reports every container not known to have terminated as lost.
func markUnterminatedLost(statuses []v1.ContainerStatus) {
	for i := range statuses {
		if statuses[i].State.Terminated != nil {
			continue
		}
		statuses[i].State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
			Reason:   ContainerStatusUnknown,
			Message:  msgLostOnTermination,
			ExitCode: exitCodeLost,
		}}
	}
}

// hasPodInitialized reports evidence in the pod's status that its regular containers were
// started: no init containers, a regular container out of waiting, or the last init
// container completed (sidecar: started). Upstream reads the API status (pod.Status); the
// cached status is at least as recent, and the only one a pod from a file has.
func hasPodInitialized(pod *v1.Pod, status *v1.PodStatus) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return true
	}
	for _, s := range status.ContainerStatuses {
		if s.LastTerminationState.Terminated != nil || s.State.Waiting == nil {
			return true
		}
	}
	n := len(status.InitContainerStatuses)
	if n == 0 {
		return false
	}
	last := status.InitContainerStatuses[n-1]
	// Statuses follow the spec's order; a mismatch means the status is not this spec's.
	if n > len(pod.Spec.InitContainers) || pod.Spec.InitContainers[n-1].Name != last.Name {
		return false
	}
	if isRestartableInitContainer(&pod.Spec.InitContainers[n-1]) {
		return last.State.Running != nil && last.Started != nil && *last.Started
	}
	return completed(last.LastTerminationState) || completed(last.State)
}

func completed(s v1.ContainerState) bool { return s.Terminated != nil && s.Terminated.ExitCode == 0 }

// initializedContainers drops the trailing init containers that never tried to start
// (waiting, with no previous termination); it keeps at least the first one.
func initializedContainers(statuses []v1.ContainerStatus) []v1.ContainerStatus {
	for i := len(statuses) - 1; i >= 0; i-- {
		if statuses[i].State.Waiting == nil || statuses[i].LastTerminationState.Terminated != nil {
			return statuses[:i+1]
		}
	}
	if len(statuses) > 0 {
		return statuses[:1]
	}
	return nil
}

// checkContainerStateTransition refuses a container going from terminated back to not
// terminated when its restart policy says it must not restart: a kubelet bug otherwise.
func checkContainerStateTransition(oldStatus, newStatus *v1.PodStatus, spec *v1.PodSpec) error {
	check := func(kind string, containers []v1.Container, olds, news []v1.ContainerStatus) error {
		for _, o := range olds {
			if o.State.Terminated == nil {
				continue
			}
			// A status without a spec (should not happen) gets the pod's restart policy.
			c := &v1.Container{}
			if i := slices.IndexFunc(containers, func(c v1.Container) bool { return c.Name == o.Name }); i >= 0 {
				c = &containers[i]
			}
			if container.ContainerShouldRestart(c, spec, o.State.Terminated.ExitCode) {
				continue
			}
			if n, ok := findStatus(news, o.Name); ok && n.State.Terminated == nil {
				return fmt.Errorf("terminated %s %v attempted illegal transition to non-terminated state", kind, n.Name)
			}
		}
		return nil
	}
	if err := check("container", spec.Containers, oldStatus.ContainerStatuses, newStatus.ContainerStatuses); err != nil {
		return err
	}
	return check("init container", spec.InitContainers, oldStatus.InitContainerStatuses, newStatus.InitContainerStatuses)
}

// normalizeStatus makes a status compare equal to itself after an API round trip: times at
// second precision (the API's RFC3339), termination messages within the pod's budget, and
// container statuses in a fixed order.
func normalizeStatus(pod *v1.Pod, status *v1.PodStatus) {
	bytesPerStatus := maxPodTerminationMessageLogLength
	if n := len(pod.Spec.Containers) + len(pod.Spec.InitContainers); n > 0 {
		bytesPerStatus /= n
	}
	normalizeTime := func(t *metav1.Time) { *t = t.Rfc3339Copy() }
	normalizeState := func(s *v1.ContainerState) {
		if s.Running != nil {
			normalizeTime(&s.Running.StartedAt)
		}
		if s.Terminated != nil {
			normalizeTime(&s.Terminated.StartedAt)
			normalizeTime(&s.Terminated.FinishedAt)
			if len(s.Terminated.Message) > bytesPerStatus {
				s.Terminated.Message = s.Terminated.Message[:bytesPerStatus]
			}
		}
	}
	if status.StartTime != nil {
		normalizeTime(status.StartTime)
	}
	for i := range status.Conditions {
		normalizeTime(&status.Conditions[i].LastProbeTime)
		normalizeTime(&status.Conditions[i].LastTransitionTime)
	}
	for _, list := range [][]v1.ContainerStatus{status.ContainerStatuses, status.InitContainerStatuses, status.EphemeralContainerStatuses} {
		for i := range list {
			normalizeState(&list[i].State)
			normalizeState(&list[i].LastTerminationState)
		}
	}
	sortByName(status.ContainerStatuses)
	sortByName(status.EphemeralContainerStatuses)
	sortInitStatuses(pod, status.InitContainerStatuses)
}

func sortByName(statuses []v1.ContainerStatus) {
	slices.SortStableFunc(statuses, func(a, b v1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) })
}

// sortInitStatuses orders init container statuses as the spec lists them; unknown names last.
func sortInitStatuses(pod *v1.Pod, statuses []v1.ContainerStatus) {
	index := make(map[string]int, len(pod.Spec.InitContainers))
	for i, c := range pod.Spec.InitContainers {
		index[c.Name] = i
	}
	position := func(name string) int {
		if i, ok := index[name]; ok {
			return i
		}
		return len(index)
	}
	slices.SortStableFunc(statuses, func(a, b v1.ContainerStatus) int { return position(a.Name) - position(b.Name) })
}
