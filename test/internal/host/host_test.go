package host

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nodelet/nodelet/pkg/binarypages"
)

func TestParseBusyCPU(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	got, err := parseBusyCPU("cpu  100 20 30 5000 70 4 6 10 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := 170 * time.Second / clockTicks; got != want {
		t.Errorf("busy = %v, want %v (idle and iowait left out)", got, want)
	}
	if _, err := parseBusyCPU("intr 1 2 3\n"); err == nil {
		t.Error("a /proc/stat without the cpu line parsed")
	}
}

func TestMachineBusyCPUReadsThisMachine(t *testing.T) {
	before, err := MachineBusyCPU()
	if err != nil {
		t.Fatal(err)
	}
	if before <= 0 {
		t.Fatalf("busy CPU since boot = %v", before)
	}
}

func TestControlPlanePIDsReadsEachFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := ControlPlanePIDs(dir); err == nil {
		t.Fatal("no PID files, no error")
	}
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, c := range ControlPlaneComponents {
		if err := os.WriteFile(filepath.Join(dir, "run", c+".pid"), []byte(strconv.Itoa(100+i)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pids, err := ControlPlanePIDs(dir)
	if err != nil || len(pids) != 4 || pids[0] != 100 || pids[3] != 103 {
		t.Errorf("pids %v, %v; want 100..103", pids, err)
	}
}

// TestPageOutBinaryOfAChild pages out a running child's binary (a copy of this test
// binary, asleep: the kernel leaves alone pages another process maps too, as this one
// maps its own binary's): its file-backed RSS must fall.
func TestPageOutBinaryOfAChild(t *testing.T) {
	if os.Getenv("HOST_TEST_SLEEP") == "1" {
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copied, err := PrivateCopy(self, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(copied, "-test.run=^TestPageOutBinaryOfAChild$")
	cmd.Env = append(os.Environ(), "HOST_TEST_SLEEP=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	var before int64
	for deadline := time.Now().Add(5 * time.Second); before <= 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		before = binarypages.ResidentFileKiB(status)
	}
	if err := PageOutBinary(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	after := binarypages.ResidentFileKiB(status)
	t.Logf("the child's RssFile: %d KiB before, %d KiB after", before, after)
	if before <= 0 || after >= before {
		t.Errorf("RssFile did not fall: %d KiB before, %d KiB after", before, after)
	}
}
