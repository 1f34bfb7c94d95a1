package cm

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func v2Options(root, hugePages string) Options {
	o := v1Options(root, hugePages)
	o.CgroupRoot = "/"
	o.FailCgroupV1 = true
	return o
}

func startV2(t *testing.T, opts func(*Options), pods ...*v1.Pod) (*ContainerManager, string) {
	t.Helper()
	root, huge := fakeV2(t)
	o := v2Options(root, huge)
	if opts != nil {
		opts(&o)
	}
	m, err := NewContainerManager(o)
	if err != nil {
		t.Fatal(err)
	}
	if !m.CgroupV2() {
		t.Fatal("a root with cgroup.controllers is cgroup v2")
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := m.Start(ctx, func() []*v1.Pod { return pods }); err != nil {
		t.Fatal(err)
	}
	return m, root
}

func TestV2TopLevelCgroups(t *testing.T) {
	m, root := startV2(t, nil, testPod("b", res("250m", "64Mi", "", "")))
	kubepods := filepath.Join(root, "kubepods")
	// Each ancestor enables the controllers it offers for its children.
	if got := read(t, root, cgroupSubtree); got != "+cpuset\n+cpu\n+io\n+memory\n+hugetlb\n+pids\n+rdma\n+misc" {
		t.Errorf("root subtree_control = %q", got)
	}
	expectFiles(t, kubepods, map[string]string{
		"cpu.weight": "118", "memory.max": "6442450944", "pids.max": "4000",
		"hugetlb.2MB.max": "1073741824", "hugetlb.1GB.max": "0",
		// Without memory QoS, protection from an earlier setting is reset.
		"memory.min": "0", "memory.low": "0",
	})
	expectFiles(t, filepath.Join(kubepods, "burstable"), map[string]string{
		"cpu.weight": "10", "hugetlb.2MB.max": "4611686018427387904", "memory.low": "0",
	})
	expectFiles(t, filepath.Join(kubepods, "besteffort"), map[string]string{"cpu.weight": "1", "hugetlb.1GB.max": "4611686018427387904"})
	if got := m.PodCgroupRoot(); got != "/kubepods" {
		t.Errorf("PodCgroupRoot = %q", got)
	}
}

func TestV2PodCgroups(t *testing.T) {
	guaranteed := testPod("g", res("500m", "128Mi", "500m", "128Mi"))
	burstable := testPod("b", res("100m", "", "", "256Mi"))
	bestEffort := testPod("be", v1.ResourceRequirements{})
	m, root := startV2(t, nil)
	for _, p := range []*v1.Pod{guaranteed, burstable, bestEffort} {
		if err := m.EnsurePod(p); err != nil {
			t.Fatal(err)
		}
	}
	expectFiles(t, filepath.Join(root, m.Parent(guaranteed)), map[string]string{
		"cpu.weight": "20", "cpu.max": "50000 100000", "memory.max": "134217728", "pids.max": "100",
		"hugetlb.2MB.max": "0", "hugetlb.1GB.max": "0",
	})
	expectFiles(t, filepath.Join(root, m.Parent(burstable)), map[string]string{
		"cpu.weight": "4", "cpu.max": "<missing>", "memory.max": "268435456",
	})
	expectFiles(t, filepath.Join(root, m.Parent(bestEffort)), map[string]string{
		"cpu.weight": "1", "cpu.max": "<missing>", "memory.max": "<missing>",
	})
	// A pod cgroup exists once the kernel shows the required controllers in it.
	dir := filepath.Join(root, m.Parent(guaranteed))
	if m.PodExists(guaranteed) {
		t.Error("pod cgroup without cgroup.controllers exists")
	}
	writeTestFile(t, filepath.Join(dir, cgroupControllers), "cpu memory pids")
	if m.PodExists(guaranteed) {
		t.Error("pod cgroup without cpuset and hugetlb exists")
	}
	writeTestFile(t, filepath.Join(dir, cgroupControllers), "cpuset cpu io memory hugetlb pids")
	if !m.PodExists(guaranteed) {
		t.Error("pod cgroup with every controller does not exist")
	}
	if got := m.Pods(); len(got) != 3 {
		t.Errorf("Pods() = %v", got)
	}
	if err := m.Remove("g"); err != nil {
		t.Fatal(err)
	}
	if got := m.Pods(); len(got) != 2 || got["g"] {
		t.Errorf("Pods() after Remove = %v", got)
	}
}

func TestV2MemoryQoS(t *testing.T) {
	guaranteed := testPod("g", res("1", "1Gi", "1", "1Gi"))
	burstable := testPod("b", res("100m", "256Mi", "", ""))
	podLevel := testPod("pl", res("100m", "", "", ""))
	podLevel.Spec.Resources = &v1.ResourceRequirements{Requests: list("memory", "100Mi"), Limits: list("memory", "200Mi")}
	pods := []*v1.Pod{guaranteed, burstable, podLevel}

	m, root := startV2(t, func(o *Options) { o.MemoryQoS = true; o.MemoryReservationPolicy = TieredReservation }, pods...)
	// kubepods protects every request, burstable its own (256Mi + 100Mi).
	expectFiles(t, filepath.Join(root, "kubepods"), map[string]string{"memory.min": "1447034880", "memory.low": "373293056"})
	expectFiles(t, filepath.Join(root, "kubepods", "burstable"), map[string]string{"memory.low": "373293056"})
	for _, p := range pods {
		if err := m.EnsurePod(p); err != nil {
			t.Fatal(err)
		}
	}
	expectFiles(t, filepath.Join(root, m.Parent(guaranteed)), map[string]string{"memory.min": "1073741824", "memory.low": "<missing>", "memory.high": "<missing>"})
	expectFiles(t, filepath.Join(root, m.Parent(burstable)), map[string]string{"memory.low": "268435456", "memory.min": "<missing>"})
	expectFiles(t, filepath.Join(root, m.Parent(podLevel)), map[string]string{"memory.low": "104857600", "memory.high": "199229440"})

	// Memory QoS with the default policy: no protection, but memory.high stays.
	m, root = startV2(t, func(o *Options) { o.MemoryQoS = true }, pods...)
	expectFiles(t, filepath.Join(root, "kubepods"), map[string]string{"memory.min": "0", "memory.low": "0"})
	if err := m.EnsurePod(podLevel); err != nil {
		t.Fatal(err)
	}
	expectFiles(t, filepath.Join(root, m.Parent(podLevel)), map[string]string{"memory.low": "<missing>", "memory.high": "199229440"})
}

func TestV2Systemd(t *testing.T) {
	p := testPod("a-b", res("100m", "", "", ""))
	m, root := startV2(t, func(o *Options) { o.CgroupDriver = DriverSystemd }, p)
	expectFiles(t, filepath.Join(root, "kubepods.slice", "kubepods-burstable.slice"), map[string]string{"cpu.weight": "4"})
	if err := m.EnsurePod(p); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "kubepods.slice", "kubepods-burstable.slice", "kubepods-burstable-poda_b.slice")
	expectFiles(t, dir, map[string]string{"cpu.weight": "4"})
	if got := m.Pods(); len(got) != 1 || !got["a-b"] {
		t.Errorf("Pods() = %v", got)
	}
	if got := m.PodCgroupRoot(); got != "/kubepods.slice" {
		t.Errorf("PodCgroupRoot = %q", got)
	}
}

func TestV2MissingControllers(t *testing.T) {
	root, huge := fakeV2(t)
	o := v2Options(root, huge)
	o.CgroupRoot = "/node1"
	writeTestFile(t, filepath.Join(root, "node1", cgroupControllers), "cpu memory")
	_, err := NewContainerManager(o)
	if err == nil || !strings.Contains(err.Error(), `cgroup ["node1"] has some missing controllers: cpuset, hugetlb, pids`) {
		t.Errorf("cgroupRoot without controllers: %v", err)
	}
}
