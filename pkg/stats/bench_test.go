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
	p := newTestProvider(b, rt, procFixture(b, "0::/\n"), cgroupV1Fixture(b), clock)
	now := clock.now().UnixNano()
	files := map[string]string{}
	var pods []*v1.Pod
	for i := range n {
		uid := fmt.Sprintf("uid-%03d", i)
		name := fmt.Sprintf("pod-%03d", i)
		sbID := "sb-" + uid
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
		}
		rt.sandboxStats = append(rt.sandboxStats, sbStats)
		files[filepath.Join("pods", uid, "etc-hosts")] = "127.0.0.1 localhost\n"
		files[filepath.Join("pods", uid, "volumes", "kubernetes.io~empty-dir", "data", "f")] = "data"
		pod := &v1.Pod{}
		pod.UID = types.UID(uid)
		pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		pods = append(pods, pod)
	}
	writeTree(b, p.opts.RootDir, files)
	p.volumes.refresh(context.Background(), pods, p.opts.RootDir, clock.now)
	return p
}

// BenchmarkSummary100Pods is one GET /stats/summary on a node with 100 pods:
// the summary built and encoded as JSON.
func BenchmarkSummary100Pods(b *testing.B) {
	p := benchProvider(b, 100)
	s, err := p.Get(context.Background())
	if err != nil || len(s.Pods) != 100 || len(s.Pods[0].VolumeStats) != 1 || s.Pods[0].Containers[1].Logs == nil {
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
