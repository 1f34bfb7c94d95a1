//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// upstreamToolBin is a command built from k8s.io/kubernetes v1.37.2 with the control
// plane (hack/controlplane.sh build): upstream's kubelet and its own test plugins.
func upstreamToolBin(t *testing.T, name string) string {
	t.Helper()
	cache := os.Getenv("NODELET_CACHE_DIR")
	if cache == "" {
		cache = "/var/cache/nodelet"
	}
	bin := filepath.Join(cache, "k8s-v1.37.2", "bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("upstream's %s: %v (hack/controlplane.sh build builds it)", name, err)
	}
	return bin
}

// toolProcess is one of upstream's test plugins running for a test.
type toolProcess struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

// startUpstreamTool runs an upstream test command with extra environment; the test's
// end stops it (SIGTERM, so that it removes its sockets) unless it was killed before.
func startUpstreamTool(t *testing.T, name string, env []string, args ...string) *toolProcess {
	t.Helper()
	return startTool(t, name, upstreamToolBin(t, name), env, args...)
}

// startTool runs bin as startUpstreamTool does.
func startTool(t *testing.T, name, bin string, env []string, args ...string) *toolProcess {
	t.Helper()
	p := &toolProcess{t: t, name: name, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("%s's output:\n%s", name, p.out.String())
		}
	})
	return p
}

// stop signals the process and waits for it (killing it after 10 s).
func (p *toolProcess) stop(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// klogLine matches a klog header: severity, month and day, time of day.
var klogLine = regexp.MustCompile(`^[IWEF](\d{4}) (\d{2}:\d{2}:\d{2}\.\d{6})`)

// loggedAt waits up to d for a line containing sub in the process's output and returns
// the time its klog header gives (the tools log in UTC on these machines, as the test does).
func (p *toolProcess) loggedAt(d time.Duration, sub string) time.Time {
	p.t.Helper()
	var at time.Time
	eventually(p.t, d, p.name+" logs "+sub, func() error {
		for _, line := range strings.Split(p.out.String(), "\n") {
			if !strings.Contains(line, sub) {
				continue
			}
			m := klogLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			ts, err := time.ParseInLocation("0102 15:04:05.000000", m[1]+" "+m[2], time.Local)
			if err != nil {
				return err
			}
			now := time.Now()
			at = ts.AddDate(now.Year(), 0, 0)
			return nil
		}
		return fmt.Errorf("no line with %q yet", sub)
	})
	return at
}
