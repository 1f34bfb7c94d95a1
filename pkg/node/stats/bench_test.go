package stats

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// benchProvider is a node with n pods of two running containers each, every
// container with a log file, every pod with an emptyDir and an etc-hosts
// file, the runtime answering from memory (so the figures are nodelet's own
// cost, not containerd's).
func benchProvider(b *testing.B, n int) *Provider {
	clock := &fakeClock{t: time.Unix(1800000000, 0)}
	rt := &fakeRuntime{}
	proc, cgroups := procFixture(b, "0::/\n"), cgroupV1Fixture(b)
	p := newTestProvider(b, rt, proc, cgroups, clock)
	now := clock.now().UnixNano()
	files := map[string]string{}
	cgroupFiles := map[string]string{}
	procFiles := map[string]string{}
	var pods []*v1.Pod
	for i := range n {
		uid := fmt.Sprintf("uid-%03d", i)
		name := fmt.Sprintf("pod-%03d", i)
		sbID := "sb-" + uid
		// The pod's cgroup (cgroupfs driver, v1), its sandbox's and its
		// containers' processes, the sandbox's network namespace.
		podCg := "kubepods/besteffort/pod" + uid
		pid := 10000 + 10*i
		cgroupFiles["cpuacct/"+podCg+"/cpuacct.usage"] = "1000000000\n"
		cgroupFiles["memory/"+podCg+"/memory.usage_in_bytes"] = "1048576\n"
		cgroupFiles["memory/"+podCg+"/memory.limit_in_bytes"] = "9223372036854771712\n"
		cgroupFiles["memory/"+podCg+"/memory.memsw.usage_in_bytes"] = "1048576\n"
		cgroupFiles["memory/"+podCg+"/memory.stat"] = v1MemoryStat
		cgroupFiles["memory/"+podCg+"/"+sbID+"/cgroup.procs"] = fmt.Sprintf("%d\n", pid)
		procFiles[fmt.Sprintf("%d/net/dev", pid)] = benchNetDev
		rt.sandboxes = append(rt.sandboxes, &runtimeapi.PodSandbox{Id: sbID, State: runtimeapi.PodSandboxState_SANDBOX_READY,
			Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "bench", Uid: uid}, CreatedAt: now})
		sbStats := &runtimeapi.PodSandboxStats{Attributes: &runtimeapi.PodSandboxAttributes{Id: sbID}, Linux: &runtimeapi.LinuxPodSandboxStats{
			Cpu:    &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: u64(1e9), UsageNanoCores: u64(0)},
			Memory: &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: u64(1 << 20), UsageBytes: u64(1 << 20), RssBytes: u64(1 << 19), AvailableBytes: u64(0), PageFaults: u64(1), MajorPageFaults: u64(0)},
			Network: &runtimeapi.NetworkUsage{DefaultInterface: &runtimeapi.NetworkInterfaceUsage{
				Name: "eth0", RxBytes: u64(1), RxErrors: u64(0), TxBytes: u64(1), TxErrors: u64(0)}},
			Process: &runtimeapi.ProcessUsage{Timestamp: now, ProcessCount: u64(2)},
		}}
		for _, cname := range []string{"app", "sidecar"} {
			id := "c-" + cname + "-" + uid
			rt.containers = append(rt.containers, &runtimeapi.Container{Id: id, PodSandboxId: sbID, CreatedAt: now,
				State: runtimeapi.ContainerState_CONTAINER_RUNNING, Metadata: &runtimeapi.ContainerMetadata{Name: cname}})
			sbStats.Linux.Containers = append(sbStats.Linux.Containers, &runtimeapi.ContainerStats{
				Attributes: &runtimeapi.ContainerAttributes{Id: id, Metadata: &runtimeapi.ContainerMetadata{Name: cname}},
				Cpu:        &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: u64(5e8), UsageNanoCores: u64(0)},
				Memory:     &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: u64(1 << 19), UsageBytes: u64(1 << 19), RssBytes: u64(1 << 18), AvailableBytes: u64(0), PageFaults: u64(1), MajorPageFaults: u64(0)},
				WritableLayer: &runtimeapi.FilesystemUsage{Timestamp: now, UsedBytes: u64(4096), InodesUsed: u64(2),
					FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: p.opts.RootDir}},
			})
			files[filepath.Join("logs", "bench_"+name+"_"+uid, cname, "0.log")] = "a log line\n"
			cgroupFiles["memory/"+podCg+"/"+id+"/cgroup.procs"] = fmt.Sprintf("%d\n", pid+1)
		}
		rt.sandboxStats = append(rt.sandboxStats, sbStats)
		rt.containerStats = append(rt.containerStats, sbStats.Linux.Containers...)
		files[filepath.Join("pods", uid, "etc-hosts")] = "127.0.0.1 localhost\n"
		files[filepath.Join("pods", uid, "volumes", "kubernetes.io~empty-dir", "data", "f")] = "data"
		pod := &v1.Pod{}
		pod.UID = types.UID(uid)
		pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		pods = append(pods, pod)
	}
	writeTree(b, p.opts.RootDir, files)
	writeTree(b, cgroups, cgroupFiles)
	writeTree(b, proc, procFiles)
	p.volumes.refresh(context.Background(), pods, p.volumeSources(), clock.now)
	return p
}

// BenchmarkSummary100Pods is one GET /stats/summary on a node with 100 pods:
// the summary built and encoded as JSON.
func BenchmarkSummary100Pods(b *testing.B) {
	p := benchProvider(b, 100)
	s, err := p.Get(context.Background())
	if err != nil || len(s.Pods) != 100 || len(s.Pods[0].VolumeStats) != 1 || s.Pods[0].Containers[1].Logs == nil ||
		s.Pods[0].Network == nil || *s.Pods[0].ProcessStats.ProcessCount != 2 {
		b.Fatalf("the node is not what the benchmark means to measure: %v", err)
	}
	h := NewSummaryHandler(p)
	req := httptest.NewRequest("GET", SummaryPath, nil)
	w := &discardWriter{header: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
	}
	b.ReportMetric(float64(w.n)/float64(b.N), "resp-bytes/op")
}

// discardWriter is a ResponseWriter that keeps nothing, so that the
// benchmarks count the handler's allocations, not a recorder's.
type discardWriter struct {
	header http.Header
	n      int
}

func (w *discardWriter) Header() http.Header { return w.header }
func (w *discardWriter) WriteHeader(code int) {
	if code != http.StatusOK {
		panic(code)
	}
}
func (w *discardWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// BenchmarkResourceMetrics100Pods is one scrape of /metrics/resource on a
// node with 100 pods.
func BenchmarkResourceMetrics100Pods(b *testing.B) {
	h := NewResourceMetricsHandler(benchProvider(b, 100))
	req := httptest.NewRequest("GET", ResourceMetricsPath, nil)
	w := &discardWriter{header: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
	}
	b.ReportMetric(float64(w.n)/float64(b.N), "resp-bytes/op")
}

// v1MemoryStat is a real cgroup v1 memory.stat, all its keys.
const v1MemoryStat = `cache 0
rss 0
rss_huge 0
shmem 0
mapped_file 0
dirty 0
writeback 0
swap 0
pgpgin 0
pgpgout 0
pgfault 0
pgmajfault 0
inactive_anon 0
active_anon 0
inactive_file 0
active_file 0
unevictable 0
hierarchical_memory_limit 9223372036854771712
hierarchical_memsw_limit 9223372036854771712
total_cache 135168
total_rss 634880
total_rss_huge 0
total_shmem 0
total_mapped_file 0
total_dirty 0
total_writeback 0
total_swap 0
total_pgpgin 1188
total_pgpgout 878
total_pgfault 1653
total_pgmajfault 0
total_inactive_anon 634880
total_active_anon 0
total_inactive_file 135168
total_active_file 0
total_unevictable 0
`

const benchNetDev = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
  eth0:   81386    1047    0    0    0     0          0         0      892      12    0    0    0     0       0          0
`
