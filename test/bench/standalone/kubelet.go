package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/test/internal/host"
)

// kubelet is one kubelet under test (nodelet or upstream's) with everything it owns: its
// containerd (which no one else may use: a kubelet removes pods it does not own), a node
// name, a directory for manifests, logs and its root dir, and a cgroup root of its own.
type kubelet struct {
	name     string
	endpoint string
	rs       internalapi.RuntimeService
	node     string
	dir      string
	// cgroupRoot is the kubelet's cgroupRoot, without the leading slash.
	cgroupRoot string
	cmd        *exec.Cmd
}

func newKubelet(ctx context.Context, name, endpoint, baseDir string) (*kubelet, error) {
	rs, err := cri.NewRemoteRuntimeService(ctx, endpoint, 3*time.Second, 2*time.Minute)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	id := string(uuid.NewUUID())[:6]
	k := &kubelet{name: name, endpoint: endpoint, rs: rs, node: "bench-" + id,
		dir: filepath.Join(baseDir, name), cgroupRoot: "bench-" + id}
	for _, d := range []string{k.manifests(), k.logsDir(), k.rootDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return k, host.MakeCgroupRoot(k.cgroupRoot)
}

func (k *kubelet) manifests() string { return filepath.Join(k.dir, "manifests") }
func (k *kubelet) logsDir() string   { return filepath.Join(k.dir, "logs") }
func (k *kubelet) rootDir() string   { return filepath.Join(k.dir, "root") }
func (k *kubelet) logFile() string   { return filepath.Join(k.dir, k.name+".log") }

// podName is the name a static pod of this kubelet gets.
func (k *kubelet) podName(manifest string) string { return manifest + "-" + k.node }

// start runs the kubelet binary with args, its output in its log file.
func (k *kubelet) start(bin string, args ...string) error {
	log, err := os.Create(k.logFile())
	if err != nil {
		return err
	}
	k.cmd = exec.Command(bin, args...)
	k.cmd.Stdout, k.cmd.Stderr = log, log
	// Its own process group: a Ctrl-C on the bench reaches the bench only, which then
	// stops the kubelets in order and cleans up after them.
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return k.cmd.Start()
}

// stop stops the kubelet (SIGTERM, then SIGKILL after 15 s), removes every pod it ran from
// its runtime and then its cgroups.
func (k *kubelet) stop() error {
	if k.cmd != nil && k.cmd.Process != nil {
		_ = k.cmd.Process.Signal(syscall.SIGCONT) // in case it was frozen
		_ = k.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = k.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = k.cmd.Process.Kill()
			<-done
		}
	}
	return errors.Join(k.removePods(context.Background()), host.RemoveCgroupRoot(k.cgroupRoot), host.UnmountUnder(k.dir, 0))
}

// removePods stops and removes this node's pods and the raw ones the bench made.
func (k *kubelet) removePods(ctx context.Context) error {
	sandboxes, err := k.rs.ListPodSandbox(ctx, nil)
	if err != nil {
		return err
	}
	var errs []error
	for _, sb := range sandboxes {
		if strings.HasSuffix(sb.Labels[criconfig.PodNameLabel], "-"+k.node) || sb.Labels[rawPodLabel] == k.node {
			errs = append(errs, k.rs.StopPodSandbox(ctx, sb.Id), k.rs.RemovePodSandbox(ctx, sb.Id))
		}
	}
	return errors.Join(errs...)
}

// freeze stops the kubelet process (SIGSTOP) until the returned function resumes it.
func (k *kubelet) freeze() (func(), error) {
	if err := k.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return nil, err
	}
	return func() { _ = k.cmd.Process.Signal(syscall.SIGCONT) }, nil
}

// writeManifest writes a manifest atomically (write, then rename), as editors and config
// tools do.
func (k *kubelet) writeManifest(name string) error {
	tmp := filepath.Join(k.manifests(), "."+name)
	if err := os.WriteFile(tmp, []byte(manifest(name)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(k.manifests(), name+".yaml"))
}

// running counts this node's running containers whose manifest name starts with prefix.
func (k *kubelet) running(ctx context.Context, prefix string) (int, error) {
	cs, err := k.rs.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cs {
		name := c.Labels[criconfig.PodNameLabel]
		if strings.HasPrefix(name, prefix) && strings.HasSuffix(name, "-"+k.node) {
			n++
		}
	}
	return n, nil
}

// waitRunning polls the runtime every pollPeriod, as `crictl ps` in a loop would, until
// want containers of prefix run, and returns when it saw them.
func (k *kubelet) waitRunning(ctx context.Context, prefix string, want int, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		n, err := k.running(ctx, prefix)
		if err != nil {
			return time.Time{}, err
		}
		if n >= want {
			return time.Now(), nil
		}
		time.Sleep(pollPeriod)
	}
	return time.Time{}, fmt.Errorf("%s: %d containers of %s not running after %v; see %s", k.name, want, prefix, timeout, k.logFile())
}

// timeline is what containerd recorded of one pod's start: when the sandbox was created
// (RunPodSandbox began), when the container was created and when it started.
type timeline struct{ sandboxCreated, containerCreated, started time.Time }

func podTimeline(ctx context.Context, rs internalapi.RuntimeService, podName string) (timeline, error) {
	var tl timeline
	sbs, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{criconfig.PodNameLabel: podName}})
	if err != nil || len(sbs) == 0 {
		return tl, fmt.Errorf("no sandbox for %s: %v", podName, err)
	}
	tl.sandboxCreated = time.Unix(0, sbs[0].CreatedAt)
	cs, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: map[string]string{criconfig.PodNameLabel: podName}})
	if err != nil || len(cs) == 0 {
		return tl, fmt.Errorf("no container for %s: %v", podName, err)
	}
	st, err := rs.ContainerStatus(ctx, cs[0].Id, false)
	if err != nil {
		return tl, err
	}
	tl.containerCreated, tl.started = time.Unix(0, st.Status.CreatedAt), time.Unix(0, st.Status.StartedAt)
	return tl, nil
}

// waitRunningCrictl is waitRunning (for one container) done as a user would: running
// `crictl ps` in a loop, each run a new process.
func (k *kubelet) waitRunningCrictl(ctx context.Context, prefix string, _ int, timeout time.Duration) (time.Time, error) {
	pod := strings.TrimSuffix(prefix, "-") + "-" + k.node
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		out, err := exec.CommandContext(ctx, crictl, "-r", k.endpoint, "ps", "-q", "--state", "running",
			"--label", criconfig.PodNameLabel+"="+pod).Output()
		if err != nil {
			return time.Time{}, fmt.Errorf("crictl ps: %w", err)
		}
		if len(strings.TrimSpace(string(out))) > 0 {
			return time.Now(), nil
		}
		time.Sleep(pollPeriod)
	}
	return time.Time{}, fmt.Errorf("%s: %s not running after %v; see %s", k.name, pod, timeout, k.logFile())
}

// lastStartedAt is when containerd started the newest container among the pods named.
func lastStartedAt(ctx context.Context, rs internalapi.RuntimeService, podNames ...string) (time.Time, error) {
	var last time.Time
	for _, name := range podNames {
		cs, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: map[string]string{criconfig.PodNameLabel: name}})
		if err != nil || len(cs) == 0 {
			return time.Time{}, fmt.Errorf("no container for %s: %v", name, err)
		}
		st, err := rs.ContainerStatus(ctx, cs[0].Id, false)
		if err != nil {
			return time.Time{}, err
		}
		if at := time.Unix(0, st.Status.StartedAt); at.After(last) {
			last = at
		}
	}
	return last, nil
}
