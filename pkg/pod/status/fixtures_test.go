package status

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// t0 is the base time of the fixtures; sandboxes are created at t0, containers after.
var t0 = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func testPod(policy v1.RestartPolicy, containers ...string) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec:       v1.PodSpec{RestartPolicy: policy},
	}
	for _, name := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: name, Image: "busybox:" + name})
	}
	return pod
}

func withInit(pod *v1.Pod, names ...string) *v1.Pod {
	for _, name := range names {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, v1.Container{Name: name, Image: "busybox:" + name})
	}
	return pod
}

func withSidecar(pod *v1.Pod, name string) *v1.Pod {
	always := v1.ContainerRestartPolicyAlways
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, v1.Container{Name: name, Image: "busybox:" + name, RestartPolicy: &always})
	return pod
}

// readySandbox is a ready pod-network sandbox with an IP, created at t0.
func readySandbox() *runtimeapi.PodSandboxStatus {
	return &runtimeapi.PodSandboxStatus{
		Id:        "sb1",
		State:     runtimeapi.PodSandboxState_SANDBOX_READY,
		CreatedAt: t0.UnixNano(),
		Metadata:  &runtimeapi.PodSandboxMetadata{Attempt: 0},
		Network:   &runtimeapi.PodSandboxNetworkStatus{Ip: "10.88.0.5"},
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD},
		}},
	}
}

func runtimeStatus(containers ...*container.Status) *container.PodStatus {
	return &container.PodStatus{
		ID: "uid-1", Name: "p", Namespace: "ns",
		IPs:               []string{"10.88.0.5"},
		SandboxStatuses:   []*runtimeapi.PodSandboxStatus{readySandbox()},
		ContainerStatuses: containers,
	}
}

// running is a running instance created at createdSec and started a second later.
func running(name, id string, createdSec int) *container.Status {
	return &container.Status{
		ID: container.BuildContainerID("containerd", id), Name: name, State: container.ContainerStateRunning,
		CreatedAt: at(createdSec), StartedAt: at(createdSec + 1),
		Image: "docker.io/library/busybox:" + name, ImageRef: "docker.io/library/busybox@sha256:" + name,
	}
}

// exited is an instance created at createdSec that ran for two seconds.
func exited(name, id string, createdSec, code int, reason string) *container.Status {
	return &container.Status{
		ID: container.BuildContainerID("containerd", id), Name: name, State: container.ContainerStateExited,
		CreatedAt: at(createdSec), StartedAt: at(createdSec + 1), FinishedAt: at(createdSec + 3),
		ExitCode: code, Reason: reason,
		Image: "docker.io/library/busybox:" + name, ImageRef: "docker.io/library/busybox@sha256:" + name,
	}
}

func withRestarts(s *container.Status, n int) *container.Status {
	s.RestartCount = n
	return s
}

func fixedNow() time.Time { return at(100) }

func generate(pod *v1.Pod, ps *container.PodStatus, old v1.PodStatus, opts GenerateOptions) v1.PodStatus {
	if opts.Now == nil {
		opts.Now = fixedNow
	}
	return GenerateAPIPodStatus(pod, ps, old, opts)
}

func findContainer(s v1.PodStatus, name string) v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{s.ContainerStatuses, s.InitContainerStatuses, s.EphemeralContainerStatuses} {
		if c, ok := findStatus(list, name); ok {
			return c
		}
	}
	return v1.ContainerStatus{}
}

func getCondition(s v1.PodStatus, t v1.PodConditionType) v1.PodCondition {
	if c := findCondition(s.Conditions, t); c != nil {
		return *c
	}
	return v1.PodCondition{}
}

// API container status builders for phase and condition tables.

func apiRunning(name string) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}
}

func apiStarted(s v1.ContainerStatus, started bool) v1.ContainerStatus {
	s.Started = &started
	return s
}

func apiReady(s v1.ContainerStatus) v1.ContainerStatus {
	s.Ready = true
	return s
}

func apiTerminated(name string, code int32) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
}

func apiWaiting(name string) v1.ContainerStatus {
	return v1.ContainerStatus{Name: name, State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "x"}}}
}

// apiWaitingAfter is waiting to restart after a termination with code.
func apiWaitingAfter(name string, code int32) v1.ContainerStatus {
	s := apiWaiting(name)
	s.LastTerminationState.Terminated = &v1.ContainerStateTerminated{ExitCode: code}
	return s
}
