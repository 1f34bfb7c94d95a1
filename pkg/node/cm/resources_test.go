package cm

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestCPUUnits(t *testing.T) {
	for _, tc := range []struct {
		milli  int64
		shares uint64
	}{{0, 2}, {1, 2}, {5, 5}, {100, 102}, {250, 256}, {1000, 1024}, {500000, 262144}} {
		if got := MilliCPUToShares(tc.milli); got != tc.shares {
			t.Errorf("MilliCPUToShares(%d) = %d, want %d", tc.milli, got, tc.shares)
		}
	}
	for _, tc := range []struct{ milli, period, quota int64 }{
		{0, 100000, 0}, {1, 100000, MinQuotaPeriod}, {10, 100000, 1000}, {500, 100000, 50000}, {500, 50000, 25000}, {2500, 100000, 250000},
	} {
		if got := MilliCPUToQuota(tc.milli, tc.period); got != tc.quota {
			t.Errorf("MilliCPUToQuota(%d, %d) = %d, want %d", tc.milli, tc.period, got, tc.quota)
		}
	}
	// Upstream's conversion: [2, 262144] onto [1, 10000].
	for _, tc := range []struct{ shares, weight uint64 }{{2, 1}, {512, 20}, {1024, 39}, {3072, 118}, {262144, 10000}, {300000, 10000}} {
		if got := CPUSharesToWeight(tc.shares); got != tc.weight {
			t.Errorf("CPUSharesToWeight(%d) = %d, want %d", tc.shares, got, tc.weight)
		}
	}
	for w := uint64(1); w <= maxWeight; w++ {
		if got := CPUSharesToWeight(cpuWeightToShares(w)); got != w {
			t.Fatalf("weight %d reads back as shares %d, which write weight %d", w, cpuWeightToShares(w), got)
		}
	}
}

func TestHugePageUnits(t *testing.T) {
	for size, want := range map[int64]string{2 << 20: "2MB", 1 << 30: "1GB", 64 << 10: "64KB", 32 << 20: "32MB"} {
		if got := hugePageUnit(size); got != want {
			t.Errorf("hugePageUnit(%d) = %q, want %q", size, got, want)
		}
	}
	got := HugePageLimits(list("hugepages-2Mi", "4Mi", "hugepages-1Gi", "1Gi", "cpu", "1"))
	if len(got) != 2 || got[2<<20] != 4<<20 || got[1<<30] != 1<<30 {
		t.Errorf("HugePageLimits = %v", got)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestResourceConfigForPod(t *testing.T) {
	hp := v1.ResourceRequirements{
		Requests: list("cpu", "1", "memory", "1Gi", "hugepages-2Mi", "8Mi"),
		Limits:   list("cpu", "1", "memory", "1Gi", "hugepages-2Mi", "8Mi"),
	}
	// RuntimeClass overhead (spec.overhead, filled by the API server's admission) is added
	// to the pod's requests and, when every container is limited, to its limits.
	overhead := testPod("o", res("500m", "128Mi", "500m", "128Mi"))
	overhead.Spec.Overhead = list("cpu", "250m", "memory", "64Mi")
	podLevel := testPod("pl", res("100m", "", "", ""))
	podLevel.Spec.Resources = &v1.ResourceRequirements{Requests: list("cpu", "1", "memory", "256Mi"), Limits: list("cpu", "2", "memory", "512Mi")}

	for _, tc := range []struct {
		name    string
		pod     *v1.Pod
		enforce bool
		period  uint64
		// shares, quota, period, memory; nil where not set
		want [4]any
		huge map[int64]int64
	}{
		{"guaranteed", testPod("g", res("500m", "128Mi", "500m", "128Mi")), true, 100000,
			[4]any{uint64(512), int64(50000), uint64(100000), int64(128 << 20)}, map[int64]int64{}},
		{"guaranteed, custom period", testPod("g", res("500m", "128Mi", "500m", "128Mi")), true, 50000,
			[4]any{uint64(512), int64(25000), uint64(50000), int64(128 << 20)}, map[int64]int64{}},
		{"guaranteed, quota off", testPod("g", res("500m", "128Mi", "500m", "128Mi")), false, 100000,
			[4]any{uint64(512), int64(-1), uint64(100000), int64(128 << 20)}, map[int64]int64{}},
		{"guaranteed with huge pages", testPod("h", hp), true, 100000,
			[4]any{uint64(1024), int64(100000), uint64(100000), int64(1 << 30)}, map[int64]int64{2 << 20: 8 << 20}},
		{"burstable, every limit", testPod("b", res("100m", "64Mi", "300m", "128Mi"), res("100m", "64Mi", "100m", "128Mi")), true, 100000,
			[4]any{uint64(204), int64(40000), uint64(100000), int64(256 << 20)}, map[int64]int64{}},
		{"burstable, a container without limits", testPod("b", res("100m", "64Mi", "200m", "128Mi"), res("150m", "", "", "")), true, 100000,
			[4]any{uint64(256), nil, nil, nil}, map[int64]int64{}},
		{"burstable, memory limits only", testPod("b", res("100m", "", "", "128Mi")), true, 100000,
			[4]any{uint64(102), nil, nil, int64(128 << 20)}, map[int64]int64{}},
		{"besteffort", testPod("be", v1.ResourceRequirements{}), true, 100000,
			[4]any{uint64(2), nil, nil, nil}, map[int64]int64{}},
		{"guaranteed with RuntimeClass overhead", overhead, true, 100000,
			[4]any{uint64(768), int64(75000), uint64(100000), int64(192 << 20)}, map[int64]int64{}},
		{"pod-level resources", podLevel, true, 100000,
			[4]any{uint64(1024), int64(200000), uint64(100000), int64(512 << 20)}, map[int64]int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ResourceConfigForPod(tc.pod, tc.enforce, tc.period)
			got := [4]any{deref(c.CPUShares), deref(c.CPUQuota), deref(c.CPUPeriod), deref(c.Memory)}
			if got != tc.want {
				t.Errorf("shares, quota, period, memory = %v, want %v", got, tc.want)
			}
			if len(c.HugePageLimit) != len(tc.huge) {
				t.Errorf("huge pages = %v, want %v", c.HugePageLimit, tc.huge)
			}
			for k, v := range tc.huge {
				if c.HugePageLimit[k] != v {
					t.Errorf("huge pages = %v, want %v", c.HugePageLimit, tc.huge)
				}
			}
		})
	}
}

func TestInitContainersCount(t *testing.T) {
	// The pod's request is the larger of the init containers' and the sum of the
	// app containers'; a limitless init container keeps a Burstable pod unlimited.
	p := testPod("i", res("100m", "64Mi", "200m", "128Mi"))
	p.Spec.InitContainers = []v1.Container{{Name: "init", Resources: res("800m", "", "", "")}}
	c := ResourceConfigForPod(p, true, 100000)
	if *c.CPUShares != 819 || c.CPUQuota != nil || c.Memory != nil {
		t.Errorf("shares %d, quota %v, memory %v; want 819 and no limits", *c.CPUShares, deref(c.CPUQuota), deref(c.Memory))
	}
}

func TestPodMemoryHigh(t *testing.T) {
	p := testPod("pl", res("", "", "", ""))
	p.Spec.Resources = &v1.ResourceRequirements{Requests: list("memory", "100Mi"), Limits: list("memory", "200Mi")}
	// 100Mi + 0.9 × 100Mi, rounded down to 4KiB pages.
	if got := podMemoryHigh(p, 0.9); got != "199229440" {
		t.Errorf("memory.high = %q, want 199229440", got)
	}
	p.Spec.Resources.Requests = list("memory", "200Mi")
	if got := podMemoryHigh(p, 0.9); got != "" {
		t.Errorf("memory.high with request == limit = %q, want none", got)
	}
	if got := podMemoryHigh(testPod("c", res("", "100Mi", "", "200Mi")), 0.9); got != "" {
		t.Errorf("memory.high without pod-level resources = %q, want none", got)
	}
}

func TestNodeAllocatableConfig(t *testing.T) {
	capacity := list("cpu", "4", "memory", "8Gi", "pid", "4096", "hugepages-2Mi", "1Gi")
	alloc := subtractReserved(capacity, list("cpu", "500m", "memory", "1Gi", "pid", "96"), list("cpu", "500m", "memory", "1Gi"), nil)
	c := configFromList(alloc, false)
	if *c.CPUShares != 3072 || *c.Memory != 6<<30 || *c.PidsLimit != 4000 || c.HugePageLimit[2<<20] != 1<<30 {
		t.Errorf("node allocatable config: shares %d memory %d pids %d huge %v", *c.CPUShares, *c.Memory, *c.PidsLimit, c.HugePageLimit)
	}
	over := subtractReserved(list("memory", "1Gi"), list("memory", "2Gi"))
	if m := over[v1.ResourceMemory]; m.Value() != 0 {
		t.Errorf("over-reserved memory = %v, want 0", m.String())
	}
	c = configFromList(list("cpu", "1", "memory", "1Gi"), true)
	if *c.CPUShares != 1024 || c.Memory != nil || c.PidsLimit != nil || c.HugePageLimit != nil {
		t.Errorf("compressible config sets more than CPU: %+v", c)
	}
}
