package stats

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// writeTree writes files (path relative to root → content) under root.
func writeTree(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// procFixture is a /proc with 4 GiB of memory (1 GiB free, 512 MiB inactive
// file pages, 64 MiB of huge pages), 1 GiB of swap of which 256 MiB used,
// and an eth0 next to interfaces the node leaves out.
func procFixture(t testing.TB, selfCgroup string) string {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"stat": "cpu  1000 50 250 90000 300 20 30 10 5 0\n" +
			"cpu0 500 25 125 45000 150 10 15 5 0 0\n" +
			"intr 12345\nbtime 1700000000\nprocesses 42\n",
		"meminfo": "MemTotal:        4194304 kB\nMemFree:         1048576 kB\n" +
			"MemAvailable:    2097152 kB\nInactive(file):   524288 kB\nAnonPages:        786432 kB\n" +
			"SwapTotal:       1048576 kB\nSwapFree:         786432 kB\nHugetlb:           65536 kB\n",
		"vmstat":                 "nr_free_pages 262144\npgfault 123456\npgmajfault 789\n",
		"loadavg":                "0.52 0.58 0.59 3/1234 56789\n",
		"sys/kernel/pid_max":     "4194304\n",
		"sys/kernel/threads-max": "95000\n",
		"net/dev": "Inter-|   Receive                                                |  Transmit\n" +
			" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n" +
			"    lo:  100 1 0 0 0 0 0 0 100 1 0 0 0 0 0 0\n" +
			"  eth0: 5000 50 2 0 0 0 0 0 7000 70 3 0 0 0 0 0\n" +
			"vethabc: 10 1 0 0 0 0 0 0 20 2 0 0 0 0 0 0\n" +
			"  cni0: 300 3 0 0 0 0 0 0 400 4 0 0 0 0 0 0\n",
		"pressure/cpu":    "some avg10=1.50 avg60=2.00 avg300=3.25 total=123456\n",
		"pressure/memory": "some avg10=0.00 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=5\n",
		"pressure/io":     "some avg10=0.10 avg60=0.20 avg300=0.30 total=1000\nfull avg10=0.05 avg60=0.10 avg300=0.15 total=500\n",
		"self/cgroup":     selfCgroup,
	})
	return dir
}

// cgroupV1Fixture is a v1 hierarchy: the root and /kubepods (2 GiB limit)
// and /system.slice/kubelet.service (the kubelet's own, no limit).
func cgroupV1Fixture(t testing.TB) string {
	dir := t.TempDir()
	memStat := func(rss, inactive, pgfault, pgmaj string) string {
		return "cache 1\nrss 2\ntotal_cache 1000\ntotal_rss " + rss + "\ntotal_inactive_file " + inactive +
			"\ntotal_pgfault " + pgfault + "\ntotal_pgmajfault " + pgmaj + "\n"
	}
	writeTree(t, dir, map[string]string{
		"cpuacct/cpuacct.usage":                                     "50000000000\n",
		"memory/memory.usage_in_bytes":                              "3221225472\n",
		"memory/memory.limit_in_bytes":                              "9223372036854771712\n",
		"memory/memory.stat":                                        memStat("1073741824", "536870912", "5000", "50"),
		"cpuacct/kubepods/cpuacct.usage":                            "20000000000\n",
		"memory/kubepods/memory.usage_in_bytes":                     "1073741824\n",
		"memory/kubepods/memory.limit_in_bytes":                     "2147483648\n",
		"memory/kubepods/memory.memsw.usage_in_bytes":               "1073741824\n",
		"memory/kubepods/memory.stat":                               memStat("536870912", "268435456", "4000", "40"),
		"cpuacct/system.slice/kubelet.service/cpuacct.usage":        "3000000000\n",
		"memory/system.slice/kubelet.service/memory.usage_in_bytes": "104857600\n",
		"memory/system.slice/kubelet.service/memory.limit_in_bytes": "9223372036854771712\n",
		"memory/system.slice/kubelet.service/memory.stat":           memStat("83886080", "10485760", "300", "3"),
	})
	return dir
}

// cgroupV2Fixture is a unified hierarchy whose root has cpu.stat but no
// memory.current (as on real hosts), /kubepods without a memory limit, and
// the kubelet's cgroup.
func cgroupV2Fixture(t testing.TB) string {
	dir := t.TempDir()
	memStat := func(anon, inactive, pgfault, pgmaj string) string {
		return "anon " + anon + "\nfile 1000\ninactive_file " + inactive + "\npgfault " + pgfault + "\npgmajfault " + pgmaj + "\n"
	}
	writeTree(t, dir, map[string]string{
		"cgroup.controllers":                          "cpuset cpu io memory pids\n",
		"cpu.stat":                                    "usage_usec 60000000\nuser_usec 40000000\nsystem_usec 20000000\n",
		"kubepods/cpu.stat":                           "usage_usec 25000000\n",
		"kubepods/memory.current":                     "1073741824\n",
		"kubepods/memory.max":                         "max\n",
		"kubepods/memory.swap.current":                "4096\n",
		"kubepods/memory.stat":                        memStat("536870912", "268435456", "4000", "40"),
		"kubepods/cpu.pressure":                       "some avg10=5.00 avg60=4.00 avg300=3.00 total=999\nfull avg10=1.00 avg60=1.00 avg300=1.00 total=111\n",
		"kubepods/memory.pressure":                    "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"kubepods/io.pressure":                        "some avg10=0.00 avg60=0.00 avg300=0.00 total=7\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=3\n",
		"system.slice/nodelet.service/cpu.stat":       "usage_usec 4000000\n",
		"system.slice/nodelet.service/memory.current": "52428800\n",
		"system.slice/nodelet.service/memory.max":     "1073741824\n",
		"system.slice/nodelet.service/memory.stat":    memStat("41943040", "1048576", "200", "2"),
	})
	return dir
}

// fakeRuntime is a CRI runtime and image service holding canned answers.
type fakeRuntime struct {
	mu             sync.Mutex
	sandboxes      []*runtimeapi.PodSandbox
	containers     []*runtimeapi.Container
	sandboxStats   []*runtimeapi.PodSandboxStats
	containerStats []*runtimeapi.ContainerStats
	imageFs        *runtimeapi.ImageFsInfoResponse
	noSandboxStats bool  // ListPodSandboxStats answers Unimplemented
	listErr        error // ListContainers fails
	calls          map[string]int
}

func (f *fakeRuntime) called(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[name]++
}

func (f *fakeRuntime) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}

func (f *fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	f.called("ListPodSandbox")
	return f.sandboxes, nil
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	f.called("ListContainers")
	return f.containers, f.listErr
}

func (f *fakeRuntime) ListContainerStats(context.Context, *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	f.called("ListContainerStats")
	return f.containerStats, nil
}

func (f *fakeRuntime) ListPodSandboxStats(context.Context, *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	f.called("ListPodSandboxStats")
	if f.noSandboxStats {
		return nil, status.Error(codes.Unimplemented, "not implemented")
	}
	return f.sandboxStats, nil
}

func (f *fakeRuntime) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	f.called("ImageFsInfo")
	return f.imageFs, nil
}

func u64(v uint64) *runtimeapi.UInt64Value { return &runtimeapi.UInt64Value{Value: v} }

// fakeClock is a settable time source.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
