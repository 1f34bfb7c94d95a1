package eviction

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMemoryCgroupMount(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "mountinfo")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1 := write(`25 1 0:23 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
30 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:11 - cgroup cgroup rw,cpu,cpuacct
36 25 0:31 / /sys/fs/cgroup/memory rw,relatime shared:14 - cgroup cgroup rw,memory
`)
	if got, err := memoryCgroupMount(v1); err != nil || got != "/sys/fs/cgroup/memory" {
		t.Errorf("cgroup v1: %q, %v; want /sys/fs/cgroup/memory", got, err)
	}
	v2 := write("35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n")
	if got, err := memoryCgroupMount(v2); err != nil || got != "" {
		t.Errorf("cgroup v2: %q, %v; want none", got, err)
	}
}

// TestEventfdNotifierOnRealCgroup arms a threshold 4Mi above a fresh
// cgroup's usage and has a process in it write 16Mi to a file: the page
// cache it fills is charged to the cgroup and the kernel must notify.
func TestEventfdNotifierOnRealCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a memory cgroup")
	}
	mount, err := memoryCgroupMount("/proc/self/mountinfo")
	if err != nil || mount == "" {
		t.Skipf("no cgroup v1 memory controller (%v)", err)
	}
	cgroup := fmt.Sprintf("nodelet-eviction-test-%d", os.Getpid())
	dir := filepath.Join(mount, cgroup)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("removing the test cgroup: %v", err)
		}
	})
	usage := readCgroupUint(t, filepath.Join(dir, memoryUsageAttribute))

	n, err := kernelNotifiers{}.NewCgroupNotifier("/"+cgroup, memoryUsageAttribute, int64(usage+4*Mi))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() { n.Start(ctx, events); close(done) }()

	// The writer waits for a line on stdin, once it is in the cgroup.
	cmd := exec.Command("sh", "-c", `read go; dd if=/dev/zero of="$1" bs=1M count=16 2>/dev/null; read done`, "sh", filepath.Join(t.TempDir(), "fill"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-events:
		t.Fatal("notified before the threshold was crossed")
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-events:
	case <-time.After(10 * time.Second):
		t.Fatalf("no notification; usage now %d, armed at %d", readCgroupUint(t, filepath.Join(dir, memoryUsageAttribute)), usage+4*Mi)
	}
	n.Stop()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not return after Stop")
	}
}

func readCgroupUint(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
