//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/test/internal/host"
)

// The switch tests run upstream's kubelet and nodelet in turn on one node: the same
// command line, config file, root directory and containerd, as an operator replacing the
// kubelet service does.

const (
	upstream = "upstream"
	nodeletK = "nodelet"
)

// upstreamKubeletBin is upstream's kubelet v1.37.2, built with the control plane
// (hack/controlplane.sh build).
func upstreamKubeletBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("NODELET_UPSTREAM_KUBELET")
	if bin == "" {
		cache := os.Getenv("NODELET_CACHE_DIR")
		if cache == "" {
			cache = "/var/cache/nodelet"
		}
		bin = filepath.Join(cache, "k8s-v1.37.2", "bin", "kubelet")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("upstream's kubelet: %v (hack/controlplane.sh build builds it)", err)
	}
	return bin
}

// switchNode is one node whose kubelet is switched between upstream's and nodelet.
type switchNode struct {
	t        *testing.T
	args     []string
	endpoint string
	rs       internalapi.RuntimeService
	// owns says whether a sandbox belongs to this test's pods.
	owns func(labels map[string]string) bool

	current     *kubeletProcess
	hostChanges *host.UpstreamKubeletState
}

// kubeletProcess is one running kubelet, either kind.
type kubeletProcess struct {
	kind string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

func newSwitchNode(t *testing.T, endpoint string, args []string, owns func(map[string]string) bool) *switchNode {
	t.Helper()
	rs, err := cri.NewRemoteRuntimeService(context.Background(), endpoint, 3*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s := &switchNode{t: t, args: args, endpoint: endpoint, rs: rs, owns: owns}
	t.Cleanup(s.cleanup)
	return s
}

// start runs the kubelet of the given kind with the node's arguments. Before upstream's
// runs, the host state it changes is recorded (restored when it stops).
func (s *switchNode) start(kind string) {
	s.t.Helper()
	if s.current != nil {
		s.t.Fatalf("%s is still running", s.current.kind)
	}
	bin := nodeletBin(s.t)
	if kind == upstream {
		bin = upstreamKubeletBin(s.t)
		state, err := host.RecordUpstreamKubeletState()
		if err != nil {
			s.t.Fatal(err)
		}
		s.hostChanges = state
	}
	p := &kubeletProcess{kind: kind, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, s.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	s.current = p
	s.t.Logf("%s started (pid %d)", kind, p.cmd.Process.Pid)
}

// stop stops the running kubelet as a service manager does: SIGTERM, SIGKILL after 20 s.
// Its pods keep running.
func (s *switchNode) stop() {
	s.t.Helper()
	p := s.current
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	s.current = nil
	if p.kind == upstream {
		// Its canary monitor re-adds the iptables chains while it runs: restore after.
		if err := s.hostChanges.Restore(); err != nil {
			s.t.Errorf("restoring what upstream's kubelet changed on the host: %v", err)
		}
	}
	if s.t.Failed() {
		s.t.Logf("%s output:\n%s", p.kind, tail(p.out.String(), 200))
	}
}

// exited fails the test if the running kubelet has exited.
func (s *switchNode) exited() error {
	select {
	case <-s.current.done:
		return fmt.Errorf("%s exited (%v):\n%s", s.current.kind, s.current.cmd.ProcessState, tail(s.current.out.String(), 60))
	default:
		return nil
	}
}

// cleanup stops the kubelet and removes the test's pods from containerd.
func (s *switchNode) cleanup() {
	s.stop()
	ctx := context.Background()
	sandboxes, _ := s.rs.ListPodSandbox(ctx, nil)
	for _, sb := range sandboxes {
		if s.owns(sb.Labels) {
			_ = s.rs.StopPodSandbox(ctx, sb.Id)
			_ = s.rs.RemovePodSandbox(ctx, sb.Id)
		}
	}
}

// runtimeView is what a kubelet switch must leave alone: the test's sandboxes and
// containers, by ID, with their state and restart count.
type runtimeView struct {
	sandboxes  map[string]runtimeapi.PodSandboxState
	containers map[string]containerView
}

type containerView struct {
	pod, name    string
	state        runtimeapi.ContainerState
	restartCount string
}

func (v runtimeView) String() string {
	var lines []string
	for id, st := range v.sandboxes {
		lines = append(lines, fmt.Sprintf("sandbox %.12s %v", id, st))
	}
	for id, c := range v.containers {
		lines = append(lines, fmt.Sprintf("container %.12s %s/%s %v restarts=%s", id, c.pod, c.name, c.state, c.restartCount))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func (s *switchNode) view() (runtimeView, error) {
	ctx := context.Background()
	v := runtimeView{sandboxes: map[string]runtimeapi.PodSandboxState{}, containers: map[string]containerView{}}
	sandboxes, err := s.rs.ListPodSandbox(ctx, nil)
	if err != nil {
		return v, err
	}
	mine := map[string]bool{}
	for _, sb := range sandboxes {
		if s.owns(sb.Labels) {
			v.sandboxes[sb.Id] = sb.State
			mine[sb.Id] = true
		}
	}
	containers, err := s.rs.ListContainers(ctx, nil)
	if err != nil {
		return v, err
	}
	for _, c := range containers {
		if mine[c.PodSandboxId] {
			v.containers[c.Id] = containerView{
				pod:          c.Labels[criconfig.PodNameLabel],
				name:         c.Labels[criconfig.ContainerNameLabel],
				state:        c.State,
				restartCount: c.Annotations[criconfig.ContainerRestartCountLabel],
			}
		}
	}
	return v, nil
}

// runningCount is how many of the view's containers run.
func (v runtimeView) runningCount() int {
	n := 0
	for _, c := range v.containers {
		if c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
			n++
		}
	}
	return n
}

// waitRunning waits until want containers of the test's pods run and the view has not
// changed for a few seconds, and returns it.
func (s *switchNode) waitRunning(want int, d time.Duration) runtimeView {
	s.t.Helper()
	var last runtimeView
	var stableSince time.Time
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := s.exited(); err != nil {
			s.t.Fatal(err)
		}
		v, err := s.view()
		if err == nil && v.runningCount() == want {
			if last.String() != v.String() {
				last, stableSince = v, time.Now()
			} else if time.Since(stableSince) > 3*time.Second {
				return v
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	v, _ := s.view()
	s.t.Fatalf("%d running containers and a stable view not reached in %v:\n%s", want, d, v)
	return v
}

// keeps watches the runtime for d after a switch and fails the test on the first change
// from before: a sandbox or container created, stopped or removed, or a restart count
// that moved. It also fails if the kubelet exits.
func (s *switchNode) keeps(before runtimeView, d time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := s.exited(); err != nil {
			s.t.Fatal(err)
		}
		v, err := s.view()
		if err != nil {
			s.t.Logf("listing the runtime: %v", err)
		} else if v.String() != before.String() {
			s.t.Fatalf("the switch to %s changed the node's pods:\nbefore:\n%s\nafter:\n%s", s.current.kind, before, v)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// switchTo stops the running kubelet, starts the other kind with the same arguments, and
// fails the test if, within 20 s, the pods' runtime view differs from before or the new
// kubelet logs that it killed something.
func (s *switchNode) switchTo(kind string, before runtimeView) {
	s.t.Helper()
	s.stop()
	start := time.Now()
	s.start(kind)
	s.keeps(before, 20*time.Second)
	if killed := s.logLines("Killing", "orphan", "definition changed"); len(killed) > 0 {
		s.t.Errorf("%s killed something:\n%s", kind, strings.Join(killed, "\n"))
	}
	s.t.Logf("%s kept every sandbox and container for %v", kind, time.Since(start).Round(time.Second))
}

// logLines are the running kubelet's output lines that contain any of subs.
func (s *switchNode) logLines(subs ...string) []string {
	var out []string
	for _, l := range strings.Split(s.current.out.String(), "\n") {
		if slices.ContainsFunc(subs, func(sub string) bool { return strings.Contains(l, sub) }) {
			out = append(out, l)
		}
	}
	return out
}

// unmountRootDir undoes what the kubelets mounted under root, and the bind mount of root
// on itself that upstream's kubelet makes (to make it shared) at every start.
func unmountRootDir(t *testing.T, root string) {
	unmountAllUnder(t, root)
	for range 10 {
		if err := syscall.Unmount(root, syscall.MNT_DETACH); err != nil {
			return // EINVAL: no longer a mount point
		}
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// switchConfig is the KubeletConfiguration both kubelets read. Upstream's needs webhook
// authentication off and AlwaysAllow to start without an API server; extra is appended.
func switchConfig(endpoint, cgroupRoot, manifests, podLogs string, healthzPort int, extra string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %s
cgroupRoot: /%s
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
staticPodPath: %s
podLogsDir: %s
healthzPort: %d
%s`, endpoint, cgroupRoot, manifests, podLogs, healthzPort, extra)
}
