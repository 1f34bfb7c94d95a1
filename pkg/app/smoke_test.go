package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/config"
)

const (
	smokeNode      = "smoke-node"
	smokePod       = "smoke"
	smokeNamespace = "kube-system"
	smokeImage     = "busybox:smoke"
	// smokeLegacyLogsDir is where nodelet links container logs whatever podLogsDir says.
	smokeLegacyLogsDir = "/var/log/containers"
)

// TestStartupSmoke starts nodelet, as cmd/nodelet does, against an in-process fake CRI
// runtime with one static pod, and checks that the pod's sandbox and container are
// started, that healthz answers, and that stopping nodelet leaves the pod running.
func TestStartupSmoke(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("nodelet creates host directories such as /var/log/containers: needs root")
	}
	smokeCleanupLegacyLogs(t)
	cri := startFakeCRI(t)
	dir := t.TempDir()
	healthzPort := smokeFreePort(t)

	manifests := filepath.Join(dir, "manifests")
	smokeWriteManifest(t, manifests)
	configFile := filepath.Join(dir, "kubelet.yaml")
	smokeWrite(t, configFile, fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %s
staticPodPath: %s
podLogsDir: %s
failSwapOn: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
healthzPort: %d
healthzBindAddress: 127.0.0.1
enableServer: false
`, cri.Endpoint, manifests, filepath.Join(dir, "logs"), healthzPort))

	cl := config.NewCommandLine("nodelet")
	if err := cl.Parse([]string{"--config=" + configFile, "--root-dir=" + filepath.Join(dir, "root"), "--hostname-override=" + smokeNode}); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	opts, err := cl.Options()
	if err != nil {
		t.Fatalf("Options: %v", err)
	}
	for _, w := range cl.Warnings() {
		t.Logf("config warning: %s", w)
	}

	// nodelet runs as a systemd Type=notify unit with WatchdogSec=2s would run it.
	notified := smokeNotifySocket(t)
	t.Setenv("WATCHDOG_USEC", "2000000")
	ctx, cancel := context.WithCancel(context.Background())
	var runErr error
	done := make(chan struct{}) // closed when Run has returned runErr
	start := time.Now()
	go func() { runErr = Run(ctx, opts); close(done) }()
	t.Cleanup(func() { // on an early failure too: stop nodelet before the fake runtime goes
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return within 10s of cancellation")
		}
	})

	// (a) The static pod's sandbox runs and its container is created and started.
	rt := cri.Runtime
	var sandboxID, containerID string
	smokeWaitFor(t, done, &runErr, 30*time.Second, "static pod sandbox and running container", func() string {
		rt.Lock()
		defer rt.Unlock()
		sandboxID, containerID = "", ""
		for id, sb := range rt.Sandboxes {
			if sb.Metadata.GetName() == smokePod+"-"+smokeNode && sb.Metadata.GetNamespace() == smokeNamespace {
				sandboxID = id
			}
		}
		if sandboxID == "" {
			return fmt.Sprintf("no sandbox %s/%s-%s; calls so far: %s", smokeNamespace, smokePod, smokeNode, smokeCalls(rt.Called))
		}
		if s := rt.Sandboxes[sandboxID].State; s != runtimeapi.PodSandboxState_SANDBOX_READY {
			return fmt.Sprintf("sandbox %s is %s", sandboxID, s)
		}
		for id, c := range rt.Containers {
			if c.SandboxID == sandboxID && c.Metadata.GetName() == "sleeper" && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				if c.Image.GetImage() != smokeImage {
					return fmt.Sprintf("container %s has image %q, want %q", id, c.Image.GetImage(), smokeImage)
				}
				containerID = id
				return ""
			}
		}
		return fmt.Sprintf("no running container in sandbox %s; calls so far: %s", sandboxID, smokeCalls(rt.Called))
	})
	calls := rt.GetCalls()
	for _, want := range []string{"RunPodSandbox", "CreateContainer", "StartContainer"} {
		if !slices.Contains(calls, want) {
			t.Errorf("the runtime never got %s; calls: %s", want, smokeCalls(calls))
		}
	}
	t.Logf("pod running after %v: sandbox %s, container %s", time.Since(start).Round(time.Millisecond), sandboxID, containerID)

	// READY=1 once the loop runs, then WATCHDOG=1 every second while the sync loop is healthy.
	for _, want := range []string{"READY=1", "WATCHDOG=1", "WATCHDOG=1"} {
		select {
		case got := <-notified:
			if got != want {
				t.Errorf("systemd was told %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("systemd was not told %q", want)
		}
	}

	// (b) healthz answers 200 "ok".
	client := &http.Client{Timeout: time.Second}
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", healthzPort)
	smokeWaitFor(t, done, &runErr, 10*time.Second, "GET "+url+` = 200 "ok"`, func() string {
		resp, err := client.Get(url)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != "ok" {
			return fmt.Sprintf("%d %q", resp.StatusCode, body)
		}
		return ""
	})

	// (c) Cancelling stops nodelet cleanly and leaves the pod running.
	cancel()
	select {
	case <-done:
		if runErr != nil {
			t.Fatalf("Run returned %v after cancellation, want nil", runErr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancellation")
	}
	rt.Lock()
	defer rt.Unlock()
	for _, c := range rt.Called {
		switch c {
		case "StopPodSandbox", "RemovePodSandbox", "StopContainer", "RemoveContainer":
			t.Errorf("the runtime got %s; nodelet must leave pods running (calls: %s)", c, smokeCalls(rt.Called))
		}
	}
	if sb, ok := rt.Sandboxes[sandboxID]; !ok || sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("after shutdown sandbox %s is gone or not ready", sandboxID)
	}
	if c, ok := rt.Containers[containerID]; !ok || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("after shutdown container %s is gone or not running", containerID)
	}
}

// smokeWaitFor polls cond every 100ms until it returns "" (met) and fails the test with
// cond's last explanation after timeout, or at once when Run has returned.
func smokeWaitFor(t *testing.T, runDone <-chan struct{}, runErr *error, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		why := cond()
		if why == "" {
			return
		}
		select {
		case <-runDone:
			t.Fatalf("Run returned %v while waiting for %s (%s)", *runErr, what, why)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// smokeCalls condenses the fake's call log: each method once, with its count.
func smokeCalls(calls []string) string {
	counts := map[string]int{}
	var order []string
	for _, c := range calls {
		if counts[c] == 0 {
			order = append(order, c)
		}
		counts[c]++
	}
	parts := make([]string, len(order))
	for i, c := range order {
		parts[i] = fmt.Sprintf("%s×%d", c, counts[c])
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// smokeFreePort finds a TCP port on 127.0.0.1 that is free now.
func smokeFreePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// smokeWriteManifest writes the smoke test's static pod into manifests.
func smokeWriteManifest(t *testing.T, manifests string) {
	t.Helper()
	smokeWrite(t, filepath.Join(manifests, "smoke.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
spec:
  containers:
  - name: sleeper
    image: %s
    command: ["sleep", "3600"]
`, smokePod, smokeNamespace, smokeImage))
}

func smokeWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// smokeCleanupLegacyLogs removes, when the test ends, the /var/log/containers links nodelet
// makes for the smoke pod, and the directory itself when the test created it.
func smokeCleanupLegacyLogs(t *testing.T) {
	t.Helper()
	_, err := os.Stat(smokeLegacyLogsDir)
	existed := err == nil
	t.Cleanup(func() {
		links, _ := filepath.Glob(filepath.Join(smokeLegacyLogsDir, fmt.Sprintf("%s-%s_%s_*.log", smokePod, smokeNode, smokeNamespace)))
		for _, l := range links {
			if fi, err := os.Lstat(l); err == nil && fi.Mode()&os.ModeSymlink != 0 && os.Remove(l) == nil {
				t.Logf("removed %s, which nodelet made", l)
			}
		}
		if !existed {
			_ = os.Remove(smokeLegacyLogsDir) // only if empty
		}
	})
}

// smokeNotifySocket is a service manager's notification socket: what nodelet sends arrives
// on the channel.
func smokeNotifySocket(t *testing.T) <-chan string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	got := make(chan string, 100)
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
		}
	}()
	return got
}
