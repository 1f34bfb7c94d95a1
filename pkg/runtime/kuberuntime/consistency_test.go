package kuberuntime

import (
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/pod/status"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// restartVariant is one combination of container-level restart settings.
type restartVariant struct {
	name   string
	policy *v1.ContainerRestartPolicy
	// rule42 adds a rule restarting on exit code 42.
	rule42 bool
}

func restartVariants(withAlways bool) []restartVariant {
	p := func(x v1.ContainerRestartPolicy) *v1.ContainerRestartPolicy { return &x }
	out := []restartVariant{
		{name: "inherit"},
		{name: "OnFailure", policy: p(v1.ContainerRestartPolicyOnFailure)},
		{name: "Never", policy: p(v1.ContainerRestartPolicyNever)},
		{name: "Never+restart42", policy: p(v1.ContainerRestartPolicyNever), rule42: true},
	}
	if withAlways {
		out = append(out, restartVariant{name: "Always", policy: p(v1.ContainerRestartPolicyAlways)})
	}
	return out
}

func (v restartVariant) apply(c *v1.Container) {
	c.RestartPolicy = v.policy
	if v.rule42 {
		c.RestartPolicyRules = []v1.ContainerRestartRule{{
			Action:    v1.ContainerRestartRuleActionRestart,
			ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
		}}
	}
}

var podPolicies = []v1.RestartPolicy{v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever}

// phaseOf is the phase the status code reports for this runtime state.
func phaseOf(pod *v1.Pod, ps *container.PodStatus) v1.PodPhase {
	return status.GenerateAPIPodStatus(pod, ps, v1.PodStatus{}, status.GenerateOptions{}).Phase
}

// An exited regular container: the phase says whether the pod goes on (Running) or is
// done (Succeeded/Failed); computePodActions must do the same (restart it, or kill the pod).
func TestPhaseAndActionsAgreeOnExitedContainer(t *testing.T) {
	for _, policy := range podPolicies {
		for _, v := range restartVariants(true) {
			for _, code := range []int{0, 1, 42} {
				t.Run(fmt.Sprintf("pod=%s/container=%s/exit=%d", policy, v.name, code), func(t *testing.T) {
					pod := newPod("p", ctr("a"))
					pod.Spec.RestartPolicy = policy
					v.apply(&pod.Spec.Containers[0])
					ps := &container.PodStatus{
						SandboxStatuses:   []*runtimeapi.PodSandboxStatus{sandbox("sb1", 0)},
						ContainerStatuses: []*container.Status{cs(&pod.Spec.Containers[0], exited, code)},
					}
					phase := phaseOf(pod, ps)
					a := pureManager().computePodActions(pod, ps)
					restarts := slices.Contains(a.ContainersToStart, 0)
					if phase == v1.PodRunning && (!restarts || a.KillPod) {
						t.Errorf("phase Running but actions do not restart the container: %v", a)
					}
					if (phase == v1.PodSucceeded || phase == v1.PodFailed) && (restarts || !a.KillPod) {
						t.Errorf("phase %s but actions %v", phase, a)
					}
				})
			}
		}
	}
}

// A failed init container: the phase is Failed exactly when the runtime gives up on the pod.
func TestPhaseAndActionsAgreeOnFailedInitContainer(t *testing.T) {
	for _, policy := range podPolicies {
		for _, v := range restartVariants(false) {
			for _, code := range []int{1, 42} {
				t.Run(fmt.Sprintf("pod=%s/init=%s/exit=%d", policy, v.name, code), func(t *testing.T) {
					pod := newPod("p", ctr("a"))
					pod.Spec.RestartPolicy = policy
					pod.Spec.InitContainers = []v1.Container{ctr("i0")}
					v.apply(&pod.Spec.InitContainers[0])
					ps := &container.PodStatus{
						SandboxStatuses:   []*runtimeapi.PodSandboxStatus{sandbox("sb1", 0)},
						ContainerStatuses: []*container.Status{cs(&pod.Spec.InitContainers[0], exited, code)},
					}
					phase := phaseOf(pod, ps)
					a := pureManager().computePodActions(pod, ps)
					rerun := slices.Contains(a.InitContainersToStart, 0)
					switch phase {
					case v1.PodFailed:
						if !a.KillPod || rerun {
							t.Errorf("phase Failed but actions %v", a)
						}
					case v1.PodPending:
						if a.KillPod || !rerun {
							t.Errorf("phase Pending but actions do not rerun the init container: %v", a)
						}
					default:
						t.Errorf("unexpected phase %s", phase)
					}
				})
			}
		}
	}
}

// After a sandbox died (e.g. a reboot), the containers the new sandbox runs again must be
// those the phase counts as restartable: a finished container never runs twice.
func TestNewSandboxRestartsOnlyRestartableContainers(t *testing.T) {
	for _, policy := range podPolicies {
		for _, v := range restartVariants(true) {
			for _, code := range []int{0, 1, 42} {
				t.Run(fmt.Sprintf("pod=%s/container=%s/exit=%d", policy, v.name, code), func(t *testing.T) {
					// "done" has exited; "app" was running in the dead sandbox (killed since).
					pod := newPod("p", ctr("done"), ctr("app"))
					pod.Spec.RestartPolicy = policy
					v.apply(&pod.Spec.Containers[0])
					ps := &container.PodStatus{
						SandboxStatuses: []*runtimeapi.PodSandboxStatus{sandbox("sb1", 0, notReady)},
						ContainerStatuses: []*container.Status{
							cs(&pod.Spec.Containers[0], exited, code),
							cs(&pod.Spec.Containers[1], exited, 137),
						},
					}
					a := pureManager().computePodActions(pod, ps)
					shouldRun := container.ContainerShouldRestart(&pod.Spec.Containers[0], &pod.Spec, int32(code))
					if runs := a.CreateSandbox && slices.Contains(a.ContainersToStart, 0); runs != shouldRun {
						t.Errorf("container restartable=%t but new sandbox runs it=%t: %v", shouldRun, runs, a)
					}
				})
			}
		}
	}
}
