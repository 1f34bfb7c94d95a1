package kuberuntime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/images"
)

func syncPod(t *testing.T, env *testEnv, pod *v1.Pod, backOff *flowcontrol.Backoff) *container.PodSyncResult {
	t.Helper()
	r := env.m.SyncPod(context.Background(), pod, env.podStatus(t, pod), nil, backOff)
	return &r
}

func startedNames(r *container.PodSyncResult) []string {
	var out []string
	for _, sr := range r.SyncResults {
		if sr.Action == container.StartContainer && sr.Error == nil {
			out = append(out, sr.Target.(string))
		}
	}
	return out
}

func failedResult(r *container.PodSyncResult, action container.SyncAction) *container.SyncResult {
	for _, sr := range r.SyncResults {
		if sr.Action == action && sr.Error != nil {
			return sr
		}
	}
	return nil
}

func TestSyncPodCreatesSandboxThenInitThenContainers(t *testing.T) {
	env := newTestEnv(t)
	pod := newPod("web", ctr("app"), ctr("side"))
	pod.Spec.InitContainers = []v1.Container{ctr("init")}
	backOff := flowcontrol.NewFakeBackOff(10*time.Second, 300*time.Second, env.clock)

	r := syncPod(t, env, pod, backOff)
	if err := r.Error(); err != nil {
		t.Fatalf("first SyncPod: %v", err)
	}
	if got := startedNames(r); len(got) != 1 || got[0] != "init" {
		t.Fatalf("first SyncPod started %v, want only the init container", got)
	}
	status := env.podStatus(t, pod)
	if len(status.SandboxStatuses) != 1 || status.SandboxStatuses[0].Metadata.Attempt != 0 {
		t.Fatalf("want one sandbox of attempt 0, got %v", status.SandboxStatuses)
	}
	if len(status.IPs) == 0 || status.IPs[0] != critestIP() {
		t.Errorf("pod IPs = %v", status.IPs)
	}

	// While the init container runs, nothing else starts.
	r = syncPod(t, env, pod, backOff)
	if got := startedNames(r); len(got) != 0 {
		t.Fatalf("SyncPod with a running init container started %v", got)
	}

	env.exitContainer(t, pod, "init", 0, env.clock.Now())
	r = syncPod(t, env, pod, backOff)
	if err := r.Error(); err != nil {
		t.Fatalf("third SyncPod: %v", err)
	}
	if got := startedNames(r); len(got) != 2 || got[0] != "app" || got[1] != "side" {
		t.Fatalf("third SyncPod started %v, want [app side]", got)
	}
	status = env.podStatus(t, pod)
	for _, name := range []string{"app", "side"} {
		cs := status.FindContainerStatusByName(name)
		if cs == nil || cs.State != container.ContainerStateRunning || cs.RestartCount != 0 {
			t.Fatalf("container %s status %+v", name, cs)
		}
		if cs.Hash != container.HashContainer(&pod.Spec.Containers[0]) && name == "app" {
			t.Errorf("hash of %s not recorded", name)
		}
	}
	// Running and converged: nothing more to do.
	if r := syncPod(t, env, pod, backOff); len(startedNames(r)) != 0 || r.Error() != nil {
		t.Fatalf("converged SyncPod did something: %+v", r)
	}
	events := env.events()
	for _, want := range []string{"Normal Created Created container: app", "Normal Started Started container app"} {
		if !hasEvent(events, want) {
			t.Errorf("missing event %q in %v", want, events)
		}
	}
}

func critestIP() string { return "192.168.192.168" }

func TestSyncPodRestartCountsAndCrashLoopBackOff(t *testing.T) {
	env := newTestEnv(t)
	pod := newPod("crash", ctr("app"))
	backOff := flowcontrol.NewFakeBackOff(10*time.Second, 300*time.Second, env.clock)
	if err := syncPod(t, env, pod, backOff).Error(); err != nil {
		t.Fatal(err)
	}

	// First crash: restarted at once with restart count 1, and the back-off begins.
	env.exitContainer(t, pod, "app", 1, env.clock.Now())
	r := syncPod(t, env, pod, backOff)
	if got := startedNames(r); len(got) != 1 {
		t.Fatalf("restart after first crash: started %v, result %v", got, r.Error())
	}
	cs := env.podStatus(t, pod).FindContainerStatusByName("app")
	if cs.RestartCount != 1 || cs.State != container.ContainerStateRunning {
		t.Fatalf("after restart: %+v", cs)
	}

	// Second crash right away: in back-off.
	env.exitContainer(t, pod, "app", 1, env.clock.Now())
	r = syncPod(t, env, pod, backOff)
	failed := failedResult(r, container.StartContainer)
	if failed == nil || !errors.Is(failed.Error, container.ErrCrashLoopBackOff) {
		t.Fatalf("want ErrCrashLoopBackOff, got %+v", r.SyncResults)
	}
	wantMsg := "back-off 10s restarting failed container=app pod=crash_ns(crash-uid)"
	if failed.Message != wantMsg {
		t.Errorf("message %q, want %q", failed.Message, wantMsg)
	}
	if !hasEvent(env.events(), "Warning BackOff Back-off restarting failed container app in pod crash_ns(crash-uid)") {
		t.Error("no BackOff event")
	}

	// After the back-off window the container restarts with count 2.
	env.clock.Step(11 * time.Second)
	r = syncPod(t, env, pod, backOff)
	if len(startedNames(r)) != 1 {
		t.Fatalf("after back-off: %+v", r.SyncResults)
	}
	if cs := env.podStatus(t, pod).FindContainerStatusByName("app"); cs.RestartCount != 2 {
		t.Fatalf("restart count %d, want 2", cs.RestartCount)
	}
	// The container's CRI attempt is its restart count.
	if _, err := env.rt.GetContainerID("crash_ns_crash-uid_0", "app", 2); err != nil {
		t.Error(err)
	}
}

func TestSyncPodImageNeverPullAbsent(t *testing.T) {
	env := newTestEnv(t)
	c := ctr("app")
	c.Image = "docker.io/library/absent:1.0"
	c.ImagePullPolicy = v1.PullNever
	pod := newPod("never", c)
	r := syncPod(t, env, pod, nil)
	failed := failedResult(r, container.StartContainer)
	if failed == nil || !errors.Is(failed.Error, images.ErrImageNeverPull) {
		t.Fatalf("want ErrImageNeverPull, got %+v", r.SyncResults)
	}
	if len(env.rt.Containers) != 0 {
		t.Errorf("a container was created: %v", env.rt.Containers)
	}
}

func TestSyncPodSandboxFailure(t *testing.T) {
	env := newTestEnv(t)
	pod := newPod("nosandbox", ctr("app"))
	env.rt.InjectError("RunPodSandbox", errors.New("cni broke"))
	r := syncPod(t, env, pod, nil)
	failed := failedResult(r, container.CreatePodSandbox)
	if failed == nil || !errors.Is(failed.Error, container.ErrCreatePodSandbox) {
		t.Fatalf("want ErrCreatePodSandbox, got %+v", r.SyncResults)
	}
	if !hasEvent(env.events(), "Warning FailedCreatePodSandBox Failed to create pod sandbox: cni broke") {
		t.Error("no FailedCreatePodSandBox event")
	}
}

func TestSyncPodRecreatesDeadSandbox(t *testing.T) {
	env := newTestEnv(t)
	pod := newPod("resandbox", ctr("app"))
	if err := syncPod(t, env, pod, nil).Error(); err != nil {
		t.Fatal(err)
	}
	sandboxID := env.podStatus(t, pod).SandboxStatuses[0].Id
	if err := env.rt.StopPodSandbox(context.Background(), sandboxID); err != nil {
		t.Fatal(err)
	}
	r := syncPod(t, env, pod, nil)
	if err := r.Error(); err != nil {
		t.Fatal(err)
	}
	status := env.podStatus(t, pod)
	if len(status.SandboxStatuses) != 2 || status.SandboxStatuses[0].Metadata.Attempt != 1 {
		t.Fatalf("want a new sandbox of attempt 1 first, got %v", status.SandboxStatuses)
	}
	if !hasEvent(env.events(), "Normal SandboxChanged Pod sandbox changed, it will be killed and re-created.") {
		t.Error("no SandboxChanged event")
	}
	running := status.RunningContainerStatuses()
	if len(running) != 1 || running[0].RestartCount != 1 {
		t.Fatalf("want app restarted (count 1) in the new sandbox, got %+v", running)
	}
}

func TestSyncPodVolumesWithoutManagerFail(t *testing.T) {
	env := newTestEnv(t)
	pod := newPod("vols", ctr("app"))
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	r := syncPod(t, env, pod, nil)
	if r.SyncError == nil {
		t.Fatalf("want a volume error, got %+v", r)
	}
	if len(env.rt.Sandboxes) != 0 {
		t.Error("sandbox created for a pod whose volumes failed")
	}
}

// mountOnlyVolumes is a volume manager that only says where volumes are: setting them up
// is the kubelet's, before SyncPod. It records the containers it was asked about.
type mountOnlyVolumes struct {
	dir     string
	mounted []string
}

func (v *mountOnlyVolumes) MountsFor(_ *v1.Pod, c *v1.Container, _ map[string]string) ([]*runtimeapi.Mount, error) {
	v.mounted = append(v.mounted, c.Name)
	return []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: filepath.Join(v.dir, "data")}}, nil
}

func (v *mountOnlyVolumes) DevicesFor(*v1.Pod, *v1.Container) ([]*runtimeapi.Device, error) {
	return nil, nil
}

func (v *mountOnlyVolumes) PodDir(uid types.UID) string { return filepath.Join(v.dir, string(uid)) }

func TestSyncPodMountsVolumesWithoutSettingThemUp(t *testing.T) {
	vols := &mountOnlyVolumes{dir: t.TempDir()}
	env := newTestEnv(t, func(o *Options) { o.Volumes = vols })
	app := ctr("app")
	app.VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod := newPod("vols", app)
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	r := syncPod(t, env, pod, nil)
	if err := r.Error(); err != nil {
		t.Fatal(err)
	}
	if got := startedNames(r); len(got) != 1 || got[0] != "app" {
		t.Errorf("started %v, want app", got)
	}
	if len(vols.mounted) != 1 || vols.mounted[0] != "app" {
		t.Errorf("mounts asked for %v, want app's", vols.mounted)
	}
}

func TestRestartCountRecoveredFromLogDir(t *testing.T) {
	env := newTestEnv(t)
	pod := newPod("logs", ctr("app"))
	dir := filepath.Join(env.dir, "pods", "ns_logs_logs-uid", "app")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"0.log", "3.log", "4.log.20240101-000000", "junk.log"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syncPod(t, env, pod, nil).Error(); err != nil {
		t.Fatal(err)
	}
	if cs := env.podStatus(t, pod).FindContainerStatusByName("app"); cs.RestartCount != 5 {
		t.Fatalf("restart count %d, want 5 (one more than 4.log.*)", cs.RestartCount)
	}
}

func TestPostStartHookFailureKillsContainer(t *testing.T) {
	env := newTestEnv(t)
	c := ctr("app")
	c.Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"false"}}}}
	pod := newPod("hook", c)
	env.rt.execSync = func(context.Context, string, []string) ([]byte, []byte, error) {
		return []byte("out"), []byte("boom"), errors.New("command exited 1")
	}
	r := syncPod(t, env, pod, nil)
	failed := failedResult(r, container.StartContainer)
	if failed == nil || !errors.Is(failed.Error, container.ErrPostStartHook) {
		t.Fatalf("want ErrPostStartHook, got %+v", r.SyncResults)
	}
	want := `Exec lifecycle hook ([false]) for Container "app" in Pod "hook_ns(hook-uid)" failed - error: command exited 1, message: "outboom"`
	if failed.Message != want {
		t.Errorf("message\n %q\nwant\n %q", failed.Message, want)
	}
	events := env.events()
	if !hasEvent(events, "Warning FailedPostStartHook PostStartHook failed") || !hasEvent(events, "Normal Killing FailedPostStartHook") {
		t.Errorf("events %v", events)
	}
	if cs := env.podStatus(t, pod).FindContainerStatusByName("app"); cs.State != container.ContainerStateExited {
		t.Errorf("container not stopped: %+v", cs)
	}
}

// twoPodsOneExited starts pod a (one container) and pod b (two), and exits b's second.
func twoPodsOneExited(t *testing.T) (*testEnv, *v1.Pod) {
	t.Helper()
	env := newTestEnv(t)
	a, b := newPod("a", ctr("app")), newPod("b", ctr("app"), ctr("two"))
	for _, p := range []*v1.Pod{a, b} {
		if err := syncPod(t, env, p, nil).Error(); err != nil {
			t.Fatal(err)
		}
	}
	env.exitContainer(t, b, "two", 0, env.clock.Now())
	return env, b
}

func TestGetPodsGroupsByUID(t *testing.T) {
	env, _ := twoPodsOneExited(t)
	all, err := env.m.GetPods(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Fatalf("want 2 pods, got %d", len(all))
	}
	count := map[string]int{}
	for _, p := range all {
		count[p.Name] = len(p.Containers)
		if len(p.Sandboxes) != 1 || p.Sandboxes[0].State != container.ContainerStateRunning {
			t.Errorf("pod %s sandboxes %+v", p.Name, p.Sandboxes)
		}
	}
	if count["a"] != 1 || count["b"] != 2 {
		t.Errorf("containers per pod %v", count)
	}
	running, err := env.m.GetPods(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range running {
		for _, c := range p.Containers {
			if c.State != container.ContainerStateRunning {
				t.Errorf("all=false returned %s in state %s", c.Name, c.State)
			}
		}
	}
}

// GetPod lists one pod, exited containers included, and nothing of the others.
func TestGetPodListsOnePod(t *testing.T) {
	env, b := twoPodsOneExited(t)
	got, err := env.m.GetPod(context.Background(), b.UID)
	if err != nil || got == nil {
		t.Fatalf("GetPod(b) = %v, %v", got, err)
	}
	if got.ID != b.UID || got.Name != "b" || len(got.Sandboxes) != 1 || len(got.Containers) != 2 {
		t.Errorf("GetPod(b) = %s %s, %d sandboxes, %d containers; want b's 1 and 2",
			got.ID, got.Name, len(got.Sandboxes), len(got.Containers))
	}
	if got, err := env.m.GetPod(context.Background(), "no-such-pod"); err != nil || got != nil {
		t.Errorf("GetPod of a pod the runtime does not have = %v, %v; want nil, nil", got, err)
	}
}

// GetPodStatusOf reads the statuses of what a listing found, as GetPodStatus does, with
// no listing of its own.
func TestGetPodStatusOfAListing(t *testing.T) {
	env := newTestEnv(t)
	p := newPod("a", ctr("app"), ctr("two"))
	if err := syncPod(t, env, p, nil).Error(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	listed, err := env.m.GetPod(ctx, p.UID)
	if err != nil || listed == nil {
		t.Fatalf("GetPod = %v, %v", listed, err)
	}
	want, err := env.m.GetPodStatus(ctx, p.UID, p.Name, p.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	callsBefore := len(env.rt.GetCalls())
	got, err := env.m.GetPodStatusOf(ctx, listed)
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range env.rt.GetCalls()[callsBefore:] {
		if strings.HasPrefix(call, "List") {
			t.Errorf("GetPodStatusOf listed again (%s)", call)
		}
	}
	if len(got.SandboxStatuses) != 1 || got.SandboxStatuses[0].Id != want.SandboxStatuses[0].Id ||
		len(got.ContainerStatuses) != 2 || got.ContainerStatuses[0].ID != want.ContainerStatuses[0].ID ||
		got.ContainerStatuses[1].ID != want.ContainerStatuses[1].ID || len(got.IPs) != len(want.IPs) {
		t.Errorf("GetPodStatusOf = %+v, want GetPodStatus's %+v", got, want)
	}

}

func TestGetPodStatusTerminationMessage(t *testing.T) {
	env := newTestEnv(t)
	c := ctr("app")
	c.TerminationMessagePath = "/dev/termination-log"
	pod := newPod("term", c)
	if err := syncPod(t, env, pod, nil).Error(); err != nil {
		t.Fatal(err)
	}
	// The fake runtime does not keep mounts; give the container the termination file.
	msgFile := filepath.Join(env.dir, "msg")
	if err := os.WriteFile(msgFile, []byte("last words"), 0o644); err != nil {
		t.Fatal(err)
	}
	env.rt.Lock()
	for _, fc := range env.rt.Containers {
		fc.Mounts = []*runtimeapi.Mount{{ContainerPath: "/dev/termination-log", HostPath: msgFile}}
		fc.Annotations["io.kubernetes.container.terminationMessagePath"] = "/dev/termination-log"
	}
	env.rt.Unlock()
	env.exitContainer(t, pod, "app", 3, env.clock.Now())
	cs := env.podStatus(t, pod).FindContainerStatusByName("app")
	if cs.ExitCode != 3 || cs.Message != "last words" {
		t.Fatalf("status %+v", cs)
	}
}

func imageCalls(env *testEnv, name string) int {
	env.img.Lock()
	defer env.img.Unlock()
	n := 0
	for _, c := range env.img.Called {
		if c == name {
			n++
		}
	}
	return n
}

// Upstream asks ImageStatus twice per container it starts (presence, then image user);
// nodelet asks once per image per sync.
func TestSyncPodAsksImageStatusOncePerImage(t *testing.T) {
	env := newTestEnv(t)
	other := "docker.io/library/other:1.0"
	env.img.SetFakeImages([]string{testImage, other})
	third := ctr("third")
	third.Image = other
	pod := newPod("web", ctr("app"), ctr("side"), third)

	r := syncPod(t, env, pod, nil)
	if err := r.Error(); err != nil {
		t.Fatal(err)
	}
	if got := startedNames(r); len(got) != 3 {
		t.Fatalf("started %v, want all three", got)
	}
	if n := imageCalls(env, "ImageStatus"); n != 2 {
		t.Errorf("ImageStatus called %d times for 3 containers of 2 images, want 2", n)
	}
}

// A pulled image is looked up again after the pull (for its size and its user), once.
func TestSyncPodLooksUpAPulledImageOnceMore(t *testing.T) {
	env := newTestEnv(t)
	env.img.SetFakeImages(nil)
	pod := newPod("pull", ctr("app"))

	r := syncPod(t, env, pod, nil)
	if err := r.Error(); err != nil {
		t.Fatal(err)
	}
	if n := imageCalls(env, "PullImage"); n != 1 {
		t.Fatalf("PullImage called %d times, want 1", n)
	}
	if n := imageCalls(env, "ImageStatus"); n != 2 {
		t.Errorf("ImageStatus called %d times, want 2 (absent before the pull, present after)", n)
	}
}

// The image user comes from the image status the sync read: runAsNonRoot passes for an
// image with a non-root user and fails for one without a user (root).
func TestSyncPodChecksRunAsNonRootAgainstTheImageUser(t *testing.T) {
	env := newTestEnv(t)
	nonRoot := "docker.io/library/nonroot:1.0"
	env.img.SetFakeImages([]string{testImage, nonRoot})
	env.img.Lock()
	env.img.Images[nonRoot].Uid = &runtimeapi.Int64Value{Value: 1000}
	env.img.Unlock()
	yes := true
	for _, tc := range []struct {
		pod, image  string
		wantStarted bool
	}{{"uid1000", nonRoot, true}, {"root", testImage, false}} {
		image, wantStarted := tc.image, tc.wantStarted
		c := ctr("app")
		c.Image = image
		c.SecurityContext = &v1.SecurityContext{RunAsNonRoot: &yes}
		pod := newPod(tc.pod, c)
		r := syncPod(t, env, pod, nil)
		if started := len(startedNames(r)) == 1; started != wantStarted {
			t.Errorf("image %s: started = %v, want %v (%+v)", image, started, wantStarted, r.SyncResults)
		}
		if !wantStarted {
			if f := failedResult(r, container.StartContainer); f == nil || !errors.Is(f.Error, container.ErrCreateContainerConfig) {
				t.Errorf("image %s: want ErrCreateContainerConfig, got %+v", image, r.SyncResults)
			}
		}
	}
}

// countingDNS counts the DNS lookups the sandbox configs made.
type countingDNS struct{ calls int }

func (d *countingDNS) GetPodDNS(*v1.Pod) (*runtimeapi.DNSConfig, error) {
	d.calls++
	return &runtimeapi.DNSConfig{}, nil
}

// A sync with nothing to start builds no sandbox config: that resolves the pod's DNS,
// which warns on every call when no clusterDNS is configured (upstream builds it only to
// start containers too). Nor does such a sync report any result.
func TestSyncPodWithNothingToStartBuildsNoSandboxConfig(t *testing.T) {
	dns := &countingDNS{}
	env := newTestEnv(t, func(o *Options) { o.DNS = dns })
	pod := newPod("steady", ctr("app"))
	if err := syncPod(t, env, pod, nil).Error(); err != nil {
		t.Fatal(err)
	}
	if dns.calls == 0 {
		t.Fatal("starting the pod looked up no DNS config")
	}
	before := dns.calls
	r := syncPod(t, env, pod, nil)
	if err := r.Error(); err != nil {
		t.Fatal(err)
	}
	if dns.calls != before {
		t.Errorf("a sync with nothing to start looked up the DNS config %d more times", dns.calls-before)
	}
	if len(r.SyncResults) != 0 {
		t.Errorf("a sync with nothing to start reported %+v", r.SyncResults)
	}
}
