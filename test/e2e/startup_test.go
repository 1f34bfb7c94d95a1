//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStartsLogsRuntimeAndServesHealthz(t *testing.T) {
	n := startNodelet(t)
	if err := n.waitHealthz(2*time.Second, 200); err != nil {
		t.Fatalf("%v after start", err)
	}
	t.Logf("/healthz 200 after %v", time.Since(n.started).Round(time.Millisecond))
	if err := n.waitLog(time.Second, `"Container runtime initialized"`, `containerRuntime="containerd"`, `apiVersion="v1"`); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(n.out.String(), `version="1.`) && !strings.Contains(n.out.String(), `version="v`) {
		t.Errorf("runtime version not logged")
	}
	for _, d := range []string{"pods", "plugins", "plugins_registry", "pod-resources"} {
		if fi, err := os.Stat(filepath.Join(n.rootDir, d)); err != nil || !fi.IsDir() {
			t.Errorf("root-dir/%s not created: %v", d, err)
		}
	}
}

func TestSIGTERMExitsCleanly(t *testing.T) {
	n := startNodelet(t)
	if err := n.waitHealthz(2*time.Second, 200); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n.signal(syscall.SIGTERM)
	code, err := n.waitExit(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	t.Logf("exited 0 %v after SIGTERM", time.Since(start).Round(time.Millisecond))
}

func TestMissingSocketFailsFast(t *testing.T) {
	missing := "unix://" + filepath.Join(t.TempDir(), "nope.sock")
	n := startNodelet(t, "--container-runtime-endpoint="+missing)
	code, err := n.waitExit(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	out := n.out.String()
	if !strings.Contains(out, missing) || !strings.Contains(out, "no such file or directory") {
		t.Fatalf("error does not name the endpoint and the cause:\n%s", out)
	}
	t.Logf("exited 1 after %v", time.Since(n.started).Round(time.Millisecond))
}

func TestBadConfigFailsFast(t *testing.T) {
	cases := map[string]struct{ file, args, want string }{
		"invalid value":  {"syncFrequency: -1s\n", "", `invalid configuration: syncFrequency: must be greater than 0s (got "-1s")`},
		"unknown field":  {"syncFrequncy: 1m\n", "", `strict decoding error: unknown field "syncFrequncy"`},
		"bad flag value": {"", "--max-pods=-3", `maxPods: must not be a negative number (got -3)`},
		"unknown flag":   {"", "--no-such-flag=1", `unknown flag: --no-such-flag`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "config.yaml")
			body := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + c.file
			if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"--config=" + cfg}
			if c.args != "" {
				args = append(args, c.args)
			}
			n := startNodelet(t, args...)
			code, err := n.waitExit(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if code != 1 || !strings.Contains(n.out.String(), c.want) {
				t.Fatalf("exit %d, output:\n%s\nwant exit 1 and %q", code, n.out.String(), c.want)
			}
			if _, err := os.Stat(filepath.Join(n.rootDir, "pods")); err == nil {
				t.Errorf("a rejected configuration still created directories")
			}
		})
	}
}

func TestFlagOverridesConfigFile(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	logs := filepath.Join(t.TempDir(), "from-file")
	body := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: 1\npodLogsDir: " + logs + "\n"
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	// startNodelet passes --healthz-port, which must beat the file's port 1.
	n := startNodelet(t, "--config="+cfg)
	if err := n.waitHealthz(2*time.Second, 200); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(logs); err != nil {
		t.Errorf("podLogsDir from the file not used: %v", err)
	}
}

func TestHealthzFollowsRuntime(t *testing.T) {
	n := startNodelet(t)
	if err := n.waitHealthz(2*time.Second, 200); err != nil {
		t.Fatal(err)
	}
	runtimeScript(t, "stop")
	t.Cleanup(func() { runtimeScript(t, "start") })
	if err := n.waitHealthz(5*time.Second, 500); err != nil {
		t.Fatalf("with containerd stopped: %v", err)
	}
	runtimeScript(t, "start")
	if err := n.waitHealthz(10*time.Second, 200); err != nil {
		t.Fatalf("after containerd returned: %v", err)
	}
	out := n.out.String()
	if c := strings.Count(out, `"Container runtime is not ready"`); c != 1 {
		t.Errorf("outage logged %d times, want once", c)
	}
	if !strings.Contains(out, `"Container runtime is ready"`) {
		t.Errorf("recovery not logged")
	}
}

func TestLockFileContention(t *testing.T) {
	lock := filepath.Join(t.TempDir(), "nodelet.lock")
	first := startNodelet(t, "--lock-file="+lock, "--exit-on-lock-contention")
	if err := first.waitHealthz(2*time.Second, 200); err != nil {
		t.Fatal(err)
	}
	second := startNodelet(t, "--lock-file="+lock, "--exit-on-lock-contention")
	code, err := first.waitExit(5 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("first nodelet did not step aside: code %d, %v", code, err)
	}
	if err := second.waitHealthz(5*time.Second, 200); err != nil {
		t.Fatalf("second nodelet did not take over: %v", err)
	}
}
