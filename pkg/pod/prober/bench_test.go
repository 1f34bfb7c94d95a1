package prober

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkWorkerTick is one period of a readiness worker whose exec probe passes: the
// status lookup (a deep copy, as the status manager makes), the probe through a fake
// runner, the result and the metrics. The runtime's side of an exec is not in it.
func BenchmarkWorkerTick(b *testing.B) {
	r := newRig(&testing.T{})
	r.settled()
	p := execProbe()
	p.Exec.Command = []string{"sh", "-c", "test -f /tmp/ready && echo $(PORT)"}
	pod := testPod(v1.Container{ReadinessProbe: p, Env: []v1.EnvVar{{Name: "PORT", Value: "8080"}, {Name: "MODE", Value: "prod"}}})
	r.statuses.set(testUID, realisticStatus())
	w := r.worker(readiness, pod)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if !w.doProbe() {
			b.Fatal("worker stopped")
		}
	}
	b.StopTimer()
	if r.runner.callCount() != b.N {
		b.Fatalf("%d probes for %d ticks", r.runner.callCount(), b.N)
	}
}

// realisticStatus is a running pod of three containers with the conditions, IPs and
// states the status manager keeps.
func realisticStatus() v1.PodStatus {
	s := running("c1", epoch, true)
	s.PodIPs = []v1.PodIP{{IP: "10.88.0.7"}}
	s.HostIP, s.HostIPs = "192.0.2.1", []v1.HostIP{{IP: "192.0.2.1"}}
	start := metav1.NewTime(epoch)
	s.StartTime = &start
	for _, c := range []v1.PodConditionType{v1.PodReadyToStartContainers, v1.PodInitialized, v1.PodReady, v1.ContainersReady, v1.PodScheduled} {
		s.Conditions = append(s.Conditions, v1.PodCondition{Type: c, Status: v1.ConditionTrue, LastTransitionTime: start})
	}
	for _, name := range []string{"sidecar", "metrics"} {
		cs := s.ContainerStatuses[0]
		cs.Name, cs.ContainerID = name, "containerd://"+name
		s.ContainerStatuses = append(s.ContainerStatuses, cs)
	}
	for i := range s.ContainerStatuses {
		cs := &s.ContainerStatuses[i]
		cs.Image, cs.ImageID = "docker.io/library/busybox:1.36", "docker.io/library/busybox@sha256:0123456789abcdef"
		cs.RestartCount, cs.Ready = 1, true
		cs.LastTerminationState.Terminated = &v1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", StartedAt: start, FinishedAt: start, ContainerID: "containerd://old"}
	}
	return s
}
