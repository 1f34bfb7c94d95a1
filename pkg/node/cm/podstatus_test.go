package cm

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// podCgroupReading is what PodCgroupCPU and PodCgroupMemoryLimit read, as one string.
func podCgroupReading(t *testing.T, m *ContainerManager, pod *v1.Pod) string {
	t.Helper()
	shares, quota, period, err := m.PodCgroupCPU(pod)
	if err != nil {
		t.Fatal(err)
	}
	memory, err := m.PodCgroupMemoryLimit(pod)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("shares=%d quota=%d period=%d memory=%d", shares, quota, period, memory)
}

func TestPodCgroupReadBackV1(t *testing.T) {
	burstable := testPod("b", res("100m", "32Mi", "200m", "64Mi"))
	bestEffort := testPod("e", res("", "", "", ""))
	m, root := startV1(t, nil)
	for _, pod := range []*v1.Pod{burstable, bestEffort} {
		if err := m.EnsurePod(pod); err != nil {
			t.Fatal(err)
		}
	}
	// The kernel's defaults for what nodelet does not write to a BestEffort pod's cgroup.
	dir := m.Parent(bestEffort)
	writeTestFile(t, filepath.Join(root, "cpu,cpuacct", dir, "cpu.cfs_quota_us"), "-1\n")
	writeTestFile(t, filepath.Join(root, "cpu,cpuacct", dir, "cpu.cfs_period_us"), "100000\n")
	writeTestFile(t, filepath.Join(root, "memory", dir, "memory.limit_in_bytes"), "9223372036854771712\n")

	if got, want := podCgroupReading(t, m, burstable), "shares=102 quota=20000 period=100000 memory=67108864"; got != want {
		t.Errorf("Burstable pod: %s, want %s", got, want)
	}
	// v1's "no limit" stays the value the cgroup holds: the status shows it as upstream's does.
	if got, want := podCgroupReading(t, m, bestEffort), "shares=2 quota=-1 period=100000 memory=9223372036854771712"; got != want {
		t.Errorf("BestEffort pod: %s, want %s", got, want)
	}
}

func TestPodCgroupReadBackV2(t *testing.T) {
	burstable := testPod("b", res("100m", "32Mi", "200m", "64Mi"))
	bestEffort := testPod("e", res("", "", "", ""))
	m, root := startV2(t, nil)
	for _, pod := range []*v1.Pod{burstable, bestEffort} {
		if err := m.EnsurePod(pod); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(root, m.Parent(bestEffort))
	writeTestFile(t, filepath.Join(dir, "cpu.max"), "max 100000\n")
	writeTestFile(t, filepath.Join(dir, "memory.max"), "max\n")

	// 102 shares were written as weight 4, which upstream reads back as 80 shares.
	if got := read(t, root, m.Parent(burstable), "cpu.weight"); got != "4" {
		t.Fatalf("cpu.weight = %s, want 4", got)
	}
	if got, want := podCgroupReading(t, m, burstable), "shares=80 quota=20000 period=100000 memory=67108864"; got != want {
		t.Errorf("Burstable pod: %s, want %s", got, want)
	}
	if got, want := podCgroupReading(t, m, bestEffort), "shares=2 quota=-1 period=100000 memory=-1"; got != want {
		t.Errorf("BestEffort pod: %s, want %s", got, want)
	}
}

func TestPodCgroupReadBackErrors(t *testing.T) {
	m, _ := startV1(t, nil)
	missing := testPod("m", res("100m", "", "", ""))
	if _, _, _, err := m.PodCgroupCPU(missing); err == nil || errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("PodCgroupCPU without a cgroup: %v, want a read error", err)
	}
	if _, err := m.PodCgroupMemoryLimit(missing); err == nil || errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("PodCgroupMemoryLimit without a cgroup: %v, want a read error", err)
	}
	unmanaged := NewPodCgroups("/", false)
	if _, _, _, err := unmanaged.PodCgroupCPU(missing); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("PodCgroupCPU without cgroups per QoS: %v, want ErrUnsupported", err)
	}
	if _, err := unmanaged.PodCgroupMemoryLimit(missing); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("PodCgroupMemoryLimit without cgroups per QoS: %v, want ErrUnsupported", err)
	}
}

func TestCPUWeightToSharesFloor(t *testing.T) {
	for _, tc := range []struct{ weight, shares uint64 }{
		{1, 2}, {4, 80}, {39, 998}, {10000, 262144}, {0, 2}, {20000, 262144},
	} {
		if got := cpuWeightToSharesFloor(tc.weight); got != tc.shares {
			t.Errorf("cpuWeightToSharesFloor(%d) = %d, want %d", tc.weight, got, tc.shares)
		}
	}
}
