//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/node/volumes"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/pkg/runtime/images"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

const busybox = "docker.io/library/busybox:1.36"

// rig is a runtime manager on the real containerd, with its own directories. Its pods are
// synced by syncPod, which sets their volumes up first, as the kubelet does.
type rig struct {
	m        *kuberuntime.Manager
	volumes  *volumes.Manager
	rs       internalapi.RuntimeService
	recorder *record.FakeRecorder
	logsDir  string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	ctx := context.Background()
	rs, err := cri.NewRemoteRuntimeService(ctx, endpoint(t), 3*time.Second, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	is, err := cri.NewRemoteImageService(ctx, endpoint(t), 3*time.Second, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	r := &rig{rs: rs, volumes: volumes.NewManager(root), recorder: record.NewFakeRecorder(1000), logsDir: t.TempDir()}
	r.m, err = kuberuntime.NewManager(ctx, kuberuntime.Options{
		RuntimeService:      rs,
		ImageService:        is,
		Recorder:            r.recorder,
		Volumes:             r.volumes,
		RootDir:             root,
		PodLogsDir:          r.logsDir,
		LegacyLogSymlinkDir: t.TempDir(),
		NodeName:            "e2e-node",
		CPUCFSQuota:         true,
		ImageOptions:        images.Options{SerializeImagePulls: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// newPod is a pod with a fresh UID, one busybox container per command, and the given policy.
func newPod(name string, policy v1.RestartPolicy, cmds ...[]string) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-" + string(uuid.NewUUID())[:8], Namespace: "e2e", UID: uuid.NewUUID()},
		Spec: v1.PodSpec{
			RestartPolicy:                 policy,
			TerminationGracePeriodSeconds: ptr.To[int64](2),
		},
	}
	for i, cmd := range cmds {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
			Name: fmt.Sprintf("c%d", i), Image: busybox, Command: cmd,
			ImagePullPolicy: v1.PullIfNotPresent, TerminationMessagePolicy: v1.TerminationMessageReadFile,
		})
	}
	return pod
}

// track removes every sandbox of the pod from containerd when the test ends.
func (r *rig) track(t *testing.T, pod *v1.Pod) {
	t.Cleanup(func() {
		ctx := context.Background()
		sandboxes, _ := r.rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{criconfig.PodUIDLabel: string(pod.UID)}})
		for _, sb := range sandboxes {
			_ = r.rs.StopPodSandbox(ctx, sb.Id)
			_ = r.rs.RemovePodSandbox(ctx, sb.Id)
		}
	})
}

func (r *rig) status(t *testing.T, pod *v1.Pod) *container.PodStatus {
	t.Helper()
	s, err := r.m.GetPodStatus(context.Background(), pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// syncPod is one pod sync as the kubelet does it: the pod's volumes are set up, then the
// runtime manager (which only mounts them) syncs the pod. A volume failure fails the sync.
func (r *rig) syncPod(pod *v1.Pod, s *container.PodStatus, backOff *flowcontrol.Backoff) container.PodSyncResult {
	ctx := context.Background()
	if err := r.volumes.SetUpPod(ctx, pod); err != nil {
		var result container.PodSyncResult
		result.Fail(fmt.Errorf("unable to attach or mount volumes for pod %q: %w", pod.Namespace+"/"+pod.Name, err))
		return result
	}
	return r.m.SyncPod(ctx, pod, s, nil, backOff)
}

// syncUntil runs SyncPod the way a pod worker does (fresh status, sync, again) until done
// says the pod is where the test wants it, and returns every sync result seen.
func (r *rig) syncUntil(t *testing.T, pod *v1.Pod, backOff *flowcontrol.Backoff, timeout time.Duration, done func(*container.PodStatus) bool) []container.PodSyncResult {
	t.Helper()
	var results []container.PodSyncResult
	deadline := time.Now().Add(timeout)
	for {
		s := r.status(t, pod)
		if done(s) {
			return results
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod not in the wanted state after %v; last results: %v; statuses: %s", timeout, lastErr(results), describe(s))
		}
		results = append(results, r.syncPod(pod, s, backOff))
		time.Sleep(100 * time.Millisecond)
	}
}

func lastErr(results []container.PodSyncResult) error {
	if len(results) == 0 {
		return nil
	}
	return results[len(results)-1].Error()
}

func describe(s *container.PodStatus) string {
	var b strings.Builder
	for _, c := range s.ContainerStatuses {
		fmt.Fprintf(&b, "[%s %s restart=%d exit=%d] ", c.Name, c.State, c.RestartCount, c.ExitCode)
	}
	return b.String()
}

func running(s *container.PodStatus, names ...string) bool {
	for _, n := range names {
		c := s.FindContainerStatusByName(n)
		if c == nil || c.State != container.ContainerStateRunning {
			return false
		}
	}
	return true
}

func defaultBackOff() *flowcontrol.Backoff {
	return flowcontrol.NewBackOff(10*time.Second, 300*time.Second)
}

func TestInitContainersRunInOrderThenContainers(t *testing.T) {
	r := newRig(t)
	pod := newPod("init", v1.RestartPolicyAlways, []string{"sleep", "3600"}, []string{"sleep", "3600"})
	for i := 0; i < 2; i++ {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, v1.Container{
			Name: fmt.Sprintf("init%d", i), Image: busybox, Command: []string{"sh", "-c", "sleep 0.3"},
			ImagePullPolicy: v1.PullIfNotPresent,
		})
	}
	r.track(t, pod)
	r.syncUntil(t, pod, defaultBackOff(), 30*time.Second, func(s *container.PodStatus) bool { return running(s, "c0", "c1") })
	s := r.status(t, pod)
	i0, i1 := s.FindContainerStatusByName("init0"), s.FindContainerStatusByName("init1")
	c0, c1 := s.FindContainerStatusByName("c0"), s.FindContainerStatusByName("c1")
	if i0 == nil || i1 == nil {
		t.Fatalf("init container statuses missing: %s", describe(s))
	}
	if i0.ExitCode != 0 || i1.ExitCode != 0 || i0.State != container.ContainerStateExited || i1.State != container.ContainerStateExited {
		t.Fatalf("init containers did not complete: %s", describe(s))
	}
	if !i1.StartedAt.After(i0.FinishedAt) && !i1.StartedAt.Equal(i0.FinishedAt) {
		t.Errorf("init1 started %v before init0 finished %v", i1.StartedAt, i0.FinishedAt)
	}
	for _, c := range []*container.Status{c0, c1} {
		if c.StartedAt.Before(i1.FinishedAt) {
			t.Errorf("%s started %v before init1 finished %v", c.Name, c.StartedAt, i1.FinishedAt)
		}
	}
}

func TestChangingOneImageReplacesOnlyThatContainer(t *testing.T) {
	r := newRig(t)
	pod := newPod("image", v1.RestartPolicyAlways, []string{"sleep", "3600"}, []string{"sleep", "3600"})
	r.track(t, pod)
	r.syncUntil(t, pod, defaultBackOff(), 30*time.Second, func(s *container.PodStatus) bool { return running(s, "c0", "c1") })
	before := r.status(t, pod)
	pod.Spec.Containers[1].Image = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"
	r.syncUntil(t, pod, defaultBackOff(), 30*time.Second, func(s *container.PodStatus) bool {
		c1 := s.FindContainerStatusByName("c1")
		return running(s, "c0", "c1") && c1.ID != before.FindContainerStatusByName("c1").ID
	})
	after := r.status(t, pod)
	if after.FindContainerStatusByName("c0").ID != before.FindContainerStatusByName("c0").ID {
		t.Errorf("c0 was replaced although only c1 changed")
	}
	if after.FindContainerStatusByName("c1").Hash == before.FindContainerStatusByName("c1").Hash {
		t.Errorf("c1 was recreated from the same spec hash")
	}
	if len(after.SandboxStatuses) != 1 || after.SandboxStatuses[0].Id != before.SandboxStatuses[0].Id {
		t.Errorf("the sandbox was replaced")
	}
}

func TestOnFailureRestartsFailedContainerWithGrowingBackOff(t *testing.T) {
	r := newRig(t)
	pod := newPod("onfailure", v1.RestartPolicyOnFailure, []string{"sh", "-c", "exit 1"}, []string{"sh", "-c", "exit 0"})
	r.track(t, pod)
	// Back-off 1s doubling: restarts come about 0s, 1s, 2s, 4s after each exit.
	backOff := flowcontrol.NewBackOff(time.Second, 8*time.Second)
	var starts []time.Time
	r.syncUntil(t, pod, backOff, 40*time.Second, func(s *container.PodStatus) bool {
		c := s.FindContainerStatusByName("c0")
		if c != nil && !c.StartedAt.IsZero() && (len(starts) == 0 || c.StartedAt.After(starts[len(starts)-1])) {
			starts = append(starts, c.StartedAt)
		}
		return len(starts) >= 5
	})
	for i := 2; i < len(starts); i++ {
		prev, gap := starts[i-1].Sub(starts[i-2]), starts[i].Sub(starts[i-1])
		if gap < prev*9/10 {
			t.Errorf("restart gaps shrink: %v then %v (starts %v)", prev, gap, starts)
		}
	}
	if gap := starts[4].Sub(starts[3]); gap < 3500*time.Millisecond {
		t.Errorf("fourth restart came %v after the third; 1s doubling back-off should give about 4s", gap)
	}
	s := r.status(t, pod)
	if ok := s.FindContainerStatusByName("c1"); ok == nil || ok.RestartCount != 0 || ok.ExitCode != 0 {
		t.Errorf("the container that exited 0 was restarted: %s", describe(s))
	}
	if fail := s.FindContainerStatusByName("c0"); fail.RestartCount < 4 {
		t.Errorf("failed container restart count %d, want >= 4", fail.RestartCount)
	}
	// Once it has exited again, a sync inside the back-off window reports CrashLoopBackOff.
	deadline := time.Now().Add(5 * time.Second)
	for r.status(t, pod).FindContainerStatusByName("c0").State != container.ContainerStateExited && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	res := r.syncPod(pod, r.status(t, pod), backOff)
	backOffSeen := false
	for _, sr := range res.SyncResults {
		if errors.Is(sr.Error, container.ErrCrashLoopBackOff) {
			backOffSeen = true
		}
	}
	if !backOffSeen {
		t.Errorf("no CrashLoopBackOff result during back-off: %v", res.Error())
	}
}

func TestNeverRestartsNothing(t *testing.T) {
	r := newRig(t)
	pod := newPod("never", v1.RestartPolicyNever, []string{"sh", "-c", "exit 1"}, []string{"sh", "-c", "exit 0"})
	r.track(t, pod)
	r.syncUntil(t, pod, defaultBackOff(), 30*time.Second, func(s *container.PodStatus) bool {
		c0, c1 := s.FindContainerStatusByName("c0"), s.FindContainerStatusByName("c1")
		return c0 != nil && c1 != nil && c0.State == container.ContainerStateExited && c1.State == container.ContainerStateExited
	})
	for i := 0; i < 5; i++ {
		r.syncPod(pod, r.status(t, pod), defaultBackOff())
		time.Sleep(100 * time.Millisecond)
	}
	s := r.status(t, pod)
	if n := len(s.ContainerStatuses); n != 2 {
		t.Errorf("want exactly 2 container instances with restartPolicy Never, got %d: %s", n, describe(s))
	}
	for _, sb := range s.SandboxStatuses {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("sandbox still ready after every container ended under restartPolicy Never")
		}
	}
}

func TestKillPodRunsPreStopWithinGracePeriod(t *testing.T) {
	r := newRig(t)
	pod := newPod("prestop", v1.RestartPolicyAlways,
		[]string{"sh", "-c", "trap 'echo got-term; exit 0' TERM; echo started; while true; do sleep 0.1; done"})
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](10)
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{
		Exec: &v1.ExecAction{Command: []string{"sh", "-c", "sleep 1; echo prestop-ran > /proc/1/fd/1"}},
	}}
	r.track(t, pod)
	r.syncUntil(t, pod, defaultBackOff(), 30*time.Second, func(s *container.PodStatus) bool { return running(s, "c0") })
	s := r.status(t, pod)
	id := s.FindContainerStatusByName("c0").ID
	start := time.Now()
	if err := r.m.KillPod(context.Background(), pod, container.ConvertPodStatusToRunningPod(r.m.Type(), s), nil); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took < time.Second || took > 10*time.Second {
		t.Errorf("KillPod took %v; the preStop hook sleeps 1s and the grace period is 10s", took)
	}
	var out bytes.Buffer
	if err := r.m.GetContainerLogs(context.Background(), pod, id, &v1.PodLogOptions{}, &out, &out); err != nil {
		t.Fatal(err)
	}
	logs := out.String()
	pre, term := strings.Index(logs, "prestop-ran"), strings.Index(logs, "got-term")
	if pre < 0 || term < 0 || pre > term {
		t.Errorf("want the preStop output before the TERM handler's, got logs %q", logs)
	}
	after := r.status(t, pod)
	if c := after.FindContainerStatusByName("c0"); c.State != container.ContainerStateExited || c.ExitCode != 0 {
		t.Errorf("container after KillPod: %s", describe(after))
	}
}

func TestContainerLogsTailSinceLimitFollow(t *testing.T) {
	r := newRig(t)
	pod := newPod("logs", v1.RestartPolicyNever,
		// stdout and stderr reach the log through separate pipes: the pauses keep their order.
		[]string{"sh", "-c", "for i in 1 2 3 4 5; do echo line$i; done; sleep 0.3; echo err1 >&2; sleep 2; echo late"})
	r.track(t, pod)
	r.syncUntil(t, pod, defaultBackOff(), 30*time.Second, func(s *container.PodStatus) bool {
		c := s.FindContainerStatusByName("c0")
		return c != nil && !c.StartedAt.IsZero()
	})
	id := r.status(t, pod).FindContainerStatusByName("c0").ID
	read := func(opts *v1.PodLogOptions) string {
		var out bytes.Buffer
		if err := r.m.GetContainerLogs(context.Background(), pod, id, opts, &out, &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	// follow returns the late line and ends when the container exits.
	start := time.Now()
	if got := read(&v1.PodLogOptions{Follow: true}); got != "line1\nline2\nline3\nline4\nline5\nerr1\nlate\n" {
		t.Errorf("follow got %q", got)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("follow did not end when the container exited")
	}
	if got := read(&v1.PodLogOptions{TailLines: ptr.To[int64](2)}); got != "err1\nlate\n" {
		t.Errorf("tail 2 got %q", got)
	}
	if got := read(&v1.PodLogOptions{LimitBytes: ptr.To[int64](8)}); got != "line1\nli" {
		t.Errorf("limitBytes 8 got %q", got)
	}
	withTS := read(&v1.PodLogOptions{Timestamps: true, TailLines: ptr.To[int64](1)})
	lateAt, err := time.Parse(time.RFC3339Nano, strings.Fields(withTS)[0])
	if err != nil || !strings.HasSuffix(withTS, " late\n") {
		t.Fatalf("timestamps got %q", withTS)
	}
	// The late line comes 2 s after the others: half a second before it splits them.
	since := metav1.NewTime(lateAt.Add(-500 * time.Millisecond))
	if got := read(&v1.PodLogOptions{SinceTime: &since}); got != "late\n" {
		t.Errorf("sinceTime just before the late line got %q", got)
	}
	if got := read(&v1.PodLogOptions{SinceSeconds: ptr.To[int64](3600)}); !strings.HasPrefix(got, "line1\n") {
		t.Errorf("sinceSeconds 3600 got %q", got)
	}
}

func TestRunInContainerReturnsOutputAndExitCode(t *testing.T) {
	r := newRig(t)
	pod := newPod("exec", v1.RestartPolicyAlways, []string{"sleep", "3600"})
	r.track(t, pod)
	r.syncUntil(t, pod, defaultBackOff(), 30*time.Second, func(s *container.PodStatus) bool { return running(s, "c0") })
	id := r.status(t, pod).FindContainerStatusByName("c0").ID
	out, err := r.m.RunInContainer(context.Background(), id, []string{"sh", "-c", "echo hello; echo oops >&2"}, 5*time.Second)
	if err != nil || string(out) != "hello\noops\n" {
		t.Errorf("got %q, %v", out, err)
	}
	out, err = r.m.RunInContainer(context.Background(), id, []string{"sh", "-c", "echo partial; exit 3"}, 5*time.Second)
	var exitErr *cri.ExecExitError
	if !errors.As(err, &exitErr) || exitErr.Code != 3 || !strings.Contains(string(out), "partial") {
		t.Errorf("exit 3: got %q, %v", out, err)
	}
}

func TestAbsentImageWithNeverFailsWithErrImageNeverPull(t *testing.T) {
	r := newRig(t)
	pod := newPod("neverpull", v1.RestartPolicyAlways, []string{"true"})
	pod.Spec.Containers[0].Image = "example.invalid/nothing:1.0"
	pod.Spec.Containers[0].ImagePullPolicy = v1.PullNever
	r.track(t, pod)
	res := r.syncPod(pod, r.status(t, pod), defaultBackOff())
	found := false
	for _, sr := range res.SyncResults {
		if sr.Action == container.StartContainer && errors.Is(sr.Error, images.ErrImageNeverPull) {
			found = true
		}
	}
	if !found {
		t.Fatalf("want a StartContainer result with ErrImageNeverPull, got %v", res.Error())
	}
	if !eventSeen(r.recorder, "ErrImageNeverPull") {
		t.Errorf("no ErrImageNeverPull event")
	}
}

func eventSeen(rec *record.FakeRecorder, reason string) bool {
	for {
		select {
		case e := <-rec.Events:
			if strings.Contains(e, reason) {
				return true
			}
		default:
			return false
		}
	}
}
