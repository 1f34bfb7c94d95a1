package cm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

func v1Options(root, hugePages string) Options {
	return Options{
		CgroupRoot: "/node1", CgroupsPerQOS: true, EnforceNodeAllocatable: []string{EnforcePods},
		Capacity:       list("cpu", "4", "memory", "8Gi", "pid", "4096", "hugepages-2Mi", "1Gi"),
		KubeReserved:   list("cpu", "500m", "memory", "1Gi"),
		SystemReserved: list("cpu", "500m", "memory", "1Gi", "pid", "96"),
		PodPidsLimit:   100, CPUCFSQuota: true, CPUCFSQuotaPeriod: 100 * time.Millisecond,
		CgroupFS: root, hugePagesDir: hugePages,
	}
}

// startV1 builds a manager on a fake v1 tree with cgroupRoot /node1 created.
func startV1(t *testing.T, opts func(*Options), pods ...*v1.Pod) (*ContainerManager, string) {
	t.Helper()
	root, huge := fakeV1(t)
	o := v1Options(root, huge)
	if opts != nil {
		opts(&o)
	}
	fs, err := openCgroupFS(root, huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.create("/node1"); err != nil {
		t.Fatal(err)
	}
	m, err := NewContainerManager(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := m.Start(ctx, func() []*v1.Pod { return pods }); err != nil {
		t.Fatal(err)
	}
	return m, root
}

func TestV1Detection(t *testing.T) {
	root, huge := fakeV1(t)
	fs, err := openCgroupFS(root, huge)
	if err != nil {
		t.Fatal(err)
	}
	if fs.unified {
		t.Fatal("a tree of hierarchies is cgroup v1")
	}
	if fs.controllers["cpu"] != fs.controllers["cpuacct"] || filepath.Base(fs.controllers["cpu"]) != "cpu,cpuacct" {
		t.Errorf("cpu and cpuacct share a hierarchy: %v", fs.controllers)
	}
	if len(fs.hierarchies) != 7 {
		t.Errorf("hierarchies = %v, want the 7 distinct directories", fs.hierarchies)
	}
	if len(fs.hugePageSizes) != 2 || fs.hugePageSizes[0] != 2<<20 || fs.hugePageSizes[1] != 1<<30 {
		t.Errorf("huge page sizes = %v", fs.hugePageSizes)
	}
	o := v1Options(root, huge)
	o.FailCgroupV1 = true
	if _, err := NewContainerManager(o); err == nil || !strings.Contains(err.Error(), "not run on a host using cgroup v1") {
		t.Errorf("failCgroupV1 on v1: %v", err)
	}
}

func TestV1MissingCgroupRoot(t *testing.T) {
	root, huge := fakeV1(t)
	_, err := NewContainerManager(v1Options(root, huge))
	if err == nil || !strings.Contains(err.Error(), `invalid configuration: cgroup ["node1"] has some missing paths: `) {
		t.Fatalf("missing cgroupRoot: %v", err)
	}
}

func TestV1TopLevelCgroups(t *testing.T) {
	burstable1 := testPod("b1", res("100m", "64Mi", "", ""), res("150m", "", "", ""))
	burstable2 := testPod("b2", res("100m", "", "200m", ""))
	guaranteed := testPod("g", res("1", "1Gi", "1", "1Gi"))
	pods := []*v1.Pod{burstable1, burstable2, guaranteed}
	m, root := startV1(t, nil, pods...)

	kubepods := "node1/kubepods"
	expectFiles(t, filepath.Join(root, "cpu,cpuacct", kubepods), map[string]string{"cpu.shares": "3072"}) // 4 - 1 CPUs
	expectFiles(t, filepath.Join(root, "memory", kubepods), map[string]string{"memory.limit_in_bytes": "6442450944"})
	expectFiles(t, filepath.Join(root, "pids", kubepods), map[string]string{"pids.max": "4000"})
	expectFiles(t, filepath.Join(root, "hugetlb", kubepods), map[string]string{
		"hugetlb.2MB.limit_in_bytes": "1073741824", "hugetlb.1GB.limit_in_bytes": "0",
	})
	// New cpusets get their parent's CPUs and memory nodes.
	expectFiles(t, filepath.Join(root, "cpuset", kubepods, "burstable"), map[string]string{"cpuset.cpus": "0-3", "cpuset.mems": "0"})
	for _, h := range []string{"cpu,cpuacct", "cpuset", "memory", "pids", "hugetlb", "systemd", "unified"} {
		for _, d := range []string{"burstable", "besteffort"} {
			if _, err := os.Stat(filepath.Join(root, h, kubepods, d)); err != nil {
				t.Errorf("QoS cgroup missing in %s: %v", h, err)
			}
		}
	}
	// burstable: 100m + 150m + 100m requested.
	expectFiles(t, filepath.Join(root, "cpu,cpuacct", kubepods, "burstable"), map[string]string{"cpu.shares": "358"})
	expectFiles(t, filepath.Join(root, "cpu,cpuacct", kubepods, "besteffort"), map[string]string{"cpu.shares": "2"})
	for _, d := range []string{"burstable", "besteffort"} {
		expectFiles(t, filepath.Join(root, "hugetlb", kubepods, d), map[string]string{
			"hugetlb.2MB.limit_in_bytes": "4611686018427387904", "hugetlb.1GB.limit_in_bytes": "4611686018427387904",
		})
	}

	// A burstable pod stops: its requests leave the QoS cgroup.
	m.mu.Lock()
	m.activePods = func() []*v1.Pod { return []*v1.Pod{burstable2, guaranteed} }
	m.mu.Unlock()
	if err := m.UpdateQOSCgroups(); err != nil {
		t.Fatal(err)
	}
	expectFiles(t, filepath.Join(root, "cpu,cpuacct", kubepods, "burstable"), map[string]string{"cpu.shares": "102"})
}

func TestV1NodeAllocatableNotEnforced(t *testing.T) {
	_, root := startV1(t, func(o *Options) { o.EnforceNodeAllocatable = nil })
	// Without "pods", kubepods still gets the capacity's shares, memory and PIDs.
	expectFiles(t, filepath.Join(root, "cpu,cpuacct", "node1/kubepods"), map[string]string{"cpu.shares": "4096"})
	expectFiles(t, filepath.Join(root, "memory", "node1/kubepods"), map[string]string{"memory.limit_in_bytes": "8589934592"})
	expectFiles(t, filepath.Join(root, "pids", "node1/kubepods"), map[string]string{"pids.max": "4096"})
}

func TestV1PodCgroups(t *testing.T) {
	guaranteed := testPod("g-1", res("500m", "128Mi", "500m", "128Mi"))
	burstable := testPod("b-1", res("100m", "64Mi", "200m", "128Mi"), res("150m", "", "", ""))
	limited := testPod("b-2", res("100m", "64Mi", "300m", "128Mi"))
	bestEffort := testPod("be-1", v1.ResourceRequirements{})
	m, root := startV1(t, nil)
	for _, p := range []*v1.Pod{guaranteed, burstable, limited, bestEffort} {
		if m.PodExists(p) {
			t.Errorf("pod %s exists before EnsurePod", p.UID)
		}
		if err := m.EnsurePod(p); err != nil {
			t.Fatal(err)
		}
		if !m.PodExists(p) {
			t.Errorf("pod %s does not exist after EnsurePod", p.UID)
		}
	}
	cpu, mem, pids := filepath.Join(root, "cpu,cpuacct"), filepath.Join(root, "memory"), filepath.Join(root, "pids")
	g := m.Parent(guaranteed)
	if g != "/node1/kubepods/podg-1" {
		t.Fatalf("guaranteed parent %q", g)
	}
	expectFiles(t, filepath.Join(cpu, g), map[string]string{"cpu.shares": "512", "cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"})
	expectFiles(t, filepath.Join(mem, g), map[string]string{"memory.limit_in_bytes": "134217728"})
	expectFiles(t, filepath.Join(pids, g), map[string]string{"pids.max": "100"})
	expectFiles(t, filepath.Join(root, "hugetlb", g), map[string]string{"hugetlb.2MB.limit_in_bytes": "0", "hugetlb.1GB.limit_in_bytes": "0"})

	b := m.Parent(burstable)
	expectFiles(t, filepath.Join(cpu, b), map[string]string{"cpu.shares": "256", "cpu.cfs_quota_us": "<missing>", "cpu.cfs_period_us": "<missing>"})
	expectFiles(t, filepath.Join(mem, b), map[string]string{"memory.limit_in_bytes": "<missing>"})
	l := m.Parent(limited)
	expectFiles(t, filepath.Join(cpu, l), map[string]string{"cpu.shares": "102", "cpu.cfs_quota_us": "30000"})
	expectFiles(t, filepath.Join(mem, l), map[string]string{"memory.limit_in_bytes": "134217728"})

	be := m.Parent(bestEffort)
	if be != "/node1/kubepods/besteffort/podbe-1" {
		t.Fatalf("besteffort parent %q", be)
	}
	expectFiles(t, filepath.Join(cpu, be), map[string]string{"cpu.shares": "2", "cpu.cfs_quota_us": "<missing>"})

	// An existing pod cgroup is left alone: resizes change it.
	writeTestFile(t, filepath.Join(cpu, g, "cpu.shares"), "999")
	if err := m.EnsurePod(guaranteed); err != nil {
		t.Fatal(err)
	}
	expectFiles(t, filepath.Join(cpu, g), map[string]string{"cpu.shares": "999"})

	got := m.Pods()
	if len(got) != 4 || !got["g-1"] || !got["b-1"] || !got["b-2"] || !got["be-1"] {
		t.Errorf("Pods() = %v", got)
	}
	if err := m.Remove("b-1"); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"cpu,cpuacct", "cpuset", "memory", "pids", "hugetlb", "systemd", "unified"} {
		if _, err := os.Stat(filepath.Join(root, h, b)); !os.IsNotExist(err) {
			t.Errorf("%s: pod cgroup still there after Remove: %v", h, err)
		}
	}
	if got := m.Pods(); len(got) != 3 || got["b-1"] {
		t.Errorf("Pods() after Remove = %v", got)
	}
	if err := m.Remove("never-there"); err != nil {
		t.Errorf("removing a missing pod cgroup: %v", err)
	}
}

func TestV1QuotaOffAndPeriod(t *testing.T) {
	p := testPod("g", res("500m", "128Mi", "500m", "128Mi"))
	m, root := startV1(t, func(o *Options) { o.CPUCFSQuota = false; o.CPUCFSQuotaPeriod = 50 * time.Millisecond })
	if err := m.EnsurePod(p); err != nil {
		t.Fatal(err)
	}
	expectFiles(t, filepath.Join(root, "cpu,cpuacct", m.Parent(p)), map[string]string{"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "50000"})
}

func TestV1ReservedCgroups(t *testing.T) {
	root, huge := fakeV1(t)
	o := v1Options(root, huge)
	o.EnforceNodeAllocatable = []string{EnforcePods, EnforceKubeReserved, EnforceSystemReservedCompressible}
	o.KubeReservedCgroup, o.SystemReservedCgroup = "/kube.slice", "/system.slice"
	rec := record.NewFakeRecorder(10)
	o.Recorder, o.NodeName = rec, "node1"
	fs, _ := openCgroupFS(root, huge)
	for _, c := range []string{"/node1", "/system.slice"} {
		if err := fs.create(c); err != nil {
			t.Fatal(err)
		}
	}
	m, err := NewContainerManager(o)
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start(context.Background(), nil)
	if err == nil || !strings.HasPrefix(err.Error(), `Failed to enforce Kube Reserved Cgroup Limits on "/kube.slice": cgroup ["kube.slice"] has some missing paths`) {
		t.Fatalf("kube-reserved on a missing cgroup: %v", err)
	}
	if err := fs.create("/kube.slice"); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	expectFiles(t, filepath.Join(root, "cpu,cpuacct", "kube.slice"), map[string]string{"cpu.shares": "512"})
	expectFiles(t, filepath.Join(root, "memory", "kube.slice"), map[string]string{"memory.limit_in_bytes": "1073741824"})
	// Compressible: CPU only.
	expectFiles(t, filepath.Join(root, "cpu,cpuacct", "system.slice"), map[string]string{"cpu.shares": "512"})
	expectFiles(t, filepath.Join(root, "memory", "system.slice"), map[string]string{"memory.limit_in_bytes": "<missing>"})
	expectFiles(t, filepath.Join(root, "pids", "system.slice"), map[string]string{"pids.max": "<missing>"})

	var events []string
	for len(rec.Events) > 0 {
		events = append(events, <-rec.Events)
	}
	want := []string{
		"Normal NodeAllocatableEnforced Updated Node Allocatable limit across pods",
		`Warning FailedNodeAllocatableEnforcement Failed to enforce Kube Reserved Cgroup Limits on "/kube.slice"`,
		"Normal NodeAllocatableEnforced Updated Node Allocatable limit across pods",
		"Normal NodeAllocatableEnforced Updated limits on kube reserved cgroup /kube.slice",
		"Normal NodeAllocatableEnforced Updated limits on system reserved cgroup /system.slice",
	}
	if len(events) != len(want) {
		t.Fatalf("events %q, want %q", events, want)
	}
	for i := range want {
		if !strings.HasPrefix(events[i], want[i]) {
			t.Errorf("event %d = %q, want %q…", i, events[i], want[i])
		}
	}
}

// A host without the pids hierarchy: pods get their other limits, and no PID limit.
func TestV1PodCgroupWithoutPidsHierarchy(t *testing.T) {
	root, huge := fakeV1(t)
	if err := os.RemoveAll(filepath.Join(root, "pids")); err != nil {
		t.Fatal(err)
	}
	fs, _ := openCgroupFS(root, huge)
	if err := fs.create("/node1"); err != nil {
		t.Fatal(err)
	}
	o := v1Options(root, huge)
	m, err := NewContainerManager(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	p := testPod(string(types.UID("x")), res("1", "1Gi", "1", "1Gi"))
	if err := m.EnsurePod(p); err != nil || !m.PodExists(p) {
		t.Fatalf("EnsurePod without a pids hierarchy: %v", err)
	}
	expectFiles(t, filepath.Join(root, "memory", m.Parent(p)), map[string]string{"memory.limit_in_bytes": "1073741824"})
}
