package container

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestContainerRestartPolicyOverridesPods(t *testing.T) {
	never, always := v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyAlways
	spec := &v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways}
	if ContainerShouldRestart(&v1.Container{RestartPolicy: &never}, spec, 1) {
		t.Error("container policy Never restarts")
	}
	c := &v1.Container{RestartPolicy: &never, RestartPolicyRules: []v1.ContainerRestartRule{{
		Action:    v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}}
	if !ContainerShouldRestart(c, spec, 42) || ContainerShouldRestart(c, spec, 1) {
		t.Error("restart rule for exit code 42 not applied")
	}
	if !ContainerShouldRestart(&v1.Container{RestartPolicy: &always}, &v1.PodSpec{RestartPolicy: v1.RestartPolicyNever}, 0) {
		t.Error("sidecar with Always does not restart in a Never pod")
	}
}

func TestShouldContainerBeRestarted(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyOnFailure, Containers: []v1.Container{{Name: "a"}}}}
	c := &pod.Spec.Containers[0]
	cases := []struct {
		status *Status
		want   bool
	}{
		{nil, true},
		{&Status{Name: "a", State: ContainerStateRunning}, false},
		{&Status{Name: "a", State: ContainerStateUnknown}, true},
		{&Status{Name: "a", State: ContainerStateCreated}, true},
		{&Status{Name: "a", State: ContainerStateExited, ExitCode: 0}, false},
		{&Status{Name: "a", State: ContainerStateExited, ExitCode: 2}, true},
	}
	for _, tc := range cases {
		ps := &PodStatus{}
		if tc.status != nil {
			ps.ContainerStatuses = []*Status{tc.status}
		}
		if got := ShouldContainerBeRestarted(c, pod, ps); got != tc.want {
			t.Errorf("%+v: got %v, want %v", tc.status, got, tc.want)
		}
	}
	deleting := pod.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	if ShouldContainerBeRestarted(c, deleting, &PodStatus{}) {
		t.Error("a pod being deleted restarts nothing")
	}
}
