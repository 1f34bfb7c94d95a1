package oomwatcher

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// fakeKmsg returns one record per Read, as /dev/kmsg does; an entry of
// nil returns EPIPE (records lost).
type fakeKmsg struct {
	records [][]byte
	closed  bool
}

func (f *fakeKmsg) Read(p []byte) (int, error) {
	if len(f.records) == 0 {
		return 0, io.EOF
	}
	r := f.records[0]
	f.records = f.records[1:]
	if r == nil {
		return 0, &os.PathError{Op: "read", Path: kmsgPath, Err: syscall.EPIPE}
	}
	return copy(p, r), nil
}

func (f *fakeKmsg) Close() error {
	f.closed = true
	return nil
}

func TestWatchRecordsSystemOOMsOnly(t *testing.T) {
	lines := []string{
		"4,1,100,-;stress invoked oom-killer: gfp_mask=0x140cca, order=0, oom_score_adj=0",
		"", // lost records
		"6,2,101,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/system.slice/stress.service,task=stress,pid=4321,uid=0",
		"garbage without a header",
		"4,3,200,-;memhog invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=1000",
		"6,4,201,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/kubepods/pod1,task_memcg=/kubepods/pod1/c,task=memhog,pid=5555,uid=0",
		"4,5,300,-;x invoked oom-killer: gfp_mask=0x0, order=0, oom_score_adj=0",
		"3,6,301,-;Out of memory: Killed process 0 (x)",
	}
	f := &fakeKmsg{}
	for _, l := range lines {
		if l == "" {
			f.records = append(f.records, nil)
		} else {
			f.records = append(f.records, []byte(l+"\n"))
		}
	}
	recorder := record.NewFakeRecorder(10)
	nodeRef := &v1.ObjectReference{Kind: "Node", Name: "node-a"}
	ctx := context.Background()
	watch(ctx, f, boot, func(o *OOM) { recordOOM(ctx, recorder, nodeRef, o) })
	if !f.closed {
		t.Error("watch left the kernel log open")
	}
	close(recorder.Events)
	var got []string
	for e := range recorder.Events {
		got = append(got, e)
	}
	want := []string{
		"Warning SystemOOM System OOM encountered, victim process: stress, pid: 4321",
		"Warning SystemOOM System OOM encountered",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

func TestWatchStopsWithContext(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { watch(ctx, r, boot, func(*OOM) {}); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not return when its context ended")
	}
}

// hog keeps what TestHelperAllocate allocates.
var hog [][]byte

// TestHelperAllocate is not a test: TestRealKernelOOM runs the test binary
// as a process that waits for a line on stdin, then allocates until killed.
func TestHelperAllocate(t *testing.T) {
	if os.Getenv("OOMWATCHER_ALLOCATE") != "1" {
		t.Skip("helper process only")
	}
	_, _ = fmt.Scanln()
	for { // until killed
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = 1
		}
		hog = append(hog, b)
	}
}

// TestRealKernelOOM has the kernel OOM-kill a process in a small memory
// cgroup and checks that the watcher, reading the real /dev/kmsg, reports
// that kill with the cgroup as its victim (so not as a system OOM).
func TestRealKernelOOM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to read /dev/kmsg and create a memory cgroup")
	}
	memcg := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(memcg, "memory.limit_in_bytes")); err != nil {
		t.Skip("no cgroup v1 memory controller at " + memcg)
	}
	kmsg, err := os.Open(kmsgPath)
	if err != nil {
		t.Skip(err)
	}
	if _, err := kmsg.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	cgroup := fmt.Sprintf("/nodelet-oomwatcher-test-%d", os.Getpid())
	dir := filepath.Join(memcg, cgroup)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("33554432"), 0o644); err != nil && f == "memory.limit_in_bytes" {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ooms := make(chan *OOM, 10)
	go watch(ctx, kmsg, bootTime(), func(o *OOM) { ooms <- o })

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAllocate$")
	cmd.Env = append(os.Environ(), "OOMWATCHER_ALLOCATE=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		_ = cmd.Process.Kill()
		t.Fatal(err)
	}
	_, _ = stdin.Write([]byte("\n"))
	if err := cmd.Wait(); err == nil {
		t.Fatal("the allocating process was not killed")
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case o := <-ooms:
			if o.Pid != cmd.Process.Pid {
				continue // another OOM on this machine
			}
			if o.System() || o.VictimContainerName != cgroup || o.ContainerName != cgroup || o.ProcessName == "" {
				t.Errorf("OOM %+v, want a kill of pid %d in cgroup %s", o, cmd.Process.Pid, cgroup)
			}
			// The record's time is the boot time (now less the monotonic clock, two reads
			// apart) plus its monotonic stamp: it may come out a little in the future.
			if d := time.Since(o.Time); d < -time.Second || d > time.Minute {
				t.Errorf("OOM time %v is %v away from now", o.Time, d)
			}
			return
		case <-deadline:
			t.Fatalf("no OOM of pid %d read from %s", cmd.Process.Pid, kmsgPath)
		}
	}
}
