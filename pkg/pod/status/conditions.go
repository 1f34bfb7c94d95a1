package status

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Conditions carry the pod's generation as observedGeneration (PodObservedGenerationTracking
// is GA); a pod without metadata.generation, as static pods usually are, leaves it zero.

// GeneratePodReadyToStartContainersCondition is True once the pod has a sandbox with its
// network configured, i.e. the runtime manager would not create a new one.
func GeneratePodReadyToStartContainersCondition(pod *v1.Pod, podStatus *container.PodStatus) v1.PodCondition {
	status := v1.ConditionTrue
	if sandboxNeedsReplacing(pod, podStatus) {
		status = v1.ConditionFalse
	}
	return condition(pod, v1.PodReadyToStartContainers, status, "", "")
}

// GeneratePodInitializedCondition is True when every init container completed (sidecars:
// started), or when a regular container has already run.
func GeneratePodInitializedCondition(pod *v1.Pod, statuses []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	if statuses == nil && len(pod.Spec.InitContainers) > 0 {
		return condition(pod, v1.PodInitialized, v1.ConditionFalse, UnknownContainerStatuses, "")
	}
	var unknown, incomplete []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		s, ok := findStatus(statuses, c.Name)
		switch {
		case !ok:
			unknown = append(unknown, c.Name)
		case !initContainerDone(c, &s):
			incomplete = append(incomplete, c.Name)
		}
	}
	if phase == v1.PodSucceeded && len(unknown) == 0 {
		return condition(pod, v1.PodInitialized, v1.ConditionTrue, PodCompleted, "")
	}
	// A regular container that ran proves initialization, even while a sidecar restarts.
	if hasAnyRegularContainerStarted(&pod.Spec, statuses) {
		return condition(pod, v1.PodInitialized, v1.ConditionTrue, "", "")
	}
	if msg := listMessage("containers with unknown status", unknown, "containers with incomplete status", incomplete); msg != "" {
		return condition(pod, v1.PodInitialized, v1.ConditionFalse, ContainersNotInitialized, msg)
	}
	return condition(pod, v1.PodInitialized, v1.ConditionTrue, "", "")
}

// initContainerDone: a sidecar counts once started, a regular init container once it
// completed (its Ready is set only for exit code 0).
func initContainerDone(c *v1.Container, s *v1.ContainerStatus) bool {
	if isRestartableInitContainer(c) {
		return s.Started != nil && *s.Started
	}
	return s.Ready
}

// GenerateContainersReadyCondition is True when every regular container and sidecar is ready.
func GenerateContainersReadyCondition(pod *v1.Pod, statuses []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	if statuses == nil {
		return condition(pod, v1.ContainersReady, v1.ConditionFalse, UnknownContainerStatuses, "")
	}
	var unknown, unready []string
	check := func(name string) {
		s, ok := findStatus(statuses, name)
		switch {
		case !ok:
			unknown = append(unknown, name)
		case !s.Ready:
			unready = append(unready, name)
		}
	}
	for i := range pod.Spec.InitContainers {
		if isRestartableInitContainer(&pod.Spec.InitContainers[i]) {
			check(pod.Spec.InitContainers[i].Name)
		}
	}
	for _, c := range pod.Spec.Containers {
		check(c.Name)
	}
	// Terminal pods are never ready, whatever the last container states said.
	if (phase == v1.PodSucceeded && len(unknown) == 0) || phase == v1.PodFailed {
		return terminalCondition(pod, v1.ContainersReady, phase)
	}
	if msg := listMessage("containers with unknown status", unknown, "containers with unready status", unready); msg != "" {
		return condition(pod, v1.ContainersReady, v1.ConditionFalse, ContainersNotReady, msg)
	}
	return condition(pod, v1.ContainersReady, v1.ConditionTrue, "", "")
}

// GeneratePodReadyCondition is ContainersReady, further requiring every readiness gate's
// condition (looked up in conditions) to be True.
func GeneratePodReadyCondition(pod *v1.Pod, conditions []v1.PodCondition, statuses []v1.ContainerStatus, phase v1.PodPhase) v1.PodCondition {
	containersReady := GenerateContainersReadyCondition(pod, statuses, phase)
	if containersReady.Status != v1.ConditionTrue {
		return condition(pod, v1.PodReady, containersReady.Status, containersReady.Reason, containersReady.Message)
	}
	var unready []string
	for _, gate := range pod.Spec.ReadinessGates {
		c := findCondition(conditions, gate.ConditionType)
		switch {
		case c == nil:
			unready = append(unready, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", string(gate.ConditionType)))
		case c.Status != v1.ConditionTrue:
			unready = append(unready, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", string(gate.ConditionType), c.Status))
		}
	}
	if len(unready) > 0 {
		return condition(pod, v1.PodReady, v1.ConditionFalse, ReadinessGatesNotReady, strings.Join(unready, ", "))
	}
	return condition(pod, v1.PodReady, v1.ConditionTrue, "", "")
}

// NeedToReconcilePodReadiness reports a pod with readiness gates whose Ready condition in
// the API no longer matches its gates (another controller changed one): the kubelet must
// sync it to recompute Ready (upstream's NeedToReconcilePodReadiness).
func NeedToReconcilePodReadiness(pod *v1.Pod) bool {
	if len(pod.Spec.ReadinessGates) == 0 {
		return false
	}
	all := append(append([]v1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	want := GeneratePodReadyCondition(pod, pod.Status.Conditions, all, pod.Status.Phase)
	got := findCondition(pod.Status.Conditions, v1.PodReady)
	return got == nil || got.Status != want.Status || got.Message != want.Message
}

// terminalCondition is the False Ready/ContainersReady of a pod in a terminal phase.
func terminalCondition(pod *v1.Pod, typ v1.PodConditionType, phase v1.PodPhase) v1.PodCondition {
	reason := ""
	switch phase {
	case v1.PodFailed:
		reason = PodFailed
	case v1.PodSucceeded:
		reason = PodCompleted
	}
	return condition(pod, typ, v1.ConditionFalse, reason, "")
}

func condition(pod *v1.Pod, typ v1.PodConditionType, status v1.ConditionStatus, reason, message string) v1.PodCondition {
	return v1.PodCondition{Type: typ, ObservedGeneration: pod.Generation, Status: status, Reason: reason, Message: message}
}

// listMessage joins "label: [a b]" parts for the non-empty name lists, as upstream prints them.
func listMessage(label1 string, names1 []string, label2 string, names2 []string) string {
	var parts []string
	if len(names1) > 0 {
		parts = append(parts, fmt.Sprintf("%s: %s", label1, names1))
	}
	if len(names2) > 0 {
		parts = append(parts, fmt.Sprintf("%s: %s", label2, names2))
	}
	return strings.Join(parts, ", ")
}

func findCondition(conditions []v1.PodCondition, typ v1.PodConditionType) *v1.PodCondition {
	for i := range conditions {
		if conditions[i].Type == typ {
			return &conditions[i]
		}
	}
	return nil
}

// kubeletOwnsCondition reports the condition types the kubelet computes and overwrites.
func kubeletOwnsCondition(t v1.PodConditionType) bool {
	switch t {
	case v1.PodScheduled, v1.PodReady, v1.PodInitialized, v1.ContainersReady, v1.PodReadyToStartContainers,
		v1.PodResizePending, v1.PodResizeInProgress:
		return true
	}
	return false
}
