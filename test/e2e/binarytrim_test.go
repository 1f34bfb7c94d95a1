//go:build e2e

package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/nodelet/nodelet/pkg/binarypages"
	"github.com/nodelet/nodelet/test/internal/host"
)

// privateBinary copies nodelet's binary for one test: the kernel leaves alone the pages
// another process maps as well, so a trim is measured on a file no other nodelet runs.
func privateBinary(t *testing.T) string {
	t.Helper()
	bin, err := host.PrivateCopy(nodeletBin(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

var trimmedLine = regexp.MustCompile(`"Trimmed the binary's resident pages" rssFileKiBBefore=(\d+) rssFileKiBAfter=(\d+)`)

// TestBinaryTrimKeepsNodeletWorking: after NODELET_BINARY_TRIM, nodelet has handed back
// its binary's resident pages, and goes on running the pods it had and new ones.
func TestBinaryTrimKeepsNodeletWorking(t *testing.T) {
	t.Setenv("NODELET_BIN", privateBinary(t))
	t.Setenv("NODELET_BINARY_TRIM", "3s")
	s := startStandalone(t)
	s.writeManifest(t, "before.yaml", busyboxPod("before", "Always", "sleep 3600"))
	waitFor(t, 20*time.Second, "the pod written before the trim running", func() bool { return len(s.containers(t, "before", false)) == 1 })
	if err := s.waitLog(30*time.Second, "Trimmed the binary's resident pages"); err != nil {
		t.Fatal(err)
	}
	m := trimmedLine.FindStringSubmatch(s.out.String())
	if m == nil {
		t.Fatalf("the trim's log line has no figures:\n%s", s.out.String())
	}
	before, _ := strconv.ParseInt(m[1], 10, 64)
	after, _ := strconv.ParseInt(m[2], 10, 64)
	if after >= before/2 {
		t.Errorf("RssFile %d KiB before the trim, %d KiB after: want less than half", before, after)
	}

	s.writeManifest(t, "after.yaml", busyboxPod("after", "Always", "sleep 3600"))
	waitFor(t, 20*time.Second, "a pod written after the trim running", func() bool { return len(s.containers(t, "after", false)) == 1 })
	s.exec(t, "after", "true")
	if code := s.healthz(); code != 200 {
		t.Errorf("healthz after the trim: %d", code)
	}
	if n := len(s.containers(t, "before", false)); n != 1 {
		t.Errorf("the pod written before the trim has %d running containers", n)
	}
	settled := binarypages.ResidentFileKiB(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	t.Logf("RssFile: %d KiB before the trim, %d KiB just after, %d KiB after a new pod and an exec", before, after, settled)
	if settled >= before {
		t.Errorf("RssFile back to %d KiB (%d before the trim)", settled, before)
	}
}

// TestBinaryTrimBadValueIsRefused: a NODELET_BINARY_TRIM that is neither "off" nor a
// duration stops start-up with an error naming it.
func TestBinaryTrimBadValueIsRefused(t *testing.T) {
	t.Setenv("NODELET_BINARY_TRIM", "soon")
	n := startNodelet(t)
	code, err := n.waitExit(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if err := n.waitLog(time.Second, `NODELET_BINARY_TRIM="soon": want "off" or a duration`); err != nil {
		t.Error(err)
	}
}
