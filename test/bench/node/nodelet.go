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

const image = "docker.io/library/busybox:1.36"

// node is one standalone nodelet under test and everything it owns: its containerd
// (which no one else may use: a kubelet removes pods it does not own), a node name, a
// directory for manifests, logs and its root dir, and a cgroup root of its own. The
// nodelet process is started and stopped once per measurement window; its pods keep
// running in between and each new nodelet adopts them.
type node struct {
	endpoint string
	rs       internalapi.RuntimeService
	is       internalapi.ImageManagerService
	name     string
	dir      string
	bin      string
	// cgroupRoot is nodelet's cgroupRoot, without the leading slash.
	cgroupRoot string
	// containerd is the runtime's daemon; shimArgs pick out its shims.
	containerd int
	shimArgs   []string

	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has exited
	logPath string
	runs    int // nodelet processes started so far: each gets its own log
	// profiler, when set, profiles nodelet and containerd over the idle windows.
	profiler *profiler
}

func newNode(ctx context.Context, endpoint, bin, baseDir string) (*node, error) {
	sock, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		return nil, fmt.Errorf("endpoint %s: want unix://<socket>", endpoint)
	}
	pid, err := readPIDFile(filepath.Join(filepath.Dir(sock), "containerd.pid"))
	if err != nil {
		return nil, fmt.Errorf("containerd of %s: %w", endpoint, err)
	}
	rs, err := cri.NewRemoteRuntimeService(ctx, endpoint, 3*time.Second, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	is, err := cri.NewRemoteImageService(ctx, endpoint, 3*time.Second, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	id := string(uuid.NewUUID())[:6]
	n := &node{endpoint: endpoint, rs: rs, is: is, name: "bench-" + id, dir: baseDir, bin: bin,
		cgroupRoot: "nodelet-bench-" + id, containerd: pid, shimArgs: []string{"-address", sock}}
	for _, d := range []string{n.manifests(), n.logsDir(), n.rootDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	return n, host.MakeCgroupRoot(n.cgroupRoot)
}

func readPIDFile(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var pid int
	_, err = fmt.Sscan(string(data), &pid)
	return pid, err
}

func (n *node) manifests() string { return filepath.Join(n.dir, "manifests") }
func (n *node) logsDir() string   { return filepath.Join(n.dir, "logs") }
func (n *node) rootDir() string   { return filepath.Join(n.dir, "root") }

// podName is the name of the static pod from manifest name on this node.
func (n *node) podName(manifest string) string { return manifest + "-" + n.name }

// config is nodelet's configuration for one variant: EventedPLEG off forces relisting;
// eviction off sets every hard threshold to "0%" (upstream's "no threshold") and turns
// local storage isolation off, which leaves the eviction manager's loop nothing to do:
// it no longer fetches the stats summary.
func (n *node) config(v variant) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %s
staticPodPath: %s
podLogsDir: %s
cgroupRoot: /%s
healthzPort: 0
featureGates:
  EventedPLEG: %t
`, n.endpoint, n.manifests(), n.logsDir(), n.cgroupRoot, v.evented)
	if n.profiler != nil {
		b.WriteString(n.profiler.serverConfig())
	} else {
		b.WriteString("enableServer: false\n")
	}
	if !v.eviction {
		b.WriteString("localStorageCapacityIsolation: false\nevictionHard:\n")
		for _, s := range []string{"memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available", "imagefs.inodesFree"} {
			fmt.Fprintf(&b, "  %s: \"0%%\"\n", s)
		}
	}
	return b.String()
}

// start runs nodelet with the variant's configuration, its output in a log of its own.
func (n *node) start(v variant) error {
	n.runs++
	cfg := filepath.Join(n.dir, fmt.Sprintf("config-%d.yaml", n.runs))
	if err := os.WriteFile(cfg, []byte(n.config(v)), 0o644); err != nil {
		return err
	}
	n.logPath = filepath.Join(n.dir, fmt.Sprintf("nodelet-%d-%s.log", n.runs, v.key))
	log, err := os.Create(n.logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	bin := n.bin
	if v.bin != "" {
		bin = v.bin
	}
	n.cmd = exec.Command(bin, "--config="+cfg, "--root-dir="+n.rootDir(), "--hostname-override="+n.name)
	n.cmd.Stdout, n.cmd.Stderr = log, log
	// Its own process group: a Ctrl-C on the bench reaches the bench only, which then
	// stops nodelet and cleans up after it.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		return err
	}
	exited, cmd := make(chan struct{}), n.cmd
	go func() { _ = cmd.Wait(); close(exited) }()
	n.exited = exited
	return nil
}

// checkAlive fails when nodelet has exited.
func (n *node) checkAlive() error {
	select {
	case <-n.exited:
		return fmt.Errorf("nodelet exited (%v); see %s", n.cmd.ProcessState, n.logPath)
	default:
		return nil
	}
}

// stop stops nodelet (SIGTERM, then SIGKILL after 15 s); its pods keep running.
func (n *node) stop() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(15 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
	n.cmd = nil
}

// checkPLEG checks from nodelet's log that it runs the PLEG the variant asks for: the
// evented one says when it watches the runtime's events.
func (n *node) checkPLEG(v variant) error {
	data, err := os.ReadFile(n.logPath)
	if err != nil {
		return err
	}
	watching := strings.Contains(string(data), "Evented PLEG: watching the container runtime's events")
	if watching != v.evented {
		return fmt.Errorf("%s: nodelet watches container events: %t, want %t (does the runtime stream them? see %s)", v.name, watching, v.evented, n.logPath)
	}
	return nil
}

// writeManifest writes a manifest atomically (write, then rename), as config tools do.
func (n *node) writeManifest(name string) error {
	body := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: %s\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"1000000\"]\n", name, image)
	tmp := filepath.Join(n.manifests(), "."+name)
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(n.manifests(), name+".yaml"))
}

// running lists this node's running containers.
func (n *node) running(ctx context.Context) ([]*runtimeapi.Container, error) {
	cs, err := n.rs.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		return nil, err
	}
	var out []*runtimeapi.Container
	for _, c := range cs {
		if strings.HasSuffix(c.Labels[criconfig.PodNameLabel], "-"+n.name) {
			out = append(out, c)
		}
	}
	return out, nil
}

// waitRunning polls the runtime until want of this node's containers run.
func (n *node) waitRunning(ctx context.Context, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		cs, err := n.running(ctx)
		if err != nil {
			return err
		}
		if len(cs) >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d containers running after %v; see %s", len(cs), want, timeout, n.logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// cpu is the CPU time used so far by nodelet, containerd and containerd's shims.
type cpu struct{ nodelet, containerd, shims float64 }

func (c cpu) sub(d cpu) cpu {
	return cpu{c.nodelet - d.nodelet, c.containerd - d.containerd, c.shims - d.shims}
}

func (c cpu) perMinute(window time.Duration) cpu {
	f := float64(time.Minute) / float64(window)
	return cpu{c.nodelet * f, c.containerd * f, c.shims * f}
}

// cpuNow reads the CPU time of nodelet, containerd and the given shims.
func (n *node) cpuNow(shims []int) (cpu, error) {
	var c cpu
	var err1, err2 error
	if n.cmd != nil {
		c.nodelet, err1 = host.CPUSeconds(n.cmd.Process.Pid)
	}
	c.containerd, err2 = host.CPUSeconds(n.containerd)
	c.shims = host.CPUSecondsOf(shims)
	return c, errors.Join(err1, err2)
}

// cleanup stops nodelet, removes its pods from the runtime, then its cgroups and mounts.
func (n *node) cleanup() error {
	n.stop()
	return errors.Join(n.removePods(context.Background()), host.RemoveCgroupRoot(n.cgroupRoot), host.UnmountUnder(n.dir, 0))
}

func (n *node) removePods(ctx context.Context) error {
	sandboxes, err := n.rs.ListPodSandbox(ctx, nil)
	if err != nil {
		return err
	}
	var errs []error
	for _, sb := range sandboxes {
		if strings.HasSuffix(sb.Labels[criconfig.PodNameLabel], "-"+n.name) {
			errs = append(errs, n.rs.StopPodSandbox(ctx, sb.Id), n.rs.RemovePodSandbox(ctx, sb.Id))
		}
	}
	return errors.Join(errs...)
}
