package container

import (
	"slices"

	v1 "k8s.io/api/core/v1"
)

// MatchingRestartRule returns the container's first restart rule whose exit-code clause
// matches exitCode.
func MatchingRestartRule(c *v1.Container, exitCode int32) (v1.ContainerRestartRule, bool) {
	for _, rule := range c.RestartPolicyRules {
		if rule.ExitCodes == nil {
			continue
		}
		listed := slices.Contains(rule.ExitCodes.Values, exitCode)
		switch rule.ExitCodes.Operator {
		case v1.ContainerRestartRuleOnExitCodesOpIn:
			if listed {
				return rule, true
			}
		case v1.ContainerRestartRuleOnExitCodesOpNotIn:
			if !listed {
				return rule, true
			}
		}
	}
	return v1.ContainerRestartRule{}, false
}

// ContainerShouldRestart applies the container's restart rules, then its own restart
// policy, then the pod's, to an exit code (upstream's podutil.ContainerShouldRestart).
func ContainerShouldRestart(c *v1.Container, spec *v1.PodSpec, exitCode int32) bool {
	if c.RestartPolicy != nil {
		if rule, ok := MatchingRestartRule(c, exitCode); ok && rule.Action == v1.ContainerRestartRuleActionRestart {
			return true
		}
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways:
			return true
		case v1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case v1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch spec.RestartPolicy {
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	case v1.RestartPolicyNever:
		return false
	default: // Always, and the API default when unset
		return true
	}
}

// ShouldContainerBeRestarted reports whether the next SyncPod would (re)start a container
// (upstream's kubecontainer.ShouldContainerBeRestarted).
func ShouldContainerBeRestarted(c *v1.Container, pod *v1.Pod, podStatus *PodStatus) bool {
	// A pod marked for deletion never restarts anything.
	if pod.DeletionTimestamp != nil {
		return false
	}
	status := podStatus.FindContainerStatusByName(c.Name)
	switch {
	case status == nil:
		// Never started, or every instance was garbage collected.
		return true
	case status.State == ContainerStateRunning:
		return false
	case status.State == ContainerStateUnknown || status.State == ContainerStateCreated:
		return true
	}
	return ContainerShouldRestart(c, &pod.Spec, int32(status.ExitCode))
}
