package stats

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func newTestProvider(t testing.TB, rt *fakeRuntime, proc, cgroups string, clock *fakeClock, edits ...func(*Options)) *Provider {
	t.Helper()
	root := t.TempDir()
	if rt.imageFs == nil {
		rt.imageFs = &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{
			Timestamp: clock.now().UnixNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: root},
			UsedBytes: u64(1 << 30), InodesUsed: u64(5000),
		}}}
	}
	opts := Options{
		NodeName: "node-a", RootDir: root, PodLogsDir: filepath.Join(root, "logs"),
		PodCgroupRoot: "/kubepods", ProcRoot: proc, CgroupRoot: cgroups,
	}
	for _, edit := range edits {
		edit(&opts)
	}
	p := NewProvider(rt, rt, nil, opts)
	p.now = clock.now
	return p
}

func want[T comparable](t *testing.T, what string, got *T, w T) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: missing, want %v", what, w)
		return
	}
	if *got != w {
		t.Errorf("%s = %v, want %v", what, *got, w)
	}
}

func sysContainer(t *testing.T, n statsapi.NodeStats, name string) statsapi.ContainerStats {
	t.Helper()
	for _, c := range n.SystemContainers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no system container %q in %+v", name, n.SystemContainers)
	return statsapi.ContainerStats{}
}

func TestNodeStatsCgroupV1(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1800000000, 0)}
	proc := procFixture(t, "5:memory:/system.slice/kubelet.service\n3:cpu,cpuacct:/system.slice/kubelet.service\n1:name=systemd:/x\n")
	p := newTestProvider(t, &fakeRuntime{}, proc, cgroupV1Fixture(t), clock)
	s, err := p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := s.Node
	if n.NodeName != "node-a" || !n.StartTime.Equal(ptrTo(metaTime(time.Unix(1700000000, 0)))) {
		t.Errorf("name %q, start time %v: want node-a, btime", n.NodeName, n.StartTime)
	}
	want(t, "cpu usageCoreNanoSeconds", n.CPU.UsageCoreNanoSeconds, 50_000_000_000)
	if n.CPU.UsageNanoCores != nil {
		t.Errorf("usageNanoCores = %d on the first sample, want none", *n.CPU.UsageNanoCores)
	}
	if n.CPU.PSI == nil || n.CPU.PSI.Some.Avg10 != 1.5 || n.CPU.PSI.Some.Total != 123456 {
		t.Errorf("cpu psi = %+v", n.CPU.PSI)
	}
	// Root cgroup: 3 GiB used, 512 MiB of it inactive file pages.
	want(t, "memory usage", n.Memory.UsageBytes, 3<<30)
	want(t, "memory working set", n.Memory.WorkingSetBytes, 3<<30-512<<20)
	want(t, "memory rss", n.Memory.RSSBytes, 1<<30)
	want(t, "page faults", n.Memory.PageFaults, 5000)
	want(t, "major page faults", n.Memory.MajorPageFaults, 50)
	// 4 GiB of memory less the working set less 64 MiB of huge pages.
	want(t, "memory available", n.Memory.AvailableBytes, 4<<30-(3<<30-512<<20)-64<<20)
	want(t, "swap usage", n.Swap.SwapUsageBytes, 256<<20)
	want(t, "swap available", n.Swap.SwapAvailableBytes, 768<<20)
	want(t, "rlimit maxpid", n.Rlimit.MaxPID, 95000)
	want(t, "rlimit curproc", n.Rlimit.NumOfRunningProcesses, 1234)
	if n.IO == nil || n.IO.PSI.Full.Total != 500 {
		t.Errorf("io = %+v, want the /proc/pressure/io figures", n.IO)
	}

	if n.Network == nil || n.Network.Name != "eth0" || *n.Network.RxBytes != 5000 || *n.Network.TxErrors != 3 {
		t.Fatalf("network = %+v, want eth0 at the top level", n.Network)
	}
	var names []string
	for _, i := range n.Network.Interfaces {
		names = append(names, i.Name)
	}
	if len(names) != 2 || names[0] != "eth0" || names[1] != "cni0" {
		t.Errorf("interfaces %v, want [eth0 cni0] (lo and veths left out)", names)
	}

	if n.Fs == nil || n.Fs.CapacityBytes == nil || *n.Fs.CapacityBytes == 0 || n.Fs.InodesUsed == nil {
		t.Errorf("fs = %+v, want the root dir's filesystem", n.Fs)
	}
	img := n.Runtime.ImageFs
	want(t, "imagefs used", img.UsedBytes, 1<<30)
	want(t, "imagefs inodes used", img.InodesUsed, 5000)
	if img.CapacityBytes == nil || *img.CapacityBytes != *n.Fs.CapacityBytes || n.Runtime.ContainerFs != img {
		t.Errorf("imagefs %+v: want the size of its mount point's filesystem, and containerFs the same", img)
	}

	kubelet := sysContainer(t, n, statsapi.SystemContainerKubelet)
	want(t, "kubelet cpu", kubelet.CPU.UsageCoreNanoSeconds, 3_000_000_000)
	want(t, "kubelet working set", kubelet.Memory.WorkingSetBytes, 100<<20-10<<20)
	if kubelet.Memory.AvailableBytes != nil || kubelet.Swap != nil || kubelet.Rootfs != nil {
		t.Errorf("kubelet: unlimited cgroup without swap accounting: available %v swap %v", kubelet.Memory.AvailableBytes, kubelet.Swap)
	}
	if !kubelet.StartTime.Time.Equal(p.created) {
		t.Errorf("kubelet start %v, want the provider's creation", kubelet.StartTime)
	}
	pods := sysContainer(t, n, statsapi.SystemContainerPods)
	want(t, "pods cpu", pods.CPU.UsageCoreNanoSeconds, 20_000_000_000)
	want(t, "pods working set", pods.Memory.WorkingSetBytes, 1<<30-256<<20)
	want(t, "pods available", pods.Memory.AvailableBytes, 2<<30-(1<<30-256<<20))
	want(t, "pods swap", pods.Swap.SwapUsageBytes, 0)
	if pods.StartTime.IsZero() {
		t.Error("pods start time: want the cgroup directory's")
	}
	// cgroup v1 has no pressure files: zeros, present, as upstream's cAdvisor path
	// reports them.
	zero := statsapi.PSIStats{}
	if pods.CPU.PSI == nil || *pods.CPU.PSI != zero || pods.Memory.PSI == nil || *pods.Memory.PSI != zero ||
		pods.IO == nil || pods.IO.PSI == nil || *pods.IO.PSI != zero {
		t.Errorf("pods psi: cpu %+v memory %+v io %+v, want zeros", pods.CPU.PSI, pods.Memory.PSI, pods.IO)
	}
	if len(n.SystemContainers) != 2 {
		t.Errorf("system containers %d, want kubelet and pods only (runtime, misc unset)", len(n.SystemContainers))
	}
}

func TestNodeStatsCgroupV2(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1800000000, 0)}
	proc := procFixture(t, "0::/system.slice/nodelet.service\n")
	p := newTestProvider(t, &fakeRuntime{}, proc, cgroupV2Fixture(t), clock)
	s, err := p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := s.Node
	want(t, "cpu", n.CPU.UsageCoreNanoSeconds, 60_000_000_000)
	// The v2 root has no memory.current: /proc/meminfo and /proc/vmstat.
	want(t, "memory usage", n.Memory.UsageBytes, 3<<30)
	want(t, "memory working set", n.Memory.WorkingSetBytes, 3<<30-512<<20)
	want(t, "memory rss", n.Memory.RSSBytes, 768<<20)
	want(t, "page faults", n.Memory.PageFaults, 123456)
	want(t, "major page faults", n.Memory.MajorPageFaults, 789)

	kubelet := sysContainer(t, n, statsapi.SystemContainerKubelet)
	want(t, "kubelet cpu", kubelet.CPU.UsageCoreNanoSeconds, 4_000_000_000)
	want(t, "kubelet rss", kubelet.Memory.RSSBytes, 40<<20)
	want(t, "kubelet available", kubelet.Memory.AvailableBytes, 1<<30-(50<<20-1<<20))
	pods := sysContainer(t, n, statsapi.SystemContainerPods)
	want(t, "pods cpu", pods.CPU.UsageCoreNanoSeconds, 25_000_000_000)
	want(t, "pods working set", pods.Memory.WorkingSetBytes, 1<<30-256<<20)
	if pods.Memory.AvailableBytes != nil {
		t.Errorf("pods available %d, want none (memory.max is max)", *pods.Memory.AvailableBytes)
	}
	want(t, "pods swap", pods.Swap.SwapUsageBytes, 4096)
	if pods.CPU.PSI == nil || pods.CPU.PSI.Some.Avg10 != 5 || pods.CPU.PSI.Full.Total != 111 {
		t.Errorf("pods cpu psi = %+v", pods.CPU.PSI)
	}
	if pods.IO == nil || pods.IO.PSI.Some.Total != 7 {
		t.Errorf("pods io = %+v", pods.IO)
	}
}

// The node's usageNanoCores needs two samples at least a second apart.
func TestNodeUsageNanoCores(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1800000000, 0)}
	cg := cgroupV1Fixture(t)
	p := newTestProvider(t, &fakeRuntime{}, procFixture(t, ""), cg, clock)
	cpuAfter := func(d time.Duration, usage string) *statsapi.CPUStats {
		t.Helper()
		clock.step(d)
		writeTree(t, cg, map[string]string{"cpuacct/cpuacct.usage": usage})
		s, err := p.GetCPUAndMemoryStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return s.Node.CPU
	}
	if c := cpuAfter(0, "50000000000"); c.UsageNanoCores != nil {
		t.Fatalf("first sample: usageNanoCores %d, want none", *c.UsageNanoCores)
	}
	// 3 core-seconds in 2 seconds: 1.5 cores.
	want(t, "after 2s", cpuAfter(2*time.Second, "53000000000").UsageNanoCores, 1_500_000_000)
	// Half a second later: too close, the last rate stands.
	want(t, "after 0.5s more", cpuAfter(500*time.Millisecond, "53900000000").UsageNanoCores, 1_500_000_000)
	// 1.5 s after the last stored sample: 0.9+0.6 core-seconds in 1.5 s = 1 core.
	want(t, "after 1.5s", cpuAfter(time.Second, "54500000000").UsageNanoCores, 1_000_000_000)
}

// Without a CPU figure in the root cgroup the node's CPU is /proc/stat's
// non-idle time: (user+nice+system+irq+softirq+steal) ticks of 10ms.
func TestNodeCPUFromProcStat(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1800000000, 0)}
	cg := cgroupV1Fixture(t)
	if err := os.Remove(filepath.Join(cg, "cpuacct", "cpuacct.usage")); err != nil {
		t.Fatal(err)
	}
	p := newTestProvider(t, &fakeRuntime{}, procFixture(t, ""), cg, clock)
	s, err := p.GetCPUAndMemoryStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want(t, "cpu", s.Node.CPU.UsageCoreNanoSeconds, (1000+50+250+20+30+10)*10_000_000)
}

func TestSelfCgroup(t *testing.T) {
	for _, tc := range []struct {
		content string
		v2      bool
		want    string
	}{
		{"0::/system.slice/nodelet.service\n", true, "/system.slice/nodelet.service"},
		{"12:memory:/a\n4:cpu,cpuacct:/a\n0::/\n", false, "/a"},
		// cpu and memory in different cgroups: not a usable container.
		{"12:memory:/process_api/x\n4:cpu,cpuacct:/\n", false, ""},
	} {
		proc := t.TempDir()
		writeTree(t, proc, map[string]string{"self/cgroup": tc.content})
		if got := selfCgroup(proc, tc.v2); got != tc.want {
			t.Errorf("selfCgroup(%q, v2=%v) = %q, want %q", tc.content, tc.v2, got, tc.want)
		}
	}
}

// GetNode, the eviction manager's summary, has what eviction observes and leaves out
// the pods and the node's network.
func TestGetNodeHasWhatEvictionObserves(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1800000000, 0)}
	proc := procFixture(t, "5:memory:/system.slice/kubelet.service\n3:cpu,cpuacct:/system.slice/kubelet.service\n1:name=systemd:/x\n")
	rt := &fakeRuntime{}
	p := newTestProvider(t, rt, proc, cgroupV1Fixture(t), clock)
	s, err := p.GetNode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := s.Node
	want(t, "memory working set", n.Memory.WorkingSetBytes, 3<<30-512<<20)
	want(t, "rlimit maxpid", n.Rlimit.MaxPID, 95000)
	if n.Fs == nil || n.Runtime == nil || n.Runtime.ImageFs == nil {
		t.Errorf("filesystems missing: fs %+v, runtime %+v", n.Fs, n.Runtime)
	}
	if n.Network != nil || len(s.Pods) != 0 || rt.count("ListContainerStats") != 0 {
		t.Errorf("network %+v, %d pods, %d ListContainerStats: want none", n.Network, len(s.Pods), rt.count("ListContainerStats"))
	}
}
