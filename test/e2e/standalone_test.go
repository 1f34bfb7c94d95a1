//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/api/cli"
	"github.com/nodelet/nodelet/pkg/api/server"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// standalone is a nodelet running static pods from its own manifest directory, under its
// own node name and cgroup root, so tests never touch each other's pods.
type standalone struct {
	*nodelet
	node      string
	manifests string
	logsDir   string
	rs        internalapi.RuntimeService
}

func startStandalone(t *testing.T) *standalone {
	t.Helper()
	return startStandaloneOn(t, "e2e-"+string(uuid.NewUUID())[:8], t.TempDir(), "")
}

// startStandaloneOn starts nodelet as node, with manifests as its static pod directory and
// extra appended to its KubeletConfiguration; the test's end stops it and removes its pods.
func startStandaloneOn(t *testing.T, node, manifests, extra string) *standalone {
	t.Helper()
	s := &standalone{node: node, manifests: manifests, logsDir: t.TempDir()}
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	body := fmt.Sprintf("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\npodLogsDir: %s\nstaticPodPath: %s\ncgroupRoot: /%s\n%s", s.logsDir, s.manifests, s.node, extra)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	makeCgroupRoot(t, s.node)
	s.nodelet = startNodelet(t, "--config="+cfg, "--hostname-override="+s.node)
	rs, err := cri.NewRemoteRuntimeService(context.Background(), nodeletEndpoint(t), 3*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.rs = rs
	t.Cleanup(func() { s.removeAllPods(t) })
	return s
}

// restart kills nodelet (SIGKILL when hard) and starts it again with the same arguments.
func (s *standalone) restart(t *testing.T, hard bool) {
	t.Helper()
	sig := syscall.SIGTERM
	if hard {
		sig = syscall.SIGKILL
	}
	s.signal(sig)
	<-s.done
	n := launchNodelet(t, s.healthzPort, s.rootDir, s.cmd.Args[1:])
	s.nodelet = n
}

// removeAllPods deletes every sandbox of this test's node from containerd.
func (s *standalone) removeAllPods(t *testing.T) {
	ctx := context.Background()
	s.signal(syscall.SIGKILL)
	<-s.done
	sandboxes, _ := s.rs.ListPodSandbox(ctx, nil)
	for _, sb := range sandboxes {
		if strings.HasSuffix(sb.Labels[criconfig.PodNameLabel], "-"+s.node) {
			_ = s.rs.StopPodSandbox(ctx, sb.Id)
			_ = s.rs.RemovePodSandbox(ctx, sb.Id)
		}
	}
}

func (s *standalone) writeManifest(t *testing.T, file, content string) {
	t.Helper()
	tmp := filepath.Join(s.manifests, "."+file+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.manifests, file)); err != nil {
		t.Fatal(err)
	}
}

// containers lists this node's containers of a static pod, by pod name without the suffix.
func (s *standalone) containers(t *testing.T, pod string, all bool) []*runtimeapi.Container {
	t.Helper()
	filter := &runtimeapi.ContainerFilter{LabelSelector: map[string]string{criconfig.PodNameLabel: pod + "-" + s.node}}
	if !all {
		filter.State = &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	}
	cs, err := s.rs.ListContainers(context.Background(), filter)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func (s *standalone) sandboxes(t *testing.T, pod string) []*runtimeapi.PodSandbox {
	t.Helper()
	sbs, err := s.rs.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{criconfig.PodNameLabel: pod + "-" + s.node}})
	if err != nil {
		t.Fatal(err)
	}
	return sbs
}

// waitFor polls cond every 100 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}

// apiPods reads the pods from the local API, as `nodelet pods` does.
func (s *standalone) apiPods(t *testing.T) map[string]v1.Pod {
	t.Helper()
	resp, err := server.LocalClient(cli.SocketPath(s.rootDir)).Get(server.LocalURL("/pods"))
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var list v1.PodList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	out := map[string]v1.Pod{}
	for _, p := range list.Items {
		out[strings.TrimSuffix(p.Name, "-"+s.node)] = p
	}
	return out
}

func busyboxPod(name, restartPolicy string, containers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  terminationGracePeriodSeconds: 2\n  restartPolicy: %s\n  containers:\n", name, restartPolicy)
	for i, cmd := range containers {
		fmt.Fprintf(&b, "  - name: c%d\n    image: %s\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", %q]\n", i, busybox, cmd)
	}
	return b.String()
}

func ids(cs []*runtimeapi.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Metadata.Name+"="+c.Id)
	}
	sort.Strings(out)
	return out
}

func TestStaticPodAddEditRemove(t *testing.T) {
	s := startStandalone(t)
	s.writeManifest(t, "app.yaml", busyboxPod("app", "Always", "sleep 3600", "sleep 3601"))
	took := waitFor(t, 10*time.Second, "both containers running", func() bool { return len(s.containers(t, "app", false)) == 2 })
	t.Logf("manifest written → containers running in %v", took.Round(time.Millisecond))
	logDirs, _ := filepath.Glob(filepath.Join(s.logsDir, "default_app-"+s.node+"_*"))
	if len(logDirs) != 1 {
		t.Fatalf("want one pod log directory, got %v", logDirs)
	}

	// An edited manifest is a new pod (its UID comes from its content, as upstream):
	// the old one is stopped and the new one runs the new command.
	oldUID := s.sandboxes(t, "app")[0].Metadata.Uid
	s.writeManifest(t, "app.yaml", busyboxPod("app", "Always", "sleep 3600", "sleep 3602"))
	waitFor(t, 20*time.Second, "the edited pod running and the old one stopped", func() bool {
		ready := readySandboxes(s.sandboxes(t, "app"))
		if len(ready) != 1 || ready[0].Metadata.Uid == oldUID {
			return false
		}
		running := s.containers(t, "app", false)
		return len(running) == 2 && running[0].PodSandboxId == ready[0].Id && running[1].PodSandboxId == ready[0].Id
	})

	// Removing the manifest stops everything; GC then removes it from containerd and
	// deletes the log directories.
	if err := os.Remove(filepath.Join(s.manifests, "app.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "containers stopped", func() bool { return len(s.containers(t, "app", false)) == 0 })
	waitFor(t, 90*time.Second, "sandboxes and containers removed by GC", func() bool {
		return len(s.sandboxes(t, "app")) == 0 && len(s.containers(t, "app", true)) == 0
	})
	waitFor(t, 30*time.Second, "log directories removed", func() bool {
		dirs, _ := filepath.Glob(filepath.Join(s.logsDir, "default_app-"+s.node+"_*"))
		return len(dirs) == 0
	})
}

func readySandboxes(sbs []*runtimeapi.PodSandbox) []*runtimeapi.PodSandbox {
	var out []*runtimeapi.PodSandbox
	for _, sb := range sbs {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			out = append(out, sb)
		}
	}
	return out
}

func TestInvalidManifestDoesNotStopOthers(t *testing.T) {
	s := startStandalone(t)
	s.writeManifest(t, "good.yaml", busyboxPod("good", "Always", "sleep 3600"))
	s.writeManifest(t, "broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: broken\nspec:\n  containers:\n  - name: a\n    image: \"\"\n")
	s.writeManifest(t, "garbage.yaml", "this: [is not a pod\n")
	waitFor(t, 10*time.Second, "the valid pod running", func() bool { return len(s.containers(t, "good", false)) == 1 })
	if err := s.waitLog(5*time.Second, "broken.yaml", "garbage.yaml"); err != nil {
		t.Fatalf("the bad files are not named: %v", err)
	}
	if n := len(s.sandboxes(t, "broken")); n != 0 {
		t.Errorf("the invalid pod got %d sandboxes", n)
	}
	// Fixing the file brings the pod up.
	s.writeManifest(t, "broken.yaml", busyboxPod("broken", "Always", "sleep 3600"))
	waitFor(t, 10*time.Second, "the fixed pod running", func() bool { return len(s.containers(t, "broken", false)) == 1 })
}

func TestCrashingContainerBacksOff(t *testing.T) {
	s := startStandalone(t)
	s.writeManifest(t, "crash.yaml", busyboxPod("crash", "Always", "echo crashing; exit 1"))
	waitFor(t, 40*time.Second, "two restarts and CrashLoopBackOff", func() bool {
		p, ok := s.apiPods(t)["crash"]
		if !ok || len(p.Status.ContainerStatuses) != 1 {
			return false
		}
		cs := p.Status.ContainerStatuses[0]
		return cs.RestartCount >= 2 && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff"
	})
	// Back-off 10 s then 20 s: attempts must stay well below one per second.
	if n := len(s.containers(t, "crash", true)); n > 4 {
		t.Errorf("%d container attempts in ~30 s: no back-off", n)
	}
}

func TestRestartAdoptsRunningContainers(t *testing.T) {
	s := startStandalone(t)
	s.writeManifest(t, "keep.yaml", busyboxPod("keep", "Always", "sleep 3600", "sleep 3601"))
	waitFor(t, 10*time.Second, "containers running", func() bool { return len(s.containers(t, "keep", false)) == 2 })
	before := ids(s.containers(t, "keep", true))
	sandboxes := len(s.sandboxes(t, "keep"))
	for _, hard := range []bool{true, false} {
		s.restart(t, hard)
		if err := s.waitHealthz(5*time.Second, 200); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the pod reported running again", func() bool {
			p, ok := s.apiPods(t)["keep"]
			return ok && p.Status.Phase == v1.PodRunning
		})
		time.Sleep(3 * time.Second) // a few relists and housekeeping rounds
		if after := ids(s.containers(t, "keep", true)); strings.Join(after, ",") != strings.Join(before, ",") {
			t.Fatalf("restart (kill -9: %v) changed containers:\nbefore %v\nafter  %v", hard, before, after)
		}
		if n := len(s.sandboxes(t, "keep")); n != sandboxes {
			t.Fatalf("restart created sandboxes: %d → %d", sandboxes, n)
		}
	}
}

func TestRuntimeOutageIsSurvived(t *testing.T) {
	s := startStandalone(t)
	s.writeManifest(t, "steady.yaml", busyboxPod("steady", "Always", "sleep 3600"))
	waitFor(t, 10*time.Second, "container running", func() bool { return len(s.containers(t, "steady", false)) == 1 })
	before := ids(s.containers(t, "steady", true))
	runtimeScript(t, "stop")
	time.Sleep(4 * time.Second)
	runtimeScript(t, "start")
	waitFor(t, 15*time.Second, "healthz back", func() bool { return s.healthz() == 200 })
	time.Sleep(3 * time.Second)
	if after := ids(s.containers(t, "steady", true)); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("the outage changed containers:\nbefore %v\nafter  %v", before, after)
	}
	out := s.out.String()
	if n := strings.Count(out, `"Container runtime is not ready"`); n != 1 {
		t.Errorf("the outage's start was logged %d times, want once", n)
	}
	if n := strings.Count(out, `"Container runtime is ready" downFor=`); n != 1 {
		t.Errorf("the outage's end was logged %d times, want once", n)
	}
}

// exec runs a command in this node's running container of a static pod.
func (s *standalone) exec(t *testing.T, pod string, cmd ...string) {
	t.Helper()
	cs := s.containers(t, pod, false)
	if len(cs) == 0 {
		t.Fatalf("no running container in %s", pod)
	}
	if _, _, err := s.rs.ExecSync(context.Background(), cs[0].Id, cmd, 5*time.Second); err != nil {
		t.Fatalf("exec %v: %v", cmd, err)
	}
}

func TestProbesDriveReadinessAndRestarts(t *testing.T) {
	s := startStandalone(t)
	s.writeManifest(t, "probed.yaml", `apiVersion: v1
kind: Pod
metadata:
  name: probed
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: `+busybox+`
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    readinessProbe:
      exec: {command: ["test", "-f", "/tmp/ready"]}
      periodSeconds: 1
    livenessProbe:
      exec: {command: ["test", "!", "-f", "/tmp/dead"]}
      periodSeconds: 1
      failureThreshold: 1
`)
	ready := func() (bool, int32) {
		p, ok := s.apiPods(t)["probed"]
		if !ok || len(p.Status.ContainerStatuses) != 1 {
			return false, -1
		}
		return p.Status.ContainerStatuses[0].Ready, p.Status.ContainerStatuses[0].RestartCount
	}
	waitFor(t, 10*time.Second, "container running", func() bool { return len(s.containers(t, "probed", false)) == 1 })
	time.Sleep(2 * time.Second)
	if r, _ := ready(); r {
		t.Fatal("ready before the readiness file exists")
	}
	s.exec(t, "probed", "touch", "/tmp/ready")
	waitFor(t, 5*time.Second, "ready after the file appears", func() bool { r, _ := ready(); return r })
	s.exec(t, "probed", "touch", "/tmp/dead")
	waitFor(t, 15*time.Second, "one restart after liveness fails", func() bool { _, n := ready(); return n == 1 })
	// The new container has no /tmp/dead: it stays up and is not ready (no /tmp/ready).
	time.Sleep(3 * time.Second)
	if r, n := ready(); n != 1 || r {
		t.Errorf("after the restart: ready=%v restarts=%d, want not ready and exactly 1 restart", r, n)
	}
}

func TestRestoredManifestRunsAgain(t *testing.T) {
	s := startStandalone(t)
	manifest := busyboxPod("back", "Always", "sleep 3600")
	s.writeManifest(t, "back.yaml", manifest)
	waitFor(t, 10*time.Second, "container running", func() bool { return len(s.containers(t, "back", false)) == 1 })
	if err := os.Remove(filepath.Join(s.manifests, "back.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "container stopped", func() bool { return len(s.containers(t, "back", false)) == 0 })
	// The same content gives the same UID: the pod must come back all the same.
	s.writeManifest(t, "back.yaml", manifest)
	took := waitFor(t, 15*time.Second, "container running again", func() bool { return len(s.containers(t, "back", false)) == 1 })
	t.Logf("restored manifest running again after %v", took.Round(time.Millisecond))
	waitFor(t, 10*time.Second, "status Running", func() bool {
		p, ok := s.apiPods(t)["back"]
		return ok && p.Status.Phase == v1.PodRunning
	})
}
