package status

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

func checkCondition(t *testing.T, got v1.PodCondition, typ v1.PodConditionType, status v1.ConditionStatus, reason, message string) {
	t.Helper()
	if got.Type != typ || got.Status != status || got.Reason != reason || got.Message != message {
		t.Errorf("condition = {%s %s %q %q}, want {%s %s %q %q}", got.Type, got.Status, got.Reason, got.Message, typ, status, reason, message)
	}
}

func TestGeneratePodInitializedCondition(t *testing.T) {
	pod := withInit(testPod(v1.RestartPolicyAlways, "c"), "a", "b")
	sidecarPod := withSidecar(testPod(v1.RestartPolicyAlways, "c"), "s")
	cases := []struct {
		name            string
		pod             *v1.Pod
		statuses        []v1.ContainerStatus
		phase           v1.PodPhase
		status          v1.ConditionStatus
		reason, message string
	}{
		{"no init containers", testPod(v1.RestartPolicyAlways, "c"), nil, v1.PodPending, v1.ConditionTrue, "", ""},
		{"statuses unknown", pod, nil, v1.PodPending, v1.ConditionFalse, UnknownContainerStatuses, ""},
		{"none done", pod, []v1.ContainerStatus{apiRunning("a"), apiWaiting("b")}, v1.PodPending, v1.ConditionFalse, ContainersNotInitialized, "containers with incomplete status: [a b]"},
		{"one unknown, one incomplete", pod, []v1.ContainerStatus{apiRunning("a")}, v1.PodPending, v1.ConditionFalse, ContainersNotInitialized, "containers with unknown status: [b], containers with incomplete status: [a]"},
		{"all done", pod, []v1.ContainerStatus{apiReady(apiTerminated("a", 0)), apiReady(apiTerminated("b", 0))}, v1.PodRunning, v1.ConditionTrue, "", ""},
		{"pod succeeded", pod, []v1.ContainerStatus{apiTerminated("a", 0), apiTerminated("b", 0)}, v1.PodSucceeded, v1.ConditionTrue, PodCompleted, ""},
		{"regular container ran", pod, []v1.ContainerStatus{apiWaiting("a"), apiWaiting("b"), apiRunning("c")}, v1.PodRunning, v1.ConditionTrue, "", ""},
		{"sidecar not started", sidecarPod, []v1.ContainerStatus{apiStarted(apiRunning("s"), false)}, v1.PodPending, v1.ConditionFalse, ContainersNotInitialized, "containers with incomplete status: [s]"},
		{"sidecar started", sidecarPod, []v1.ContainerStatus{apiStarted(apiRunning("s"), true), apiWaiting("c")}, v1.PodPending, v1.ConditionTrue, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkCondition(t, GeneratePodInitializedCondition(tc.pod, tc.statuses, tc.phase), v1.PodInitialized, tc.status, tc.reason, tc.message)
		})
	}
}

func TestGenerateContainersReadyAndPodReadyConditions(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a", "b")
	sidecarPod := withSidecar(testPod(v1.RestartPolicyAlways, "a"), "s")
	cases := []struct {
		name            string
		pod             *v1.Pod
		statuses        []v1.ContainerStatus
		phase           v1.PodPhase
		status          v1.ConditionStatus
		reason, message string
	}{
		{"statuses unknown", pod, nil, v1.PodPending, v1.ConditionFalse, UnknownContainerStatuses, ""},
		{"all ready", pod, []v1.ContainerStatus{apiReady(apiRunning("a")), apiReady(apiRunning("b"))}, v1.PodRunning, v1.ConditionTrue, "", ""},
		{"one unready", pod, []v1.ContainerStatus{apiReady(apiRunning("a")), apiRunning("b")}, v1.PodRunning, v1.ConditionFalse, ContainersNotReady, "containers with unready status: [b]"},
		{"unknown and unready", pod, []v1.ContainerStatus{apiRunning("a")}, v1.PodPending, v1.ConditionFalse, ContainersNotReady, "containers with unknown status: [b], containers with unready status: [a]"},
		{"succeeded", pod, []v1.ContainerStatus{apiTerminated("a", 0), apiTerminated("b", 0)}, v1.PodSucceeded, v1.ConditionFalse, PodCompleted, ""},
		{"failed while still ready", pod, []v1.ContainerStatus{apiReady(apiRunning("a")), apiReady(apiRunning("b"))}, v1.PodFailed, v1.ConditionFalse, PodFailed, ""},
		{"unready sidecar", sidecarPod, []v1.ContainerStatus{apiRunning("s"), apiReady(apiRunning("a"))}, v1.PodRunning, v1.ConditionFalse, ContainersNotReady, "containers with unready status: [s]"},
		{"regular init containers do not count", withInit(testPod(v1.RestartPolicyAlways, "a"), "i"), []v1.ContainerStatus{apiTerminated("i", 0), apiReady(apiRunning("a"))}, v1.PodRunning, v1.ConditionTrue, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkCondition(t, GenerateContainersReadyCondition(tc.pod, tc.statuses, tc.phase), v1.ContainersReady, tc.status, tc.reason, tc.message)
			checkCondition(t, GeneratePodReadyCondition(tc.pod, nil, tc.statuses, tc.phase), v1.PodReady, tc.status, tc.reason, tc.message)
		})
	}
}

func TestPodReadyConditionReadinessGates(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/lb"}, {ConditionType: "example.com/dns"}}
	statuses := []v1.ContainerStatus{apiReady(apiRunning("a"))}

	got := GeneratePodReadyCondition(pod, []v1.PodCondition{{Type: "example.com/lb", Status: v1.ConditionFalse}}, statuses, v1.PodRunning)
	checkCondition(t, got, v1.PodReady, v1.ConditionFalse, ReadinessGatesNotReady,
		`the status of pod readiness gate "example.com/lb" is not "True", but False, corresponding condition of pod readiness gate "example.com/dns" does not exist.`)

	all := []v1.PodCondition{{Type: "example.com/lb", Status: v1.ConditionTrue}, {Type: "example.com/dns", Status: v1.ConditionTrue}}
	checkCondition(t, GeneratePodReadyCondition(pod, all, statuses, v1.PodRunning), v1.PodReady, v1.ConditionTrue, "", "")
}

func TestConditionsCarryGeneration(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Generation = 7
	if got := GenerateContainersReadyCondition(pod, nil, v1.PodPending).ObservedGeneration; got != 7 {
		t.Errorf("observedGeneration = %d, want 7", got)
	}
}

func TestGeneratePodReadyToStartContainersCondition(t *testing.T) {
	notReady := readySandbox()
	notReady.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	noIP := readySandbox()
	noIP.Network.Ip = ""
	hostNS := readySandbox()
	hostNS.Linux.Namespaces.Options.Network = runtimeapi.NamespaceMode_NODE
	hostNetPod := testPod(v1.RestartPolicyAlways, "a")
	hostNetPod.Spec.HostNetwork = true
	hostSandboxNoIP := readySandbox()
	hostSandboxNoIP.Network.Ip = ""
	hostSandboxNoIP.Linux.Namespaces.Options.Network = runtimeapi.NamespaceMode_NODE
	pod := testPod(v1.RestartPolicyAlways, "a")

	cases := []struct {
		name      string
		pod       *v1.Pod
		sandboxes []*runtimeapi.PodSandboxStatus
		want      v1.ConditionStatus
	}{
		{"no sandbox", pod, nil, v1.ConditionFalse},
		{"ready sandbox with IP", pod, []*runtimeapi.PodSandboxStatus{readySandbox()}, v1.ConditionTrue},
		{"newest sandbox not ready", pod, []*runtimeapi.PodSandboxStatus{notReady, readySandbox()}, v1.ConditionFalse},
		{"two ready sandboxes", pod, []*runtimeapi.PodSandboxStatus{readySandbox(), readySandbox()}, v1.ConditionFalse},
		{"no IP", pod, []*runtimeapi.PodSandboxStatus{noIP}, v1.ConditionFalse},
		{"network namespace mode changed", pod, []*runtimeapi.PodSandboxStatus{hostNS}, v1.ConditionFalse},
		{"host network needs no IP", hostNetPod, []*runtimeapi.PodSandboxStatus{hostSandboxNoIP}, v1.ConditionTrue},
		{"ready sandbox after a dead one", pod, []*runtimeapi.PodSandboxStatus{readySandbox(), notReady}, v1.ConditionTrue},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := GeneratePodReadyToStartContainersCondition(tc.pod, &container.PodStatus{SandboxStatuses: tc.sandboxes})
			checkCondition(t, got, v1.PodReadyToStartContainers, tc.want, "", "")
		})
	}
}

func TestNeedToReconcilePodReadinessFollowsGates(t *testing.T) {
	gate := v1.PodConditionType("example.com/ready")
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}, ReadinessGates: []v1.PodReadinessGate{{ConditionType: gate}}}}
	pod.Status = v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "c", Ready: true, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}
	ready := GeneratePodReadyCondition(pod, nil, pod.Status.ContainerStatuses, v1.PodRunning)
	pod.Status.Conditions = []v1.PodCondition{ready}
	if ready.Status != v1.ConditionFalse || NeedToReconcilePodReadiness(pod) {
		t.Fatalf("gate missing: Ready %s, reconcile %v; want False and nothing to do", ready.Status, NeedToReconcilePodReadiness(pod))
	}
	pod.Status.Conditions = append(pod.Status.Conditions, v1.PodCondition{Type: gate, Status: v1.ConditionTrue})
	if !NeedToReconcilePodReadiness(pod) {
		t.Error("gate turned True but Ready is still False: the pod must be synced")
	}
	noGates := pod.DeepCopy()
	noGates.Spec.ReadinessGates = nil
	if NeedToReconcilePodReadiness(noGates) {
		t.Error("a pod without readiness gates never needs this")
	}
}
