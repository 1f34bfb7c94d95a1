package status

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

func TestGetPhase(t *testing.T) {
	static := func(p *v1.Pod) *v1.Pod {
		p.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: "file"}
		return p
	}
	neverContainer := func(p *v1.Pod) *v1.Pod {
		never := v1.ContainerRestartPolicyNever
		p.Spec.Containers[0].RestartPolicy = &never
		return p
	}
	restartOn42 := func(p *v1.Pod) *v1.Pod {
		never := v1.ContainerRestartPolicyNever
		p.Spec.Containers[0].RestartPolicy = &never
		p.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{
			Action:    v1.ContainerRestartRuleActionRestart,
			ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
		}}
		return p
	}
	cases := []struct {
		name          string
		pod           *v1.Pod
		statuses      []v1.ContainerStatus
		podIsTerminal bool
		initialized   bool
		want          v1.PodPhase
	}{
		{"all running", testPod(v1.RestartPolicyAlways, "a", "b"), []v1.ContainerStatus{apiRunning("a"), apiRunning("b")}, false, false, v1.PodRunning},
		{"one unknown", testPod(v1.RestartPolicyAlways, "a", "b"), []v1.ContainerStatus{apiRunning("a")}, false, false, v1.PodPending},
		{"one waiting", testPod(v1.RestartPolicyAlways, "a", "b"), []v1.ContainerStatus{apiRunning("a"), apiWaiting("b")}, false, false, v1.PodPending},
		{"no statuses", testPod(v1.RestartPolicyAlways, "a"), nil, false, false, v1.PodPending},
		{"running and stopped", testPod(v1.RestartPolicyNever, "a", "b"), []v1.ContainerStatus{apiRunning("a"), apiTerminated("b", 1)}, false, false, v1.PodRunning},
		{"all stopped, Always", testPod(v1.RestartPolicyAlways, "a", "b"), []v1.ContainerStatus{apiTerminated("a", 0), apiTerminated("b", 1)}, false, false, v1.PodRunning},
		{"waiting to restart, Always", testPod(v1.RestartPolicyAlways, "a"), []v1.ContainerStatus{apiWaitingAfter("a", 1)}, false, false, v1.PodRunning},
		{"all succeeded, Never", testPod(v1.RestartPolicyNever, "a", "b"), []v1.ContainerStatus{apiTerminated("a", 0), apiTerminated("b", 0)}, false, false, v1.PodSucceeded},
		{"one failed, Never", testPod(v1.RestartPolicyNever, "a", "b"), []v1.ContainerStatus{apiTerminated("a", 0), apiTerminated("b", 2)}, false, false, v1.PodFailed},
		{"all succeeded, OnFailure", testPod(v1.RestartPolicyOnFailure, "a"), []v1.ContainerStatus{apiTerminated("a", 0)}, false, false, v1.PodSucceeded},
		{"one failed, OnFailure", testPod(v1.RestartPolicyOnFailure, "a", "b"), []v1.ContainerStatus{apiTerminated("a", 0), apiTerminated("b", 1)}, false, false, v1.PodRunning},
		{"terminal pod, Always, all succeeded", testPod(v1.RestartPolicyAlways, "a"), []v1.ContainerStatus{apiTerminated("a", 0)}, true, false, v1.PodSucceeded},
		{"terminal pod, Always, one failed", testPod(v1.RestartPolicyAlways, "a", "b"), []v1.ContainerStatus{apiTerminated("a", 0), apiTerminated("b", 137)}, true, false, v1.PodFailed},
		{"terminal static pod keeps restart policy", static(testPod(v1.RestartPolicyAlways, "a")), []v1.ContainerStatus{apiTerminated("a", 0)}, true, false, v1.PodRunning},
		{"terminal pod still running", testPod(v1.RestartPolicyAlways, "a"), []v1.ContainerStatus{apiRunning("a")}, true, false, v1.PodRunning},
		{"container policy Never in Always pod", neverContainer(testPod(v1.RestartPolicyAlways, "a")), []v1.ContainerStatus{apiTerminated("a", 1)}, false, false, v1.PodFailed},
		{"restart rule matches exit code", restartOn42(testPod(v1.RestartPolicyNever, "a")), []v1.ContainerStatus{apiTerminated("a", 42)}, false, false, v1.PodRunning},
		{"restart rule does not match", restartOn42(testPod(v1.RestartPolicyNever, "a")), []v1.ContainerStatus{apiTerminated("a", 1)}, false, false, v1.PodFailed},

		{"init running", withInit(testPod(v1.RestartPolicyAlways, "a"), "i"), []v1.ContainerStatus{apiRunning("i"), apiWaiting("a")}, false, false, v1.PodPending},
		{"init missing", withInit(testPod(v1.RestartPolicyAlways, "a"), "i"), nil, false, false, v1.PodPending},
		{"init waiting first time", withInit(testPod(v1.RestartPolicyAlways, "a"), "i"), []v1.ContainerStatus{apiWaiting("i"), apiWaiting("a")}, false, false, v1.PodPending},
		{"init done, containers running", withInit(testPod(v1.RestartPolicyAlways, "a"), "i"), []v1.ContainerStatus{apiTerminated("i", 0), apiRunning("a")}, false, true, v1.PodRunning},
		{"init failed, Never", withInit(testPod(v1.RestartPolicyNever, "a"), "i"), []v1.ContainerStatus{apiTerminated("i", 1), apiWaiting("a")}, false, false, v1.PodFailed},
		{"init failed, OnFailure", withInit(testPod(v1.RestartPolicyOnFailure, "a"), "i"), []v1.ContainerStatus{apiTerminated("i", 1), apiWaiting("a")}, false, false, v1.PodPending},
		{"init waiting after failure, Never", withInit(testPod(v1.RestartPolicyNever, "a"), "i"), []v1.ContainerStatus{apiWaitingAfter("i", 3), apiWaiting("a")}, false, false, v1.PodFailed},
		{"init waiting after failure, Always", withInit(testPod(v1.RestartPolicyAlways, "a"), "i"), []v1.ContainerStatus{apiWaitingAfter("i", 3), apiWaiting("a")}, false, false, v1.PodPending},

		{"sidecar not started, not initialized", withSidecar(testPod(v1.RestartPolicyAlways, "a"), "s"), []v1.ContainerStatus{apiStarted(apiRunning("s"), false), apiWaiting("a")}, false, false, v1.PodPending},
		{"sidecar started, containers running", withSidecar(testPod(v1.RestartPolicyAlways, "a"), "s"), []v1.ContainerStatus{apiStarted(apiRunning("s"), true), apiRunning("a")}, false, true, v1.PodRunning},
		{"sidecar restarting after init", withSidecar(testPod(v1.RestartPolicyAlways, "a"), "s"), []v1.ContainerStatus{apiStarted(apiRunning("s"), false), apiRunning("a")}, false, true, v1.PodRunning},
		{"stopped sidecar does not count", withSidecar(testPod(v1.RestartPolicyNever, "a"), "s"), []v1.ContainerStatus{apiTerminated("s", 137), apiTerminated("a", 0)}, false, true, v1.PodSucceeded},
		{"sidecar unknown", withSidecar(testPod(v1.RestartPolicyNever, "a"), "s"), []v1.ContainerStatus{apiRunning("a")}, false, true, v1.PodPending},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := getPhase(tc.pod, tc.statuses, tc.podIsTerminal, tc.initialized); got != tc.want {
				t.Errorf("getPhase = %s, want %s", got, tc.want)
			}
		})
	}
}
