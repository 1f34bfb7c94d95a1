//go:build e2e

// Package e2e runs nodelet against the real containerd that `make runtime-up` starts.
// Run with `make test-e2e`, which brings the runtime up and sets CONTAINER_RUNTIME_ENDPOINT.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// isolatedRig is a second containerd (its own socket, state, bridge and pod subnet) for
// tests that run the nodelet binary: a kubelet kills every pod in its runtime that no
// source asks for, so nodelet processes must not share a runtime with the library tests.
var isolatedRig = isolatedRigFor(os.Getenv("NODELET_RUNTIME"))

// isolatedRigFor: the containerd2 flavour gets its own rig (a state dir holds one flavour).
func isolatedRigFor(flavour string) []string {
	if flavour == "containerd2" {
		return []string{
			"NODELET_STATE_DIR=/var/lib/nodelet-e2e2",
			"NODELET_RUN_DIR=/run/nodelet-e2e2",
			"NODELET_BRIDGE=nodeletc2e",
			"NODELET_POD_CIDR=10.91.0.0/24",
		}
	}
	return []string{
		"NODELET_STATE_DIR=/var/lib/nodelet-e2e",
		"NODELET_RUN_DIR=/run/nodelet-e2e",
		"NODELET_BRIDGE=nodelet1",
		"NODELET_POD_CIDR=10.89.0.0/24",
	}
}

// isolatedEndpoint is set by TestMain once the isolated rig is up.
var isolatedEndpoint string

func TestMain(m *testing.M) {
	cmd := exec.Command(filepath.Join(repoRoot(), "hack", "runtime.sh"), "up")
	cmd.Env = append(os.Environ(), isolatedRig...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bringing up the isolated containerd for nodelet tests: %v\n", err)
		os.Exit(1)
	}
	isolatedEndpoint = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "CONTAINER_RUNTIME_ENDPOINT="))
	started := time.Now()
	code := m.Run()
	reportNodesLeft(started)
	os.Exit(code)
}

// reportNodesLeft names the Nodes the run created and left in the cluster: each test
// deletes its nodes, and dead nodes left behind change what the node lifecycle
// controller does for later tests (see addNotReadyNodes).
func reportNodesLeft(since time.Time) {
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		return
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return
	}
	nodes, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: listing the nodes left: %v\n", err)
		return
	}
	for _, n := range nodes.Items {
		if n.CreationTimestamp.After(since) {
			fmt.Fprintf(os.Stderr, "e2e: node %s, created %s, is left in the cluster\n", n.Name, n.CreationTimestamp.Format(time.TimeOnly))
		}
	}
}

// nodeletEndpoint is the CRI socket nodelet processes under test use.
func nodeletEndpoint(t *testing.T) string {
	t.Helper()
	if isolatedEndpoint == "" {
		t.Fatal("the isolated containerd is not up")
	}
	return isolatedEndpoint
}

// endpoint is the CRI socket of the project's containerd.
func endpoint(t *testing.T) string {
	t.Helper()
	ep := os.Getenv("CONTAINER_RUNTIME_ENDPOINT")
	if ep == "" {
		t.Fatal("CONTAINER_RUNTIME_ENDPOINT is not set: run `make test-e2e` (it starts containerd)")
	}
	return ep
}

func nodeletBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("NODELET_BIN")
	if bin == "" {
		bin = filepath.Join(repoRoot(), "bin", "nodelet")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("nodelet binary: %v (run `make build`)", err)
	}
	return bin
}

func repoRoot() string {
	wd, _ := os.Getwd()
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// freePort asks the kernel for an unused loopback port.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuffer collects a process's output for inspection while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// nodelet is one running nodelet process.
type nodelet struct {
	t           *testing.T
	cmd         *exec.Cmd
	out         *syncBuffer
	started     time.Time
	done        chan struct{}
	exitErr     error
	healthzPort int
	rootDir     string
}

// startNodelet runs nodelet with a private root dir, log dir and healthz port, plus args.
func startNodelet(t *testing.T, args ...string) *nodelet {
	t.Helper()
	return startNodeletOn(t, nodeletEndpoint(t), "", args...)
}

// startNodeletOn is startNodelet on the runtime at endpoint, with root as its root
// directory (a temporary one when empty).
func startNodeletOn(t *testing.T, endpoint, root string, args ...string) *nodelet {
	t.Helper()
	port := freePort(t)
	if root == "" {
		root = t.TempDir()
	}
	base := []string{
		"--container-runtime-endpoint=" + endpoint,
		"--root-dir=" + root,
		"--healthz-port=" + strconv.Itoa(port),
	}
	return launchNodelet(t, port, root, append(base, args...))
}

// launchNodelet starts the binary with exactly args and stops it when the test ends.
func launchNodelet(t *testing.T, healthzPort int, rootDir string, args []string) *nodelet {
	t.Helper()
	n := &nodelet{t: t, out: &syncBuffer{}, done: make(chan struct{}), healthzPort: healthzPort, rootDir: rootDir}
	n.cmd = exec.Command(nodeletBin(t), args...)
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	n.started = time.Now()
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.exitErr = n.cmd.Wait(); close(n.done) }()
	t.Cleanup(func() {
		n.signal(syscall.SIGKILL)
		<-n.done
		if t.Failed() {
			t.Logf("nodelet output (pid %d):\n%s", n.cmd.Process.Pid, n.out.String())
		}
	})
	return n
}

func (n *nodelet) signal(sig os.Signal) {
	select {
	case <-n.done:
	default:
		_ = n.cmd.Process.Signal(sig)
	}
}

// waitExit waits up to d for the process to exit and returns its exit code.
func (n *nodelet) waitExit(d time.Duration) (int, error) {
	select {
	case <-n.done:
		return n.cmd.ProcessState.ExitCode(), nil
	case <-time.After(d):
		return -1, fmt.Errorf("nodelet still running after %v", d)
	}
}

// waitLog waits until the output contains every one of subs.
func (n *nodelet) waitLog(d time.Duration, subs ...string) error {
	deadline := time.Now().Add(d)
	for {
		out := n.out.String()
		missing := ""
		for _, s := range subs {
			if !strings.Contains(out, s) {
				missing = s
				break
			}
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %q in nodelet output after %v", missing, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// healthz returns the status code of /healthz, or 0 when nothing answers.
func (n *nodelet) healthz() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/healthz", n.healthzPort), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitHealthz polls /healthz until it answers want or d passes.
func (n *nodelet) waitHealthz(d time.Duration, want int) error {
	deadline := time.Now().Add(d)
	for {
		code := n.healthz()
		if code == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/healthz answered %d, want %d, for %v", code, want, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runtimeScript runs hack/runtime.sh with a subcommand (stop/start) on the isolated
// containerd that nodelet processes use.
func runtimeScript(t *testing.T, sub string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(), "hack", "runtime.sh"), sub)
	cmd.Env = append(os.Environ(), isolatedRig...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/runtime.sh %s: %v\n%s", sub, err, out)
	}
}
