//go:build e2e

// Tests against the real containerd of the dev rig. Run with
//
//	CONTAINER_RUNTIME_ENDPOINT=unix:///run/nodelet-dev/containerd.sock go test -tags e2e -run Real ./pkg/runtime/kuberuntime/
package kuberuntime

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
)

const realBusybox = "docker.io/library/busybox:1.36"

type realEnv struct {
	m  *Manager
	rt interface {
		RemovePodSandbox(context.Context, string) error
	}
	rec *record.FakeRecorder
}

func newRealEnv(t *testing.T) *realEnv {
	t.Helper()
	ep := os.Getenv("CONTAINER_RUNTIME_ENDPOINT")
	if ep == "" {
		t.Skip("CONTAINER_RUNTIME_ENDPOINT not set")
	}
	ctx := context.Background()
	rs, err := cri.NewRemoteRuntimeService(ctx, ep, 10*time.Second, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	is, err := cri.NewRemoteImageService(ctx, ep, 10*time.Second, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rec := record.NewFakeRecorder(1000)
	m, err := NewManager(ctx, Options{
		RuntimeService: rs, ImageService: is, Recorder: rec,
		RootDir: dir + "/root", PodLogsDir: dir + "/pods", LegacyLogSymlinkDir: dir + "/containers",
		NodeName: "realtest",
	})
	if err != nil {
		t.Fatal(err)
	}
	return &realEnv{m: m, rt: rs, rec: rec}
}

func realPod(t *testing.T, name string, containers ...v1.Container) *v1.Pod {
	uid := types.UID(fmt.Sprintf("kuberuntime-real-%s-%d", name, time.Now().UnixNano()))
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kuberuntime-real-" + strings.ToLower(t.Name()), UID: uid},
		Spec: v1.PodSpec{
			Containers: containers, RestartPolicy: v1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
		},
	}
}

func busybox(name string, cmd ...string) v1.Container {
	return v1.Container{Name: name, Image: realBusybox, ImagePullPolicy: v1.PullIfNotPresent, Command: cmd,
		TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError}
}

// cleanup kills and removes everything of pod.
func (e *realEnv) cleanup(t *testing.T, pod *v1.Pod) {
	ctx := context.Background()
	status, err := e.m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	zero := int64(0)
	_ = e.m.KillPod(ctx, pod, container.ConvertPodStatusToRunningPod(e.m.Type(), status), &zero)
	for _, c := range status.ContainerStatuses {
		_ = e.m.DeleteContainer(ctx, c.ID)
	}
	for _, s := range status.SandboxStatuses {
		_ = e.rt.RemovePodSandbox(ctx, s.Id)
	}
}

func (e *realEnv) sync(t *testing.T, pod *v1.Pod, backOff *flowcontrol.Backoff) (*container.PodStatus, container.PodSyncResult) {
	t.Helper()
	ctx := context.Background()
	status, err := e.m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	r := e.m.SyncPod(ctx, pod, status, nil, backOff)
	after, err := e.m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	return after, r
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestRealPodLifecycle(t *testing.T) {
	e := newRealEnv(t)
	ctx := context.Background()
	app := busybox("app", "sh", "-c", "echo hello from app; exec sleep 3600")
	app.Lifecycle = &v1.Lifecycle{
		PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"touch", "/tmp/started"}}},
		PreStop:   &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sleep", "1"}}},
	}
	init := busybox("init", "sh", "-c", "echo init done")
	pod := realPod(t, "life", app)
	pod.Spec.InitContainers = []v1.Container{init}
	t.Cleanup(func() { e.cleanup(t, pod) })

	status, r := e.sync(t, pod, nil)
	if err := r.Error(); err != nil {
		t.Fatalf("SyncPod 1: %v", err)
	}
	if len(status.IPs) == 0 || !strings.HasPrefix(status.IPs[0], "10.88.") {
		t.Fatalf("pod IPs %v", status.IPs)
	}
	waitFor(t, "init to exit", func() bool {
		s, _ := e.m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
		cs := s.FindContainerStatusByName("init")
		return cs != nil && cs.State == container.ContainerStateExited
	})
	status, r = e.sync(t, pod, nil)
	if err := r.Error(); err != nil {
		t.Fatalf("SyncPod 2: %v", err)
	}
	cs := status.FindContainerStatusByName("app")
	if cs == nil || cs.State != container.ContainerStateRunning {
		t.Fatalf("app status %+v", cs)
	}
	out, err := e.m.RunInContainer(ctx, cs.ID, []string{"ls", "/tmp/started"}, 5*time.Second)
	if err != nil {
		t.Fatalf("postStart hook did not run: %v %s", err, out)
	}
	var logs bytes.Buffer
	waitFor(t, "app log", func() bool {
		logs.Reset()
		_ = e.m.GetContainerLogs(ctx, pod, cs.ID, &v1.PodLogOptions{}, &logs, &logs)
		return strings.Contains(logs.String(), "hello from app")
	})
	link := e.m.legacyLogSymlink(cs.ID.ID, "app", pod.Name, pod.Namespace)
	if target, err := os.Readlink(link); err != nil || !strings.HasSuffix(target, "/app/0.log") {
		t.Errorf("legacy log symlink %s -> %q, %v", link, target, err)
	}
	u, err := e.m.GetExec(ctx, cs.ID, []string{"true"}, false, true, true, false)
	if err != nil || u.Host == "" {
		t.Fatalf("GetExec: %v %v", u, err)
	}
	if u, err := e.m.GetPortForward(ctx, pod.Name, pod.Namespace, pod.UID, []int32{80}); err != nil || u.Host == "" {
		t.Fatalf("GetPortForward: %v %v", u, err)
	}
	pods, err := e.m.GetPods(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range pods {
		if p.ID == pod.UID {
			found = len(p.Containers) == 1 && len(p.Sandboxes) == 1
		}
	}
	if !found {
		t.Error("GetPods(false) does not list the pod with one running container and one sandbox")
	}

	start := time.Now()
	if err := e.m.KillPod(ctx, pod, container.ConvertPodStatusToRunningPod(e.m.Type(), status), nil); err != nil {
		t.Fatalf("KillPod: %v", err)
	}
	// preStop took ~1s, then sleep (PID 1, no SIGTERM handler) was killed after the rest of
	// the 5s grace period.
	if took := time.Since(start); took < 4*time.Second || took > 15*time.Second {
		t.Errorf("KillPod took %v, want about 5s", took)
	}
	status, err = e.m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if len(status.RunningContainerStatuses()) != 0 || status.SandboxStatuses[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("pod still running after KillPod: %+v", status)
	}

	// GC of a deleted pod removes containers, sandbox and logs.
	e.m.podState = deletedPods{pod.UID: true}
	if err := e.m.GarbageCollect(ctx, container.GCPolicy{MinAge: 0, MaxPerPodContainer: 1, MaxContainers: -1}, true, false); err != nil {
		t.Fatalf("GarbageCollect: %v", err)
	}
	status, err = e.m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if len(status.ContainerStatuses) != 0 || len(status.SandboxStatuses) != 0 {
		t.Fatalf("GC left %d containers and %d sandboxes", len(status.ContainerStatuses), len(status.SandboxStatuses))
	}
}

type deletedPods map[types.UID]bool

func (d deletedPods) IsPodDeleted(uid types.UID) bool { return d[uid] }
func (d deletedPods) IsPodTerminated(types.UID) bool  { return false }

func TestRealCrashLoopAndTerminationMessage(t *testing.T) {
	e := newRealEnv(t)
	ctx := context.Background()
	pod := realPod(t, "crash", busybox("app", "sh", "-c", "echo dying words; exit 3"))
	t.Cleanup(func() { e.cleanup(t, pod) })
	backOff := flowcontrol.NewBackOff(time.Second, 10*time.Second)

	if _, r := e.sync(t, pod, backOff); r.Error() != nil {
		t.Fatal(r.Error())
	}
	var cs *container.Status
	waitFor(t, "app to exit", func() bool {
		s, _ := e.m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
		cs = s.FindContainerStatusByName("app")
		return cs != nil && cs.State == container.ContainerStateExited
	})
	if cs.ExitCode != 3 || !strings.Contains(cs.Message, "dying words") {
		t.Fatalf("exit %d message %q; want 3 and the log tail", cs.ExitCode, cs.Message)
	}
	status, r := e.sync(t, pod, backOff)
	if r.Error() != nil {
		t.Fatalf("restart: %v", r.Error())
	}
	if cs := status.FindContainerStatusByName("app"); cs.RestartCount != 1 {
		t.Fatalf("restart count %d", cs.RestartCount)
	}
	waitFor(t, "app to exit again", func() bool {
		s, _ := e.m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
		cs = s.FindContainerStatusByName("app")
		return cs != nil && cs.State == container.ContainerStateExited && cs.RestartCount == 1
	})
	_, r = e.sync(t, pod, backOff)
	if err := r.Error(); err == nil || !strings.Contains(err.Error(), "CrashLoopBackOff") {
		t.Fatalf("want CrashLoopBackOff, got %v", err)
	}
}

func TestRealPostStartHTTPHookFailure(t *testing.T) {
	e := newRealEnv(t)
	app := busybox("app", "sleep", "3600")
	// Nothing listens on 8081 in the pod: the hook fails (connection refused to the pod IP)
	// and the container is killed.
	app.Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8081)}}}
	pod := realPod(t, "httphook", app)
	t.Cleanup(func() { e.cleanup(t, pod) })
	status, r := e.sync(t, pod, nil)
	err := r.Error()
	if err == nil || !strings.Contains(err.Error(), "PostStartHookError") || !strings.Contains(err.Error(), status.IPs[0]+":8081") {
		t.Fatalf("want PostStartHookError mentioning the pod IP, got %v", err)
	}
	if cs := status.FindContainerStatusByName("app"); cs == nil || cs.State != container.ContainerStateExited {
		t.Fatalf("container not killed: %+v", cs)
	}
}
