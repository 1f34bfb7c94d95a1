//go:build e2e

package e2e

import (
	"context"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/pod/status"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

var containerIDPattern = regexp.MustCompile(`^containerd://[0-9a-f]{64}$`)

func statusCondition(s v1.PodStatus, t v1.PodConditionType) v1.PodCondition {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c
		}
	}
	return v1.PodCondition{}
}

func apiContainer(t *testing.T, s v1.PodStatus, name string) v1.ContainerStatus {
	t.Helper()
	for _, list := range [][]v1.ContainerStatus{s.ContainerStatuses, s.InitContainerStatuses} {
		for _, c := range list {
			if c.Name == name {
				return c
			}
		}
	}
	t.Fatalf("no status for container %s", name)
	return v1.ContainerStatus{}
}

// TestPodStatusFromRealRuntime generates API statuses from what containerd reports: a running
// container, a failed one with its termination message, then the whole pod killed.
func TestPodStatusFromRealRuntime(t *testing.T) {
	r := newRig(t)
	pod := newPod("status", v1.RestartPolicyNever, []string{"sleep", "3600"}, []string{"sh", "-c", "echo bye > /dev/termination-log; exit 3"})
	pod.Spec.Containers[1].TerminationMessagePath = "/dev/termination-log"
	one := resource.MustParse("100m")
	mem := resource.MustParse("64Mi")
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: one, v1.ResourceMemory: mem},
		Limits:   v1.ResourceList{v1.ResourceCPU: one, v1.ResourceMemory: mem},
	}
	r.track(t, pod)
	r.syncUntil(t, pod, defaultBackOff(), 30*time.Second, func(s *container.PodStatus) bool {
		c1 := s.FindContainerStatusByName("c1")
		return running(s, "c0") && c1 != nil && c1.State == container.ContainerStateExited
	})

	ps := r.status(t, pod)
	got := status.GenerateAPIPodStatus(pod, ps, v1.PodStatus{}, status.GenerateOptions{HostIPs: []string{"192.168.1.2"}})

	if got.Phase != v1.PodRunning {
		t.Errorf("phase %s, want Running", got.Phase)
	}
	if ip := net.ParseIP(got.PodIP); ip == nil || ip.To4() == nil || !ip.IsPrivate() || len(got.PodIPs) != 1 {
		t.Errorf("pod IPs %q %v", got.PodIP, got.PodIPs)
	}
	if got.HostIP != "192.168.1.2" || got.QOSClass != v1.PodQOSBurstable {
		t.Errorf("host IP %q, qos %s", got.HostIP, got.QOSClass)
	}
	c0 := apiContainer(t, got, "c0")
	if c0.State.Running == nil || c0.State.Running.StartedAt.IsZero() || !c0.Ready || c0.Started == nil || !*c0.Started {
		t.Errorf("c0: %+v", c0)
	}
	if !containerIDPattern.MatchString(c0.ContainerID) || !strings.Contains(c0.ImageID, "sha256:") || !strings.Contains(c0.Image, "busybox") {
		t.Errorf("c0 ids: container %q image %q imageID %q", c0.ContainerID, c0.Image, c0.ImageID)
	}
	if c0.Resources == nil {
		t.Errorf("c0 has no resources")
	} else {
		t.Logf("c0 resources reported: %+v (runtime: %+v)", c0.Resources, ps.FindContainerStatusByName("c0").Resources)
		if q := c0.Resources.Limits[v1.ResourceMemory]; q.Cmp(mem) != 0 {
			t.Errorf("c0 memory limit %s, want %s", q.String(), mem.String())
		}
	}
	c1 := apiContainer(t, got, "c1")
	term := c1.State.Terminated
	if term == nil || term.ExitCode != 3 || term.Reason != "Error" || term.Message != "bye\n" || term.ContainerID != c1.ContainerID {
		t.Fatalf("c1 terminated state: %+v", c1.State)
	}
	// (containerd may report a short-lived container finishing before it started.)
	if term.StartedAt.IsZero() || term.FinishedAt.IsZero() || c1.Ready {
		t.Errorf("c1 times/ready: %+v ready=%v", term, c1.Ready)
	}
	if c := statusCondition(got, v1.PodReadyToStartContainers); c.Status != v1.ConditionTrue {
		t.Errorf("PodReadyToStartContainers %+v", c)
	}
	if c := statusCondition(got, v1.PodReady); c.Status != v1.ConditionFalse || c.Message != "containers with unready status: [c1]" {
		t.Errorf("Ready %+v", c)
	}

	// The pod worker kills the pod and reports it terminal.
	m := status.NewManager(nil, nil)
	m.SetPodStatus(pod, got)
	if err := r.m.KillPod(context.Background(), pod, container.ConvertPodStatusToRunningPod("containerd", ps), ptr.To[int64](1)); err != nil {
		t.Fatal(err)
	}
	old, _ := m.GetPodStatus(pod.UID)
	// As upstream's SyncTerminatingPod does, the stopped pod keeps the IPs it had: the
	// runtime reports none for a stopped sandbox.
	stopped := r.status(t, pod)
	if len(stopped.IPs) != 0 {
		t.Errorf("containerd reports IPs %v for a stopped sandbox", stopped.IPs)
	}
	stopped.IPs = ps.IPs
	final := status.GenerateAPIPodStatus(pod, stopped, old, status.GenerateOptions{PodIsTerminal: true})
	m.SetPodStatus(pod, final)
	m.TerminatePod(pod)
	final, _ = m.GetPodStatus(pod.UID)
	if final.PodIP != got.PodIP {
		t.Errorf("final pod IP %q, want %q kept", final.PodIP, got.PodIP)
	}
	if final.Phase != v1.PodFailed {
		t.Errorf("final phase %s, want Failed", final.Phase)
	}
	if k := apiContainer(t, final, "c0").State.Terminated; k == nil || k.ExitCode == 0 || k.FinishedAt.Nanosecond() != 0 {
		t.Errorf("killed c0: %+v", apiContainer(t, final, "c0").State)
	}
	if c := statusCondition(final, v1.PodReadyToStartContainers); c.Status != v1.ConditionFalse {
		t.Errorf("PodReadyToStartContainers after kill %+v", c)
	}
	if !final.StartTime.Equal(old.StartTime) {
		t.Errorf("start time changed: %v -> %v", old.StartTime, final.StartTime)
	}
}

// TestCrashLoopBackOffStatus restarts a failing container until the runtime manager backs off,
// and checks the status shows CrashLoopBackOff over the last termination.
func TestCrashLoopBackOffStatus(t *testing.T) {
	r := newRig(t)
	pod := newPod("crash", v1.RestartPolicyAlways, []string{"sh", "-c", "exit 1"})
	r.track(t, pod)
	reasons := status.NewReasonCache()
	backOff := defaultBackOff()
	r.syncUntil(t, pod, backOff, 30*time.Second, func(s *container.PodStatus) bool {
		c := s.FindContainerStatusByName("c0")
		return c != nil && c.State == container.ContainerStateExited && c.RestartCount >= 1
	})
	ps := r.status(t, pod)
	// One more sync hits the back-off.
	result := r.syncPod(pod, ps, backOff)
	reasons.Update(pod.UID, result)
	got := status.GenerateAPIPodStatus(pod, ps, v1.PodStatus{}, status.GenerateOptions{
		BackOffReasons: func(name string) (string, string, bool) { return reasons.Get(pod.UID, name) },
	})
	c := apiContainer(t, got, "c0")
	t.Logf("c0: %+v", c)
	if c.State.Waiting == nil || c.State.Waiting.Reason != "CrashLoopBackOff" || !strings.Contains(c.State.Waiting.Message, "back-off") {
		t.Errorf("state %+v, want waiting CrashLoopBackOff", c.State)
	}
	if last := c.LastTerminationState.Terminated; last == nil || last.ExitCode != 1 || last.Reason != "Error" {
		t.Errorf("last termination %+v", c.LastTerminationState)
	}
	if c.RestartCount < 1 || got.Phase != v1.PodRunning {
		t.Errorf("restarts %d phase %s", c.RestartCount, got.Phase)
	}
}

// TestImagePullFailureStatus shows the pull error as the waiting reason.
func TestImagePullFailureStatus(t *testing.T) {
	r := newRig(t)
	pod := newPod("pullfail", v1.RestartPolicyAlways, []string{"true"})
	pod.Spec.Containers[0].Image = "registry.invalid/nodelet/absent:1"
	r.track(t, pod)
	reasons := status.NewReasonCache()
	ps := r.status(t, pod)
	reasons.Update(pod.UID, r.syncPod(pod, ps, defaultBackOff()))
	got := status.GenerateAPIPodStatus(pod, r.status(t, pod), v1.PodStatus{}, status.GenerateOptions{
		BackOffReasons: func(name string) (string, string, bool) { return reasons.Get(pod.UID, name) },
	})
	c := apiContainer(t, got, "c0")
	t.Logf("c0: %+v", c)
	if c.State.Waiting == nil || c.State.Waiting.Reason != "ErrImagePull" || c.Image != pod.Spec.Containers[0].Image {
		t.Errorf("state %+v image %q, want waiting ErrImagePull", c.State, c.Image)
	}
	if got.Phase != v1.PodPending {
		t.Errorf("phase %s", got.Phase)
	}
}

// TestInitAndOOMStatuses runs an init container, then a container the kernel OOM-kills.
func TestInitAndOOMStatuses(t *testing.T) {
	r := newRig(t)
	pod := newPod("oom", v1.RestartPolicyNever, []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"})
	limit := resource.MustParse("16Mi")
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: limit}
	pod.Spec.InitContainers = []v1.Container{{Name: "init", Image: busybox, Command: []string{"true"}, ImagePullPolicy: v1.PullIfNotPresent}}
	r.track(t, pod)
	r.syncUntil(t, pod, defaultBackOff(), 30*time.Second, func(s *container.PodStatus) bool {
		c := s.FindContainerStatusByName("c0")
		return c != nil && c.State == container.ContainerStateExited
	})
	got := status.GenerateAPIPodStatus(pod, r.status(t, pod), v1.PodStatus{}, status.GenerateOptions{})
	init := apiContainer(t, got, "init")
	if term := init.State.Terminated; term == nil || term.Reason != "Completed" || term.ExitCode != 0 || !init.Ready {
		t.Errorf("init: %+v ready=%v", init.State, init.Ready)
	}
	if c := statusCondition(got, v1.PodInitialized); c.Status != v1.ConditionTrue {
		t.Errorf("Initialized %+v", c)
	}
	c0 := apiContainer(t, got, "c0")
	if term := c0.State.Terminated; term == nil || term.Reason != "OOMKilled" || term.ExitCode != 137 {
		t.Errorf("c0: %+v", c0.State)
	}
	if got.Phase != v1.PodFailed {
		t.Errorf("phase %s, want Failed", got.Phase)
	}
}
