package podvalidation

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func restartOn(op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) v1.ContainerRestartRule {
	return v1.ContainerRestartRule{
		Action:    v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes},
	}
}

// Container restart policies and rules (ContainerRestartRules, beta and on upstream)
// are implemented by nodelet's runtime manager, so manifests using them must pass.
func TestContainerRestartPoliciesAccepted(t *testing.T) {
	pod := validPod()
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.Containers[0].RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
	pod.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{restartOn(v1.ContainerRestartRuleOnExitCodesOpIn, 42)}
	worker := container("worker")
	worker.RestartPolicy = ptr.To(v1.ContainerRestartPolicyOnFailure)
	pod.Spec.Containers = append(pod.Spec.Containers, worker)
	setup := container("setup")
	setup.RestartPolicy = ptr.To(v1.ContainerRestartPolicyOnFailure)
	setup.RestartPolicyRules = []v1.ContainerRestartRule{restartOn(v1.ContainerRestartRuleOnExitCodesOpNotIn, 1, 2)}
	pod.Spec.InitContainers = []v1.Container{setup}
	if errs := ValidatePod(pod); len(errs) != 0 {
		t.Fatalf("container restart policies rejected: %v", errs)
	}
}

func TestContainerRestartRuleRules(t *testing.T) {
	many := func(n int) []int32 { return make([]int32, n) }
	cases := []struct {
		name  string
		rules []v1.ContainerRestartRule
		// policy is the container's restart policy; nil leaves it unset.
		policy *v1.ContainerRestartPolicy
		want   string
	}{
		{"rules need a policy", []v1.ContainerRestartRule{restartOn(v1.ContainerRestartRuleOnExitCodesOpIn, 42)}, nil,
			`spec.containers[0].restartPolicy: Required value`},
		{"action", []v1.ContainerRestartRule{{Action: "Ignore", ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn}}},
			ptr.To(v1.ContainerRestartPolicyNever), `spec.containers[0].restartPolicyRules[0].action: Unsupported value: "Ignore": supported values: "Restart"`},
		{"exit codes required", []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart}},
			ptr.To(v1.ContainerRestartPolicyNever), `spec.containers[0].restartPolicyRules[0].exitCodes: Required value`},
		{"operator", []v1.ContainerRestartRule{restartOn("Equals", 1)},
			ptr.To(v1.ContainerRestartPolicyNever), `spec.containers[0].restartPolicyRules[0].exitCodes.operator: Unsupported value: "Equals": supported values: "In", "NotIn"`},
		{"too many exit codes", []v1.ContainerRestartRule{restartOn(v1.ContainerRestartRuleOnExitCodesOpIn, many(256)...)},
			ptr.To(v1.ContainerRestartPolicyNever), `spec.containers[0].restartPolicyRules[0].exitCodes.values: Too many: 256: must have at most 255 items`},
		{"too many rules", func() []v1.ContainerRestartRule {
			rules := make([]v1.ContainerRestartRule, 21)
			for i := range rules {
				rules[i] = restartOn(v1.ContainerRestartRuleOnExitCodesOpIn, 42)
			}
			return rules
		}(), ptr.To(v1.ContainerRestartPolicyNever), `spec.containers[0].restartPolicyRules: Too many: 21: must have at most 20 items`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := validPod()
			pod.Spec.Containers[0].RestartPolicy = tc.policy
			pod.Spec.Containers[0].RestartPolicyRules = tc.rules
			errs := ValidatePod(pod)
			for _, err := range errs {
				if strings.HasPrefix(err.Error(), tc.want) {
					return
				}
			}
			t.Fatalf("want an error starting with\n  %s\ngot %v", tc.want, errs)
		})
	}
}
