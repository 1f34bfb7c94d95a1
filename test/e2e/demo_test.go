//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// TestClusterDemoTryList runs `make demo-cluster` (hack/demo.sh --cluster) as a new user
// would, waits for its "Try:" list, and runs every line of that list
// (examples/cluster/try.sh) from the repository root: logs, exec, port-forward and top go
// through the API server to nodelet's kubelet API, and each must succeed. Lines that read
// the demo's web server must show its greeting.
func TestClusterDemoTryList(t *testing.T) {
	root := repoRoot()
	node, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	node = strings.ToLower(node)
	admin := adminClient(t)
	demo := exec.Command(filepath.Join(root, "hack", "demo.sh"), "--cluster")
	demo.Dir = root
	out := &syncBuffer{}
	demo.Stdout, demo.Stderr = out, out
	demo.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = demo.Wait(); close(done) }()
	t.Cleanup(func() {
		ctx := context.Background()
		_ = admin.AppsV1().Deployments("default").Delete(ctx, "hello", metav1.DeleteOptions{})
		waitFor(t, 60*time.Second, "the demo's pods gone", func() bool {
			pods, err := admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=hello"})
			return err == nil && len(pods.Items) == 0
		})
		// demo.sh stops nodelet when it is stopped; the static pods stay, as the demo says.
		_ = demo.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-demo.Process.Pid, syscall.SIGKILL)
			<-done
		}
		removeNodeSandboxes(t, node)
		_ = admin.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
		if t.Failed() {
			t.Logf("demo output:\n%s", tail(out.String(), 80))
		}
	})
	waitFor(t, 5*time.Minute, "the demo's Try: list", func() bool {
		select {
		case <-done:
			t.Fatalf("the demo exited:\n%s", tail(out.String(), 60))
		default:
		}
		return strings.Contains(out.String(), "Try:")
	})
	for _, line := range tryLines(t, filepath.Join(root, "examples", "cluster", "try.sh")) {
		if !strings.Contains(out.String(), line) {
			t.Errorf("the demo does not print %q", line)
		}
		start := time.Now()
		err := runTryLine(root, line)
		for err != nil && time.Since(start) < 2*time.Minute {
			// kubectl top answers once metrics-server has scraped the node twice.
			time.Sleep(2 * time.Second)
			err = runTryLine(root, line)
		}
		if err != nil {
			t.Errorf("%s: %v", line, err)
			continue
		}
		t.Logf("%s: ok after %v", line, time.Since(start).Round(time.Second))
	}
}

func tryLines(t *testing.T, path string) []string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		t.Fatalf("%s lists nothing", path)
	}
	return lines
}

// runTryLine runs one line with bash, in its own process group (killed after, for the
// port-forward left in the background), and checks its output where it is the greeting.
func runTryLine(root, line string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", line)
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	b, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		return fmt.Errorf("%v: %s", err, tail(string(b), 10))
	}
	greets := strings.Contains(line, "logs") || strings.Contains(line, "exec") || strings.Contains(line, "curl")
	if greets && !strings.Contains(string(b), "hello from") {
		return fmt.Errorf("no greeting in %q", tail(string(b), 10))
	}
	if strings.Contains(line, "top ") && !strings.Contains(string(b), "CPU") {
		return fmt.Errorf("no figures in %q", string(b))
	}
	return nil
}

// removeNodeSandboxes removes the static pods the demo's node left in the shared
// containerd (their names end in the node's name).
func removeNodeSandboxes(t *testing.T, node string) {
	ctx := context.Background()
	rs, err := cri.NewRemoteRuntimeService(ctx, endpoint(t), 3*time.Second, time.Minute)
	if err != nil {
		t.Log(err)
		return
	}
	sandboxes, _ := rs.ListPodSandbox(ctx, nil)
	for _, sb := range sandboxes {
		if strings.HasSuffix(sb.Labels[criconfig.PodNameLabel], "-"+node) {
			_ = rs.StopPodSandbox(ctx, sb.Id)
			_ = rs.RemovePodSandbox(ctx, sb.Id)
		}
	}
}
