package status

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

func waitingReason(s v1.ContainerStatus) string {
	if s.State.Waiting == nil {
		return "<not waiting>"
	}
	return s.State.Waiting.Reason
}

func TestDefaultWaitingReasons(t *testing.T) {
	got := generate(testPod(v1.RestartPolicyAlways, "a"), runtimeStatus(), v1.PodStatus{}, GenerateOptions{})
	if r := waitingReason(findContainer(got, "a")); r != ContainerCreating {
		t.Errorf("without init containers: waiting reason %q, want %q", r, ContainerCreating)
	}
	if got.Phase != v1.PodPending {
		t.Errorf("phase %s, want Pending", got.Phase)
	}

	got = generate(withInit(testPod(v1.RestartPolicyAlways, "a"), "i"), runtimeStatus(), v1.PodStatus{}, GenerateOptions{})
	for _, name := range []string{"a", "i"} {
		if r := waitingReason(findContainer(got, name)); r != PodInitializing {
			t.Errorf("with init containers: %s waiting reason %q, want %q", name, r, PodInitializing)
		}
	}
	if c := findContainer(got, "a"); c.Image != "busybox:a" {
		t.Errorf("image of a container not yet created = %q, want the spec's", c.Image)
	}
}

func TestRunningContainerStatus(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	got := generate(pod, runtimeStatus(withRestarts(running("a", "id-a", 5), 2)), v1.PodStatus{}, GenerateOptions{})
	want := v1.ContainerStatus{
		Name:         "a",
		State:        v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(at(6))}},
		Ready:        true,
		RestartCount: 2,
		Image:        "docker.io/library/busybox:a",
		ImageID:      "docker.io/library/busybox@sha256:a",
		ContainerID:  "containerd://id-a",
		Started:      ptrTo(true),
		Resources:    &v1.ResourceRequirements{},
	}
	if c := findContainer(got, "a"); !reflect.DeepEqual(c, want) {
		t.Errorf("status:\n got %+v\nwant %+v", c, want)
	}
	if got.Phase != v1.PodRunning {
		t.Errorf("phase %s, want Running", got.Phase)
	}
	if got.PodIP != "10.88.0.5" || len(got.PodIPs) != 1 {
		t.Errorf("pod IPs %q %v", got.PodIP, got.PodIPs)
	}
	if got.QOSClass != v1.PodQOSBestEffort {
		t.Errorf("qos %s", got.QOSClass)
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestTerminatedContainerStatus(t *testing.T) {
	for _, reason := range []string{"Completed", "Error", "OOMKilled", "ContainerCannotRun"} {
		t.Run(reason, func(t *testing.T) {
			cs := exited("a", "id-a", 5, 137, reason)
			cs.Message = "bye"
			got := generate(testPod(v1.RestartPolicyNever, "a"), runtimeStatus(cs), v1.PodStatus{}, GenerateOptions{})
			want := &v1.ContainerStateTerminated{
				ExitCode: 137, Reason: reason, Message: "bye",
				StartedAt: metav1.NewTime(at(6)), FinishedAt: metav1.NewTime(at(8)),
				ContainerID: "containerd://id-a",
			}
			c := findContainer(got, "a")
			if !reflect.DeepEqual(c.State.Terminated, want) {
				t.Errorf("terminated = %+v, want %+v", c.State.Terminated, want)
			}
			if c.Ready || c.Started == nil || *c.Started {
				t.Errorf("a terminated container is neither ready nor started: ready=%v started=%v", c.Ready, c.Started)
			}
			if got.Phase != v1.PodFailed {
				t.Errorf("phase %s, want Failed", got.Phase)
			}
		})
	}
}

func TestCreatedContainerIsWaitingWithoutReason(t *testing.T) {
	cs := running("a", "id-a", 5)
	cs.State = container.ContainerStateCreated
	got := generate(testPod(v1.RestartPolicyAlways, "a"), runtimeStatus(cs), v1.PodStatus{}, GenerateOptions{})
	if c := findContainer(got, "a"); c.State.Waiting == nil || c.State.Waiting.Reason != "" || c.ContainerID != "containerd://id-a" {
		t.Errorf("created container status = %+v", c)
	}
}

func TestLastTerminationStateFromPreviousInstance(t *testing.T) {
	ps := runtimeStatus(
		withRestarts(exited("a", "old", 5, 1, "Error"), 0),
		withRestarts(running("a", "new", 20), 1),
		withRestarts(exited("a", "older", 1, 2, "Error"), 0),
	)
	got := generate(testPod(v1.RestartPolicyAlways, "a"), ps, v1.PodStatus{}, GenerateOptions{})
	c := findContainer(got, "a")
	if c.ContainerID != "containerd://new" || c.State.Running == nil || c.RestartCount != 1 {
		t.Fatalf("current state from the newest instance: %+v", c)
	}
	last := c.LastTerminationState.Terminated
	if last == nil || last.ContainerID != "containerd://old" || last.ExitCode != 1 || last.Reason != "Error" {
		t.Errorf("last termination from the previous instance: %+v", c.LastTerminationState)
	}
}

func TestBackOffReasons(t *testing.T) {
	reasons := map[string][2]string{
		"crash": {"CrashLoopBackOff", "back-off 10s restarting failed container=crash"},
		"pull":  {"ErrImagePull", "pull failed"},
		"up":    {"CrashLoopBackOff", "stale"},
		"done":  {"CrashLoopBackOff", "stale"},
	}
	opts := GenerateOptions{BackOffReasons: func(name string) (string, string, bool) {
		r, ok := reasons[name]
		return r[0], r[1], ok
	}}

	t.Run("restartable containers show the failure", func(t *testing.T) {
		pod := testPod(v1.RestartPolicyAlways, "crash", "pull", "up", "quiet")
		ps := runtimeStatus(
			withRestarts(exited("crash", "id-c", 5, 1, "Error"), 3),
			running("up", "id-u", 5),
			exited("quiet", "id-q", 5, 1, "Error"),
		)
		got := generate(pod, ps, v1.PodStatus{}, opts)

		crash := findContainer(got, "crash")
		if crash.State.Waiting == nil || crash.State.Waiting.Reason != "CrashLoopBackOff" || crash.State.Waiting.Message != reasons["crash"][1] {
			t.Errorf("crash state = %+v", crash.State)
		}
		if crash.LastTerminationState.Terminated == nil || crash.LastTerminationState.Terminated.ExitCode != 1 || crash.RestartCount != 3 {
			t.Errorf("crash keeps its termination as last state: %+v restarts=%d", crash.LastTerminationState, crash.RestartCount)
		}
		if r := waitingReason(findContainer(got, "pull")); r != "ErrImagePull" {
			t.Errorf("pull waiting reason %q, want ErrImagePull", r)
		}
		if findContainer(got, "up").State.Running == nil {
			t.Errorf("a running container ignores a stale reason")
		}
		if findContainer(got, "quiet").State.Terminated == nil {
			t.Errorf("without a recorded reason the terminated state stays")
		}
	})
	t.Run("containers that will not restart ignore it", func(t *testing.T) {
		pod := testPod(v1.RestartPolicyOnFailure, "done")
		got := generate(pod, runtimeStatus(exited("done", "id-d", 5, 0, "Completed")), v1.PodStatus{}, opts)
		if findContainer(got, "done").State.Terminated == nil {
			t.Errorf("a succeeded OnFailure container stays terminated")
		}
	})
	t.Run("pod being deleted ignores it", func(t *testing.T) {
		pod := testPod(v1.RestartPolicyAlways, "crash")
		pod.DeletionTimestamp = &metav1.Time{Time: at(50)}
		got := generate(pod, runtimeStatus(exited("crash", "id-c", 5, 1, "Error")), v1.PodStatus{}, opts)
		if findContainer(got, "crash").State.Terminated == nil {
			t.Errorf("a deleted pod's container stays terminated")
		}
	})
}

func TestUnknownStateAfterRunningIsContainerStatusUnknown(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	old := generate(pod, runtimeStatus(withRestarts(running("a", "id-a", 5), 4)), v1.PodStatus{}, GenerateOptions{})
	cs := withRestarts(running("a", "id-a", 5), 4)
	cs.State = container.ContainerStateUnknown
	got := generate(pod, runtimeStatus(cs), old, GenerateOptions{})
	c := findContainer(got, "a")
	want := &v1.ContainerStateTerminated{Reason: "ContainerStatusUnknown", Message: "The container could not be located when the pod was terminated", ExitCode: 137}
	if !reflect.DeepEqual(c.State.Terminated, want) || c.RestartCount != 5 {
		t.Errorf("state %+v restarts %d, want %+v and 5", c.State, c.RestartCount, want)
	}

	// Without a running old status, unknown reads as waiting.
	got = generate(pod, runtimeStatus(cs), v1.PodStatus{}, GenerateOptions{})
	if c := findContainer(got, "a"); c.State.Waiting == nil {
		t.Errorf("unknown without history: %+v", c.State)
	}
}

func TestRunningContainerMissingFromRuntime(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	old := generate(pod, runtimeStatus(withRestarts(running("a", "id-a", 5), 1)), v1.PodStatus{}, GenerateOptions{})

	got := generate(pod, runtimeStatus(), old, GenerateOptions{})
	c := findContainer(got, "a")
	want := &v1.ContainerStateTerminated{Reason: "ContainerStatusUnknown", Message: "The container could not be located when the pod was deleted.  The container used to be Running", ExitCode: 137}
	if !reflect.DeepEqual(c.LastTerminationState.Terminated, want) || c.RestartCount != 2 || waitingReason(c) != ContainerCreating {
		t.Errorf("status %+v", c)
	}
	if got.Phase != v1.PodRunning {
		t.Errorf("phase %s: the lost container counts as stopped and restarting", got.Phase)
	}

	pod.DeletionTimestamp = &metav1.Time{Time: at(50)}
	got = generate(pod, runtimeStatus(), old, GenerateOptions{})
	if c := findContainer(got, "a"); c.RestartCount != 1 {
		t.Errorf("a pod being deleted does not count a restart: %d", c.RestartCount)
	}
}

func TestTerminatedOldStatusSurvivesGarbageCollection(t *testing.T) {
	pod := testPod(v1.RestartPolicyNever, "a")
	old := generate(pod, runtimeStatus(exited("a", "id-a", 5, 0, "Completed")), v1.PodStatus{}, GenerateOptions{PodIsTerminal: true})
	got := generate(pod, runtimeStatus(), old, GenerateOptions{PodIsTerminal: true})
	if c := findContainer(got, "a"); c.State.Terminated == nil || c.State.Terminated.Reason != "Completed" {
		t.Errorf("status %+v", c)
	}
	if got.Phase != v1.PodSucceeded {
		t.Errorf("phase %s", got.Phase)
	}
}

func TestInitContainersProgression(t *testing.T) {
	pod := withInit(testPod(v1.RestartPolicyAlways, "a"), "i0", "i1")

	// i0 done, i1 running: pending, not initialized, regular containers wait.
	got := generate(pod, runtimeStatus(exited("i0", "id-0", 1, 0, "Completed"), running("i1", "id-1", 5)), v1.PodStatus{}, GenerateOptions{})
	if got.Phase != v1.PodPending {
		t.Errorf("phase %s, want Pending", got.Phase)
	}
	checkCondition(t, getCondition(got, v1.PodInitialized), v1.PodInitialized, v1.ConditionFalse, ContainersNotInitialized, "containers with incomplete status: [i1]")
	checkCondition(t, getCondition(got, v1.PodReady), v1.PodReady, v1.ConditionFalse, ContainersNotReady, "containers with unready status: [a]")
	if names := []string{got.InitContainerStatuses[0].Name, got.InitContainerStatuses[1].Name}; names[0] != "i0" || names[1] != "i1" {
		t.Errorf("init statuses in spec order: %v", names)
	}
	if i0 := findContainer(got, "i0"); !i0.Ready {
		t.Errorf("a completed init container is ready")
	}
	if i1 := findContainer(got, "i1"); i1.Ready {
		t.Errorf("a running init container is not ready")
	}
	if r := waitingReason(findContainer(got, "a")); r != PodInitializing {
		t.Errorf("regular container waits with %q", r)
	}

	// All done, a running: initialized and running.
	ps := runtimeStatus(exited("i0", "id-0", 1, 0, "Completed"), exited("i1", "id-1", 5, 0, "Completed"), running("a", "id-a", 10))
	got = generate(pod, ps, got, GenerateOptions{})
	if got.Phase != v1.PodRunning {
		t.Errorf("phase %s, want Running", got.Phase)
	}
	checkCondition(t, getCondition(got, v1.PodInitialized), v1.PodInitialized, v1.ConditionTrue, "", "")
	checkCondition(t, getCondition(got, v1.PodReady), v1.PodReady, v1.ConditionTrue, "", "")

	// The init containers are garbage collected: with regular containers created they
	// count as completed.
	got = generate(pod, runtimeStatus(running("a", "id-a", 10)), v1.PodStatus{}, GenerateOptions{})
	i0 := findContainer(got, "i0")
	if i0.State.Terminated == nil || i0.State.Terminated.Reason != "Completed" || i0.State.Terminated.Message != msgInitLost {
		t.Errorf("lost init container: %+v", i0.State)
	}
	if got.Phase != v1.PodRunning {
		t.Errorf("phase %s, want Running", got.Phase)
	}
}

func TestFailedInitContainerFailsNeverPod(t *testing.T) {
	pod := withInit(testPod(v1.RestartPolicyNever, "a"), "i")
	got := generate(pod, runtimeStatus(exited("i", "id-i", 1, 3, "Error")), v1.PodStatus{}, GenerateOptions{})
	if got.Phase != v1.PodFailed {
		t.Errorf("phase %s, want Failed", got.Phase)
	}
	checkCondition(t, getCondition(got, v1.PodReady), v1.PodReady, v1.ConditionFalse, PodFailed, "")
}

func TestPhaseNeverLeavesTerminal(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	ps := runtimeStatus(running("a", "id-a", 5))

	got := generate(pod, ps, v1.PodStatus{Phase: v1.PodSucceeded, Reason: "r", Message: "m"}, GenerateOptions{})
	if got.Phase != v1.PodSucceeded || got.Reason != "r" || got.Message != "m" {
		t.Errorf("status manager's terminal phase kept: %s %q %q", got.Phase, got.Reason, got.Message)
	}
	pod.Status.Phase = v1.PodFailed
	got = generate(pod, ps, v1.PodStatus{Phase: v1.PodRunning}, GenerateOptions{})
	if got.Phase != v1.PodFailed {
		t.Errorf("API's terminal phase kept: %s", got.Phase)
	}
	got = generate(pod, ps, v1.PodStatus{Phase: v1.PodSucceeded}, GenerateOptions{})
	if got.Phase != v1.PodFailed {
		t.Errorf("API's terminal phase wins over the status manager's: %s", got.Phase)
	}
}

func TestReasonKeptWhilePhaseUnchanged(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	ps := runtimeStatus(running("a", "id-a", 5))
	got := generate(pod, ps, v1.PodStatus{Phase: v1.PodRunning, Reason: "r"}, GenerateOptions{})
	if got.Reason != "r" {
		t.Errorf("reason %q, want kept", got.Reason)
	}
	got = generate(pod, ps, v1.PodStatus{Phase: v1.PodPending, Reason: "r"}, GenerateOptions{})
	if got.Reason != "" {
		t.Errorf("reason %q, want dropped with the phase change", got.Reason)
	}
}

func TestShouldEvict(t *testing.T) {
	opts := GenerateOptions{ShouldEvict: func(*v1.Pod) (bool, string, string) {
		return true, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
	}}
	got := generate(testPod(v1.RestartPolicyAlways, "a"), runtimeStatus(running("a", "id-a", 5)), v1.PodStatus{}, opts)
	if got.Phase != v1.PodFailed || got.Reason != "DeadlineExceeded" {
		t.Errorf("evicted: %s %q", got.Phase, got.Reason)
	}
}

func TestReadinessAndStartupProbes(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{}
	pod.Spec.Containers[0].StartupProbe = &v1.Probe{}
	ps := runtimeStatus(running("a", "id-a", 5))
	id := container.BuildContainerID("containerd", "id-a")
	readiness, startup := results.NewManager(), results.NewManager()
	opts := GenerateOptions{Readiness: readiness, Startup: startup}

	check := func(wantStarted, wantReady bool, old v1.PodStatus) v1.PodStatus {
		t.Helper()
		got := generate(pod, ps, old, opts)
		c := findContainer(got, "a")
		if c.Started == nil || *c.Started != wantStarted || c.Ready != wantReady {
			t.Errorf("started=%v ready=%v, want %v %v", c.Started, c.Ready, wantStarted, wantReady)
		}
		return got
	}
	check(false, false, v1.PodStatus{}) // probes not run yet
	startup.Set(id, results.Failure, pod)
	check(false, false, v1.PodStatus{})
	startup.Set(id, results.Success, pod)
	check(true, false, v1.PodStatus{}) // readiness not run yet
	readiness.Set(id, results.Success, pod)
	got := check(true, true, v1.PodStatus{})
	checkCondition(t, getCondition(got, v1.ContainersReady), v1.ContainersReady, v1.ConditionTrue, "", "")
	readiness.Set(id, results.Failure, pod)
	check(true, false, v1.PodStatus{})

	// A started container stays started without a result (e.g. after a restart).
	startup.Remove(id)
	check(true, false, got)
}

// A kubelet that starts while containers run (a restart, or a switch from another kubelet)
// keeps them ready until their first readiness probe if the pod was Ready, as upstream does
// since v1.35; a container it started itself waits for its probe as usual.
func TestReadinessKeptAcrossKubeletRestart(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a", "plain")
	pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{}
	ps := runtimeStatus(running("a", "id-a", 5), running("plain", "id-p", 5))
	readiness := results.NewManager()
	opts := GenerateOptions{Readiness: readiness, KubeletStart: at(60)} // containers started at 6 s
	readyIn := func(p *v1.Pod) (a, plain bool) {
		got := generate(p, ps, p.Status, opts)
		return findContainer(got, "a").Ready, findContainer(got, "plain").Ready
	}
	wasReady := pod.DeepCopy()
	wasReady.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}
	if a, plain := readyIn(wasReady); !a || !plain {
		t.Errorf("pod was Ready, no probe yet: ready a=%v plain=%v, want both", a, plain)
	}
	if a, plain := readyIn(pod); a || !plain {
		t.Errorf("pod was not Ready: ready a=%v plain=%v, want plain only", a, plain)
	}
	readiness.Set(container.BuildContainerID("containerd", "id-a"), results.Failure, pod)
	if a, _ := readyIn(wasReady); a {
		t.Error("a failed first probe left the container ready")
	}
	readiness.Remove(container.BuildContainerID("containerd", "id-a"))
	opts.KubeletStart = at(10) // the kubelet was there when the containers started
	if a, _ := readyIn(wasReady); a {
		t.Error("a container this kubelet started is ready before its probe passed")
	}
}

// A new instance of a container (restarted after a liveness failure, say) is not started
// until its own startup probe passes, even if the last status showed the old instance
// started; without a readiness probe it would otherwise be reported ready at once.
func TestRestartedInstanceIsNotStartedBeforeItsStartupProbe(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Spec.Containers[0].StartupProbe = &v1.Probe{}
	startup := results.NewManager()
	opts := GenerateOptions{Startup: startup}
	oldID := container.BuildContainerID("containerd", "id-a1")
	startup.Set(oldID, results.Success, pod)
	old := generate(pod, runtimeStatus(running("a", "id-a1", 5)), v1.PodStatus{}, opts)
	if c := findContainer(old, "a"); c.Started == nil || !*c.Started || !c.Ready {
		t.Fatalf("first instance: started=%v ready=%v, want both", c.Started, c.Ready)
	}

	ps := runtimeStatus(withRestarts(running("a", "id-a2", 20), 1), exited("a", "id-a1", 5, 137, "Error"))
	got := generate(pod, ps, old, opts)
	if c := findContainer(got, "a"); c.Started == nil || *c.Started || c.Ready {
		t.Errorf("new instance without a startup result: started=%v ready=%v, want neither", c.Started, c.Ready)
	}
	startup.Set(container.BuildContainerID("containerd", "id-a2"), results.Success, pod)
	got = generate(pod, ps, got, opts)
	if c := findContainer(got, "a"); c.Started == nil || !*c.Started || !c.Ready {
		t.Errorf("new instance started: started=%v ready=%v, want both", c.Started, c.Ready)
	}
}

func TestSidecarReadiness(t *testing.T) {
	pod := withSidecar(testPod(v1.RestartPolicyAlways, "a"), "s")
	pod.Spec.InitContainers[0].ReadinessProbe = &v1.Probe{}
	ps := runtimeStatus(running("s", "id-s", 1), running("a", "id-a", 5))
	readiness := results.NewManager()
	got := generate(pod, ps, v1.PodStatus{}, GenerateOptions{Readiness: readiness})
	s := findContainer(got, "s")
	if s.Started == nil || !*s.Started || s.Ready {
		t.Errorf("sidecar started=%v ready=%v, want started, not ready", s.Started, s.Ready)
	}
	checkCondition(t, getCondition(got, v1.ContainersReady), v1.ContainersReady, v1.ConditionFalse, ContainersNotReady, "containers with unready status: [s]")
	readiness.Set(container.BuildContainerID("containerd", "id-s"), results.Success, pod)
	got = generate(pod, ps, v1.PodStatus{}, GenerateOptions{Readiness: readiness})
	checkCondition(t, getCondition(got, v1.ContainersReady), v1.ContainersReady, v1.ConditionTrue, "", "")
}

func TestConditionsOrderAndForeignConditions(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Status.Conditions = []v1.PodCondition{
		{Type: "example.com/gate", Status: v1.ConditionTrue},
		{Type: v1.PodReady, Status: v1.ConditionTrue}, // kubelet-owned: regenerated
	}
	old := v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "TerminationByKubelet"}}}
	got := generate(pod, runtimeStatus(running("a", "id-a", 5)), old, GenerateOptions{})
	var types []v1.PodConditionType
	for _, c := range got.Conditions {
		types = append(types, c.Type)
	}
	want := []v1.PodConditionType{"example.com/gate", v1.DisruptionTarget, v1.PodReadyToStartContainers, v1.PodInitialized, v1.PodReady, v1.ContainersReady, v1.PodScheduled}
	if !reflect.DeepEqual(types, want) {
		t.Errorf("conditions %v, want %v", types, want)
	}
	checkCondition(t, getCondition(got, v1.PodScheduled), v1.PodScheduled, v1.ConditionTrue, "", "")
	checkCondition(t, getCondition(got, v1.PodReadyToStartContainers), v1.PodReadyToStartContainers, v1.ConditionTrue, "", "")
}

func TestSucceededPodConditions(t *testing.T) {
	pod := testPod(v1.RestartPolicyNever, "a")
	got := generate(pod, runtimeStatus(exited("a", "id-a", 5, 0, "Completed")), v1.PodStatus{}, GenerateOptions{})
	if got.Phase != v1.PodSucceeded {
		t.Fatalf("phase %s", got.Phase)
	}
	checkCondition(t, getCondition(got, v1.PodReady), v1.PodReady, v1.ConditionFalse, PodCompleted, "")
	checkCondition(t, getCondition(got, v1.ContainersReady), v1.ContainersReady, v1.ConditionFalse, PodCompleted, "")
}

func TestHostAndPodIPs(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	ps := runtimeStatus(running("a", "id-a", 5))
	ps.IPs = []string{"fd00::0005", "10.88.0.5", "10.88.0.6"}

	got := generate(pod, ps, v1.PodStatus{}, GenerateOptions{HostIPs: []string{"192.168.1.2", "fd01::2"}})
	if got.HostIP != "192.168.1.2" || len(got.HostIPs) != 2 || got.HostIPs[1].IP != "fd01::2" {
		t.Errorf("host IPs %q %v", got.HostIP, got.HostIPs)
	}
	if want := []v1.PodIP{{IP: "10.88.0.5"}, {IP: "fd00::5"}}; !reflect.DeepEqual(got.PodIPs, want) || got.PodIP != "10.88.0.5" {
		t.Errorf("IPv4 node: pod IPs %v, want %v", got.PodIPs, want)
	}

	got = generate(pod, ps, v1.PodStatus{}, GenerateOptions{HostIPs: []string{"fd01::2"}})
	if want := []v1.PodIP{{IP: "fd00::5"}, {IP: "10.88.0.5"}}; !reflect.DeepEqual(got.PodIPs, want) {
		t.Errorf("IPv6 node: pod IPs %v, want %v", got.PodIPs, want)
	}

	pod.Spec.HostNetwork = true
	ps.IPs = nil
	got = generate(pod, ps, v1.PodStatus{}, GenerateOptions{HostIPs: []string{"192.168.1.2", "fd01::2"}})
	if want := []v1.PodIP{{IP: "192.168.1.2"}, {IP: "fd01::2"}}; !reflect.DeepEqual(got.PodIPs, want) || got.PodIP != "192.168.1.2" {
		t.Errorf("host network pod IPs %v, want %v", got.PodIPs, want)
	}
}

func TestStartTime(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	got := generate(pod, runtimeStatus(), v1.PodStatus{}, GenerateOptions{})
	if got.StartTime == nil || !got.StartTime.Time.Equal(fixedNow()) {
		t.Errorf("start time %v, want now", got.StartTime)
	}
	old := metav1.NewTime(at(-50))
	got = generate(pod, runtimeStatus(), v1.PodStatus{StartTime: &old}, GenerateOptions{})
	if !got.StartTime.Time.Equal(at(-50)) {
		t.Errorf("start time %v, want kept", got.StartTime)
	}
}

func TestQOSClass(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	one := resource.MustParse("1")
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: one, v1.ResourceMemory: one},
		Limits:   v1.ResourceList{v1.ResourceCPU: one, v1.ResourceMemory: one},
	}
	if got := generate(pod, runtimeStatus(), v1.PodStatus{}, GenerateOptions{}); got.QOSClass != v1.PodQOSGuaranteed {
		t.Errorf("qos %s, want Guaranteed", got.QOSClass)
	}
}

func TestEphemeralContainerStatuses(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Spec.EphemeralContainers = []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
	got := generate(pod, runtimeStatus(running("a", "id-a", 5), running("debug", "id-d", 9)), v1.PodStatus{}, GenerateOptions{})
	if len(got.EphemeralContainerStatuses) != 1 || got.EphemeralContainerStatuses[0].State.Running == nil {
		t.Fatalf("ephemeral statuses %+v", got.EphemeralContainerStatuses)
	}
	if len(got.ContainerStatuses) != 1 {
		t.Errorf("the ephemeral container is not a regular one: %+v", got.ContainerStatuses)
	}
}

func TestContainerStatusesSortedByName(t *testing.T) {
	got := generate(testPod(v1.RestartPolicyAlways, "zeta", "alpha"), runtimeStatus(), v1.PodStatus{}, GenerateOptions{})
	if got.ContainerStatuses[0].Name != "alpha" || got.ContainerStatuses[1].Name != "zeta" {
		t.Errorf("order %s %s", got.ContainerStatuses[0].Name, got.ContainerStatuses[1].Name)
	}
}

func TestContainerStatusResources(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("128Mi")},
	}
	cs := running("a", "id-a", 5)
	cs.Resources = &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{
		CpuShares: 512, CpuQuota: 100000, CpuPeriod: 100000, MemoryLimitInBytes: 256 << 20,
	}}
	got := findContainer(generate(pod, runtimeStatus(cs), v1.PodStatus{}, GenerateOptions{}), "a")
	r := got.Resources
	if r == nil {
		t.Fatal("no resources")
	}
	for name, want := range map[string]struct{ got, want resource.Quantity }{
		"cpu request":    {r.Requests[v1.ResourceCPU], resource.MustParse("500m")},
		"memory request": {r.Requests[v1.ResourceMemory], resource.MustParse("64Mi")},
		"cpu limit":      {r.Limits[v1.ResourceCPU], resource.MustParse("1")},
		"memory limit":   {r.Limits[v1.ResourceMemory], resource.MustParse("256Mi")},
	} {
		if want.got.Cmp(want.want) != 0 {
			t.Errorf("%s = %s, want %s (from the runtime)", name, want.got.String(), want.want.String())
		}
	}
	if q := got.AllocatedResources[v1.ResourceCPU]; q.Cmp(resource.MustParse("250m")) != 0 {
		t.Errorf("allocated cpu %s, want the spec's request", q.String())
	}
}

func TestVolumeMountStatuses(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "a")
	ifPossible := v1.RecursiveReadOnlyIfPossible
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
		{Name: "rw", MountPath: "/rw"},
		{Name: "ro", MountPath: "/ro", ReadOnly: true, RecursiveReadOnly: &ifPossible},
	}
	disabled, enabled := v1.RecursiveReadOnlyDisabled, v1.RecursiveReadOnlyEnabled
	for supported, mode := range map[bool]*v1.RecursiveReadOnlyMode{false: &disabled, true: &enabled} {
		got := generate(pod, runtimeStatus(), v1.PodStatus{}, GenerateOptions{RuntimeSupportsRecursiveReadOnlyMounts: supported})
		want := []v1.VolumeMountStatus{{Name: "rw", MountPath: "/rw"}, {Name: "ro", MountPath: "/ro", ReadOnly: true, RecursiveReadOnly: mode}}
		if mounts := findContainer(got, "a").VolumeMounts; !reflect.DeepEqual(mounts, want) {
			t.Errorf("supported=%v: mounts %+v, want %+v", supported, mounts, want)
		}
		// Once running, the mounts carry over from the previous status.
		next := generate(pod, runtimeStatus(running("a", "id-a", 5)), got, GenerateOptions{})
		if mounts := findContainer(next, "a").VolumeMounts; !reflect.DeepEqual(mounts, want) {
			t.Errorf("running: mounts %+v, want %+v", mounts, want)
		}
	}
}

func TestNilPodStatus(t *testing.T) {
	got := GenerateAPIPodStatus(testPod(v1.RestartPolicyAlways, "a"), nil, v1.PodStatus{}, GenerateOptions{})
	if got.Phase != v1.PodPending || waitingReason(findContainer(got, "a")) != ContainerCreating {
		t.Errorf("status %+v", got)
	}
	checkCondition(t, getCondition(got, v1.PodReadyToStartContainers), v1.PodReadyToStartContainers, v1.ConditionFalse, "", "")
}
