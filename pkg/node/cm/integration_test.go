package cm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// TestRealCgroups creates the hierarchy and a Guaranteed, a Burstable and a
// BestEffort pod cgroup on this host's cgroup filesystem, under a cgroupRoot of its
// own, reads the kernel's values back and removes everything. It needs root.
func TestRealCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	host, err := openCgroupFS(DefaultCgroupFS, defaultHugePages)
	if err != nil {
		t.Skipf("no cgroup filesystem: %v", err)
	}
	cgroupRoot := fmt.Sprintf("/nodelet-cm-test-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if err := host.create(cgroupRoot); err != nil {
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
			t.Skipf("cannot create cgroups here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := host.destroy(cgroupRoot); err != nil {
			t.Errorf("cleaning up %s: %v", cgroupRoot, err)
		}
	})

	guaranteed := testPod("itest-g", res("500m", "128Mi", "500m", "128Mi"))
	burstable := testPod("itest-b", res("250m", "64Mi", "", "256Mi"))
	bestEffort := testPod("itest-be", v1.ResourceRequirements{})
	pods := []*v1.Pod{guaranteed, burstable, bestEffort}
	m, err := NewContainerManager(Options{
		CgroupRoot: cgroupRoot, CgroupsPerQOS: true, EnforceNodeAllocatable: []string{EnforcePods},
		Capacity:     list("cpu", "2", "memory", "2Gi", "pid", "10000"),
		KubeReserved: list("cpu", "500m", "memory", "512Mi", "pid", "1000"),
		PodPidsLimit: 64, CPUCFSQuota: true, CPUCFSQuotaPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Start(ctx, func() []*v1.Pod { return pods }); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if err := m.EnsurePod(p); err != nil {
			t.Fatal(err)
		}
		if !m.PodExists(p) {
			t.Errorf("pod %s: cgroup does not exist after EnsurePod", p.UID)
		}
	}
	kernel := kernelReader{t: t, fs: host}
	kubepods := cgroupRoot + "/kubepods"
	// 1.5 CPUs, 1.5Gi and 9000 PIDs allocatable.
	kernel.expect(kubepods, 1536, "", 1536<<20, "9000")
	kernel.expect(kubepods+"/burstable", 256, "", -1, "")
	kernel.expect(kubepods+"/besteffort", 2, "", -1, "")
	kernel.expect(m.Parent(guaranteed), 512, "50000", 128<<20, "64")
	kernel.expect(m.Parent(burstable), 256, "max", 256<<20, "64")
	kernel.expect(m.Parent(bestEffort), 2, "max", -1, "64")

	got := m.Pods()
	if len(got) != 3 || !got["itest-g"] || !got["itest-b"] || !got["itest-be"] {
		t.Errorf("Pods() = %v", got)
	}

	// A process left in a pod cgroup is killed when the cgroup is removed.
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	kernel.attach(m.Parent(bestEffort), sleeper.Process.Pid)
	for _, p := range pods {
		if err := m.Remove(p.UID); err != nil {
			t.Errorf("Remove(%s): %v", p.UID, err)
		}
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = sleeper.Process.Kill()
		t.Error("the process in the removed pod cgroup was not killed")
	}
	if got := m.Pods(); len(got) != 0 {
		t.Errorf("Pods() after Remove = %v", got)
	}
}

// kernelReader reads cgroup values as the kernel reports them, on v1 or v2.
type kernelReader struct {
	t  *testing.T
	fs *cgroupFS
}

// expect checks CPU shares (weight on v2), the CFS quota ("" skips; "max" is none),
// the memory limit (-1 is none, skipped) and pids.max ("" skips).
func (k kernelReader) expect(cgroup string, shares uint64, quota string, memory int64, pids string) {
	t := k.t
	t.Helper()
	if k.fs.unified {
		dir := filepath.Join(k.fs.root, cgroup)
		k.check(dir, "cpu.weight", strconv.FormatUint(CPUSharesToWeight(shares), 10))
		if quota != "" {
			k.check(dir, "cpu.max", quota+" 100000")
		}
		if memory >= 0 {
			k.check(dir, "memory.max", strconv.FormatInt(memory, 10))
		}
		if pids != "" {
			k.check(dir, "pids.max", pids)
		}
		return
	}
	k.check(k.fs.dir("cpu", cgroup), "cpu.shares", strconv.FormatUint(shares, 10))
	if quota != "" {
		if quota == "max" {
			quota = "-1"
		}
		k.check(k.fs.dir("cpu", cgroup), "cpu.cfs_quota_us", quota)
		k.check(k.fs.dir("cpu", cgroup), "cpu.cfs_period_us", "100000")
	}
	if memory >= 0 {
		k.check(k.fs.dir("memory", cgroup), "memory.limit_in_bytes", strconv.FormatInt(memory, 10))
	}
	if pids != "" && k.fs.dir("pids", cgroup) != "" {
		k.check(k.fs.dir("pids", cgroup), "pids.max", pids)
	}
}

func (k kernelReader) check(dir, file, want string) {
	k.t.Helper()
	if got := read(k.t, dir, file); got != want {
		k.t.Errorf("%s/%s = %s, want %s", dir, file, got, want)
	}
}

// attach moves a process into the cgroup in every hierarchy that has controllers (on
// v1 the cpuset one too, which takes tasks only once it has CPUs and memory nodes).
func (k kernelReader) attach(cgroup string, pid int) {
	k.t.Helper()
	for _, h := range k.fs.hierarchies {
		if h == k.fs.controllers["unified"] {
			continue // a hybrid host's v2 tree has no controllers; tasks stay put there
		}
		if err := writeFile(filepath.Join(h, cgroup), cgroupProcs, strconv.Itoa(pid)); err != nil {
			k.t.Fatalf("attaching %d to %s: %v", pid, filepath.Join(h, cgroup), err)
		}
	}
}

// BenchmarkPodCgroup measures the cost of a pod start's and a pod end's cgroup work on
// this host: EnsurePod (QoS update and pod cgroup creation) and Remove. It needs root.
func BenchmarkPodCgroup(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	host, err := openCgroupFS(DefaultCgroupFS, defaultHugePages)
	if err != nil {
		b.Skipf("no cgroup filesystem: %v", err)
	}
	cgroupRoot := fmt.Sprintf("/nodelet-cm-bench-%d", os.Getpid())
	if err := host.create(cgroupRoot); err != nil {
		b.Skipf("cannot create cgroups here: %v", err)
	}
	defer func() { _ = host.destroy(cgroupRoot) }()
	var active []*v1.Pod
	for i := range 100 {
		active = append(active, testPod(fmt.Sprint("active-", i), res("100m", "64Mi", "", "")))
	}
	m, err := NewContainerManager(Options{CgroupRoot: cgroupRoot, CgroupsPerQOS: true, CPUCFSQuota: true, PodPidsLimit: 1024,
		EnforceNodeAllocatable: []string{EnforcePods}, Capacity: list("cpu", "2", "memory", "2Gi", "pid", "10000")})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Start(ctx, func() []*v1.Pod { return active }); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		p := testPod(fmt.Sprint("bench-", i), res("250m", "128Mi", "250m", "128Mi"))
		if err := m.EnsurePod(p); err != nil {
			b.Fatal(err)
		}
		if err := m.Remove(p.UID); err != nil {
			b.Fatal(err)
		}
	}
}
