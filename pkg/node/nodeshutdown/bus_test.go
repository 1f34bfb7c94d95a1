package nodeshutdown

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodelet/nodelet/pkg/node/nodeshutdown/logind"
)

// fakelogindBinary is test/tools/fakelogind, built once by TestMain.
var fakelogindBinary string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "fakelogind")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	fakelogindBinary = filepath.Join(dir, "fakelogind")
	build := exec.Command("go", "build", "-o", fakelogindBinary, "github.com/nodelet/nodelet/test/tools/fakelogind")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building fakelogind: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// busConfig is a bus that lets anyone own any name and call anything.
const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
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

// startBus runs a private dbus-daemon for the test and returns its address.
func startBus(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	config := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(config, fmt.Appendf(nil, busConfig, filepath.Join(dir, "bus")), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("dbus-daemon", "--config-file="+config, "--nofork", "--print-address")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting dbus-daemon: %v", err)
	}
	t.Cleanup(func() { killAndWait(cmd) })
	address, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the bus address: %v", err)
	}
	return strings.TrimSpace(address)
}

func killAndWait(cmd *exec.Cmd) {
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
}

// fakelogindProcess is a running fakelogind and the lines it printed.
type fakelogindProcess struct {
	t     *testing.T
	stdin io.Writer
	lines chan string
}

// startFakelogind runs fakelogind on the bus and waits until it is ready.
func startFakelogind(t *testing.T, address string, args ...string) *fakelogindProcess {
	t.Helper()
	cmd := exec.Command(fakelogindBinary, append([]string{"-address", address}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killAndWait(cmd) })
	p := &fakelogindProcess{t: t, stdin: stdin, lines: make(chan string, 100)}
	go func() {
		defer close(p.lines)
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			p.lines <- scanner.Text()
		}
	}()
	p.expect("ready")
	return p
}

// expect waits for the next line and checks that it starts with prefix.
func (p *fakelogindProcess) expect(prefix string) string {
	p.t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("fakelogind ended, want %q", prefix)
		}
		if !strings.HasPrefix(line, prefix) {
			p.t.Fatalf("fakelogind printed %q, want %q", line, prefix)
		}
		return line
	case <-time.After(10 * time.Second):
		p.t.Fatalf("fakelogind did not print %q", prefix)
	}
	return ""
}

// expectInAnyOrder waits for one line per prefix, in whatever order they come (fakelogind
// reports a signal it sent while the manager may already be answering it).
func (p *fakelogindProcess) expectInAnyOrder(prefixes ...string) {
	p.t.Helper()
	left := append([]string(nil), prefixes...)
	for len(left) > 0 {
		select {
		case line, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("fakelogind ended, want %q", left)
			}
			i := slices.IndexFunc(left, func(prefix string) bool { return strings.HasPrefix(line, prefix) })
			if i < 0 {
				p.t.Fatalf("fakelogind printed %q, want one of %q", line, left)
			}
			left = slices.Delete(left, i, i+1)
		case <-time.After(10 * time.Second):
			p.t.Fatalf("fakelogind did not print %q", left)
		}
	}
}

// expectNothing checks that fakelogind prints nothing for a while.
func (p *fakelogindProcess) expectNothing(d time.Duration) {
	p.t.Helper()
	select {
	case line := <-p.lines:
		p.t.Fatalf("fakelogind printed %q, want nothing", line)
	case <-time.After(d):
	}
}

func (p *fakelogindProcess) send(command string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, command+"\n"); err != nil {
		p.t.Fatal(err)
	}
}

// connectTo returns a ConnectLogind for the bus at address.
func connectTo(address string) func() (Logind, error) {
	return func() (Logind, error) {
		c, err := logind.Connect(address)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}
