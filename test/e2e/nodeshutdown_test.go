//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// TestClusterGracefulNodeShutdown plays systemd-logind on a private system bus
// (dbus-daemon and test/tools/fakelogind, the way upstream's node tests fake it) for a
// cluster node with shutdownGracePeriod 20s and shutdownGracePeriodCriticalPods 8s. The
// node takes a delay inhibitor lock; when logind announces the shutdown, new pods are
// refused, the node turns NotReady ("node is shutting down"), the regular pod is stopped
// first and ends Failed/Terminated with upstream's message and a DisruptionTarget
// condition, the critical pod after it, and the lock is released within the grace period.
func TestClusterGracefulNodeShutdown(t *testing.T) {
	logind := startFakeLogind(t)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", logind.address)
	c := startClusterNode(t, clusterOptions{config: "shutdownGracePeriod: 20s\nshutdownGracePeriodCriticalPods: 8s\n"})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	logind.waitLine(t, 20*time.Second, "inhibit taken")

	// Each pod takes two seconds to stop on SIGTERM and then exits as a process killed by
	// it would (143), as the pods of upstream's node shutdown tests do.
	stopping := "trap 'sleep 2; exit 143' TERM; while true; do sleep 0.2; done"
	regular := c.testPod("regular", "sh", "-c", stopping)
	critical := c.testPod("critical", "sh", "-c", stopping)
	critical.Namespace = "kube-system"
	critical.Name = "critical-" + c.name
	critical.Spec.PriorityClassName = "system-node-critical"
	for _, p := range []*v1.Pod{regular, critical} {
		p.Spec.TerminationGracePeriodSeconds = ptrInt64(30)
	}
	c.createPod(t, regular)
	if _, err := c.admin.CoreV1().Pods("kube-system").Create(context.Background(), critical, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.admin.CoreV1().Pods("kube-system").Delete(context.Background(), critical.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrInt64(0)})
	})
	eventually(t, 60*time.Second, "both pods Ready", func() error {
		if err := c.podReady("regular"); err != nil {
			return err
		}
		p, err := c.admin.CoreV1().Pods("kube-system").Get(context.Background(), critical.Name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != v1.PodRunning {
			return fmt.Errorf("critical pod: %v %v", err, p.Status.Phase)
		}
		return nil
	})

	signalled := time.Now()
	logind.send(t, "shutdown")
	eventually(t, 10*time.Second, "node NotReady: shutting down", func() error {
		n, err := c.node(t)
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == v1.NodeReady && cond.Status == v1.ConditionFalse && strings.Contains(cond.Message, "node is shutting down") {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", n.Status.Conditions)
	})
	eventually(t, 20*time.Second, "regular pod Failed/Terminated", func() error {
		p, err := c.getPod("regular")
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Terminated" ||
			p.Status.Message != "Pod was terminated in response to imminent node shutdown." {
			return fmt.Errorf("phase %s reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == v1.DisruptionTarget && cond.Status == v1.ConditionTrue && cond.Reason == "TerminationByKubelet" {
				return nil
			}
		}
		return fmt.Errorf("no DisruptionTarget condition in %v", p.Status.Conditions)
	})
	released := logind.waitLine(t, 25*time.Second, "inhibit released")
	if took := time.Since(signalled); took > 21*time.Second {
		t.Errorf("the inhibitor lock was released %v after the shutdown signal, after the 20s grace period", took)
	}
	t.Logf("lock released %v after the signal (%s)", time.Since(signalled).Round(100*time.Millisecond), released)

	// The regular pod's container ended before the critical pod's got SIGTERM: its two
	// seconds of stopping come after the regular one's end.
	regularEnd := containerFinished(t, c, regular.Name)
	criticalEnd := containerFinished(t, c, critical.Name)
	if !criticalEnd.After(regularEnd.Add(time.Second)) {
		t.Errorf("critical pod's container ended at %v, regular's at %v: want the critical group after the regular one", criticalEnd, regularEnd)
	}

	late := c.testPod("late", "sleep", "3600")
	c.createPod(t, late)
	eventually(t, 20*time.Second, "a new pod refused", func() error {
		p, err := c.getPod("late")
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodFailed || p.Status.Reason != "NodeShutdown" {
			return fmt.Errorf("phase %s reason %q", p.Status.Phase, p.Status.Reason)
		}
		return nil
	})
}

// containerFinished is when the pod's (only) container exited, from the runtime.
func containerFinished(t *testing.T, c *clusterNode, pod string) time.Time {
	t.Helper()
	ctx := context.Background()
	list, err := c.rs.ListContainers(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ctr := range list {
		if ctr.Labels[criconfig.PodNameLabel] != pod {
			continue
		}
		st, err := c.rs.ContainerStatus(ctx, ctr.Id, false)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Fatalf("%s's container is %v", pod, st.GetStatus().GetState())
		}
		return time.Unix(0, st.GetStatus().GetFinishedAt())
	}
	t.Fatalf("no container of %s", pod)
	return time.Time{}
}

// fakeLogind is a private dbus-daemon with test/tools/fakelogind owning
// org.freedesktop.login1 on it.
type fakeLogind struct {
	address string
	stdin   io.Writer
	mu      sync.Mutex
	lines   []string
}

func startFakeLogind(t *testing.T) *fakeLogind {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "fakelogind")
	build := exec.Command("go", "build", "-o", bin, "./test/tools/fakelogind")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building fakelogind: %v\n%s", err, out)
	}
	config := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(config, fmt.Appendf(nil, privateBusConfig, filepath.Join(dir, "bus")), 0o644); err != nil {
		t.Fatal(err)
	}
	bus := exec.Command("dbus-daemon", "--config-file="+config, "--nofork", "--print-address")
	out, err := bus.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Start(); err != nil {
		t.Fatalf("dbus-daemon (Debian's dbus package): %v", err)
	}
	t.Cleanup(func() { _ = bus.Process.Kill(); _ = bus.Wait() })
	address, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	l := &fakeLogind{address: strings.TrimSpace(address)}
	// A longer InhibitDelayMaxUSec than the node's grace period: nodelet has no reason to
	// write logind's drop-in on this host.
	cmd := exec.Command(bin, "-address", l.address, "-inhibit-delay-max", "60s", "-config-dir", filepath.Join(dir, "logind.conf.d"))
	if l.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			l.mu.Lock()
			l.lines = append(l.lines, sc.Text())
			l.mu.Unlock()
		}
	}()
	l.waitLine(t, 10*time.Second, "ready")
	return l
}

// waitLine waits until fakelogind has printed a line starting with prefix.
func (l *fakeLogind) waitLine(t *testing.T, d time.Duration, prefix string) string {
	t.Helper()
	var found string
	eventually(t, d, "fakelogind: "+prefix, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, line := range l.lines {
			if strings.HasPrefix(line, prefix) {
				found = line
				return nil
			}
		}
		return fmt.Errorf("lines so far: %q", l.lines)
	})
	return found
}

func (l *fakeLogind) send(t *testing.T, command string) {
	if _, err := fmt.Fprintln(l.stdin, command); err != nil {
		t.Fatal(err)
	}
}

const privateBusConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
  </policy>
</busconfig>
`
