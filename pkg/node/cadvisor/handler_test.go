package cadvisor

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"
)

// A second, in nanoseconds since the epoch, at which the fakes take their figures.
const taken = int64(1_700_000_000_123_000_000)

var t0 = time.Unix(0, taken)

// cri16 is a runtime without pod sandbox metrics, as containerd 1.6 answers.
type cri16 struct{ *critest.FakeRuntimeService }

func (cri16) ListMetricDescriptors(context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method ListMetricDescriptors for service runtime.v1.RuntimeService")
}

func (cri16) ListPodSandboxMetrics(context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method ListPodSandboxMetrics for service runtime.v1.RuntimeService")
}

// fakeSummary returns a fixed summary and counts the calls.
type fakeSummary struct {
	mu      sync.Mutex
	summary *statsapi.Summary
	calls   int
}

func (f *fakeSummary) Get(context.Context) (*statsapi.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.summary, nil
}

func newTestHandler(o Options) (*Handler, *testingclock.FakeClock) {
	c := testingclock.NewFakeClock(t0.Add(time.Second))
	o.now = c.Now
	return NewHandler(o), c
}

func calls(f *critest.FakeRuntimeService, name string) int {
	n := 0
	for _, c := range f.GetCalls() {
		if c == name {
			n++
		}
	}
	return n
}

func metric(name string, t runtimeapi.MetricType, v uint64, labels ...string) *runtimeapi.Metric {
	return &runtimeapi.Metric{Name: name, Timestamp: taken, MetricType: t, LabelValues: labels, Value: &runtimeapi.UInt64Value{Value: v}}
}

// containerd2 is a fake runtime reporting what containerd 2.4 reports for one pod with
// one container: a network counter for the pod, a CPU counter and a memory gauge for
// the container.
func containerd2() *critest.FakeRuntimeService {
	f := critest.NewFakeRuntimeService()
	f.SetFakeSandboxes([]*critest.FakePodSandbox{{PodSandboxStatus: runtimeapi.PodSandboxStatus{Id: "sb1"}}})
	f.SetFakeMetricDescriptors([]*runtimeapi.MetricDescriptor{
		{Name: "container_network_receive_bytes_total", Help: "Cumulative count of bytes received", LabelKeys: []string{"pod", "namespace", "container", "id", "image", "interface"}},
		{Name: "container_cpu_usage_seconds_total", Help: "Cumulative CPU time consumed in seconds.", LabelKeys: []string{"pod", "namespace", "container", "id", "image"}},
		{Name: "container_memory_working_set_bytes", Help: "Amount of memory that is actively used by the container, excluding cached memory.", LabelKeys: []string{"pod", "namespace", "container", "id", "image"}},
	})
	f.SetFakePodSandboxMetrics([]*runtimeapi.PodSandboxMetrics{{
		PodSandboxId: "sb1",
		Metrics: []*runtimeapi.Metric{
			metric("container_network_receive_bytes_total", runtimeapi.MetricType_COUNTER, 1096, "web", "ns", "", "sb1", "", "eth0"),
		},
		ContainerMetrics: []*runtimeapi.ContainerMetrics{{
			ContainerId: "c1",
			Metrics: []*runtimeapi.Metric{
				metric("container_cpu_usage_seconds_total", runtimeapi.MetricType_COUNTER, 2, "web", "ns", "app", "c1", "busybox:1.36"),
				{Name: "container_memory_working_set_bytes", MetricType: runtimeapi.MetricType_GAUGE, LabelValues: []string{"web", "ns", "app", "c1", "busybox:1.36"}, Value: &runtimeapi.UInt64Value{Value: 983040}},
				// A metric the runtime did not describe is dropped, as upstream drops it.
				metric("container_threads", runtimeapi.MetricType_GAUGE, 2, "web", "ns", "app", "c1", "busybox:1.36"),
			},
		}},
	}})
	return f
}

// TestRuntimeMetricsPassedThrough: the runtime's metrics with its names, help (annotated
// as upstream's component-base annotates it), label keys, types and timestamps.
func TestRuntimeMetricsPassedThrough(t *testing.T) {
	h, _ := newTestHandler(Options{Runtime: containerd2(), Summary: &fakeSummary{}})
	want := `
# HELP container_cpu_usage_seconds_total [INTERNAL] Cumulative CPU time consumed in seconds.
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",id="c1",image="busybox:1.36",namespace="ns",pod="web"} 2 1700000000123
# HELP container_memory_working_set_bytes [INTERNAL] Amount of memory that is actively used by the container, excluding cached memory.
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="app",id="c1",image="busybox:1.36",namespace="ns",pod="web"} 983040
# HELP container_network_receive_bytes_total [INTERNAL] Cumulative count of bytes received
# TYPE container_network_receive_bytes_total counter
container_network_receive_bytes_total{container="",id="sb1",image="",interface="eth0",namespace="ns",pod="web"} 1096 1700000000123
`
	if err := testutil.GatherAndCompare(h.registry(context.Background()), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestDescriptorsReadOnce: the descriptors are read once, and again only after the
// runtime reported a metric none of them describes.
func TestDescriptorsReadOnce(t *testing.T) {
	f := containerd2()
	h, clk := newTestHandler(Options{Runtime: f, Summary: &fakeSummary{}})
	scrape := func() {
		clk.Step(time.Minute) // older than MaxAge: every scrape collects
		h.registry(context.Background())
	}
	scrape()
	scrape()
	// The first collection met container_threads: the second read the descriptors again.
	if got := calls(f, "ListMetricDescriptors"); got != 2 {
		t.Fatalf("ListMetricDescriptors called %d times, want 2", got)
	}
	f.SetFakePodSandboxMetrics([]*runtimeapi.PodSandboxMetrics{{PodSandboxId: "sb1", Metrics: []*runtimeapi.Metric{
		metric("container_network_receive_bytes_total", runtimeapi.MetricType_COUNTER, 1, "web", "ns", "", "sb1", "", "eth0"),
	}}})
	scrape()
	scrape()
	// The third collection read them after the second met container_threads; the fourth
	// did not.
	if got := calls(f, "ListMetricDescriptors"); got != 3 {
		t.Errorf("ListMetricDescriptors called %d times after only described metrics, want 3", got)
	}
	if got := calls(f, "ListPodSandboxMetrics"); got != 4 {
		t.Errorf("ListPodSandboxMetrics called %d times for 4 collections", got)
	}
}

// summaryFixture is a pod "web" with containers app and side and a network interface,
// as pkg/node/stats summarizes it, and the runtime's and the kubelet's views of it.
func summaryFixture() (cri16, *fakeSummary, func() []*v1.Pod) {
	ts := metav1.NewTime(t0)
	u := func(v uint64) *uint64 { return &v }
	summary := &statsapi.Summary{Pods: []statsapi.PodStats{{
		PodRef: statsapi.PodReference{Name: "web", Namespace: "ns", UID: "uid1"},
		Containers: []statsapi.ContainerStats{
			{
				Name:      "app",
				StartTime: metav1.NewTime(time.Unix(1_699_999_000, 0)),
				CPU:       &statsapi.CPUStats{Time: ts, UsageCoreNanoSeconds: u(1_500_000_000)},
				Memory: &statsapi.MemoryStats{Time: ts, UsageBytes: u(4096), WorkingSetBytes: u(2048), RSSBytes: u(1024),
					PageFaults: u(850), MajorPageFaults: u(1)},
				Swap: &statsapi.SwapStats{Time: ts, SwapUsageBytes: u(0)},
			},
			// A container the runtime no longer lists: no ID, and no memory figures.
			{Name: "side", StartTime: metav1.NewTime(time.Unix(1_699_999_001, 0)), CPU: &statsapi.CPUStats{Time: ts, UsageCoreNanoSeconds: u(0)}},
		},
		Network: &statsapi.NetworkStats{Time: ts, Interfaces: []statsapi.InterfaceStats{{Name: "eth0", RxBytes: u(1580), RxErrors: u(0), TxBytes: u(542), TxErrors: u(0)}}},
	}}}
	f := critest.NewFakeRuntimeService()
	f.SetFakeContainers([]*critest.FakeContainer{
		{SandboxID: "sb1", ContainerStatus: runtimeapi.ContainerStatus{Id: "c1", State: runtimeapi.ContainerState_CONTAINER_RUNNING,
			Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: "sha256:d72cc0"},
			Labels: map[string]string{"io.kubernetes.pod.uid": "uid1"}}},
		{SandboxID: "sb0", ContainerStatus: runtimeapi.ContainerStatus{Id: "c0", State: runtimeapi.ContainerState_CONTAINER_EXITED,
			Metadata: &runtimeapi.ContainerMetadata{Name: "side"}, Labels: map[string]string{"io.kubernetes.pod.uid": "uid1"}}},
	})
	pods := func() []*v1.Pod {
		return []*v1.Pod{{ObjectMeta: metav1.ObjectMeta{UID: types.UID("uid1")}, Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "app", Image: "busybox:1.36"}}}}}
	}
	return cri16{f}, &fakeSummary{summary: summary}, pods
}

// TestSummaryServedWithoutRuntimeMetrics: on a runtime without pod sandbox metrics the
// summary's figures are served under cAdvisor's names and labels.
func TestSummaryServedWithoutRuntimeMetrics(t *testing.T) {
	rt, summary, pods := summaryFixture()
	h, _ := newTestHandler(Options{Runtime: rt, Summary: summary, Pods: pods})
	c1 := `container="app",id="c1",image="busybox:1.36",name="c1",namespace="ns",pod="web"`
	c2 := `container="side",id="",image="",name="",namespace="ns",pod="web"`
	// The exposition sorts labels by name.
	c1cpu := `container="app",cpu="total",id="c1",image="busybox:1.36",name="c1",namespace="ns",pod="web"`
	c2cpu := `container="side",cpu="total",id="",image="",name="",namespace="ns",pod="web"`
	c1fault := func(typ, scope string) string {
		return `container="app",failure_type="` + typ + `",id="c1",image="busybox:1.36",name="c1",namespace="ns",pod="web",scope="` + scope + `"`
	}
	sb := `container="",id="sb1",image="",interface="eth0",name="sb1",namespace="ns",pod="web"`
	want := `
# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{` + c1cpu + `} 1.5 1700000000123
container_cpu_usage_seconds_total{` + c2cpu + `} 0 1700000000123
# HELP container_last_seen Last time a container was seen by the exporter
# TYPE container_last_seen gauge
container_last_seen{` + c1 + `} 1.700000001e+09 1700000001123
container_last_seen{` + c2 + `} 1.700000001e+09 1700000001123
# HELP container_memory_failures_total Cumulative count of memory allocation failures.
# TYPE container_memory_failures_total counter
container_memory_failures_total{` + c1fault("pgfault", "container") + `} 850 1700000000123
container_memory_failures_total{` + c1fault("pgfault", "hierarchy") + `} 850 1700000000123
container_memory_failures_total{` + c1fault("pgmajfault", "container") + `} 1 1700000000123
container_memory_failures_total{` + c1fault("pgmajfault", "hierarchy") + `} 1 1700000000123
# HELP container_memory_rss Size of RSS in bytes.
# TYPE container_memory_rss gauge
container_memory_rss{` + c1 + `} 1024 1700000000123
# HELP container_memory_swap Container swap usage in bytes.
# TYPE container_memory_swap gauge
container_memory_swap{` + c1 + `} 0 1700000000123
# HELP container_memory_usage_bytes Current memory usage in bytes, including all memory regardless of when it was accessed
# TYPE container_memory_usage_bytes gauge
container_memory_usage_bytes{` + c1 + `} 4096 1700000000123
# HELP container_memory_working_set_bytes Current working set in bytes.
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{` + c1 + `} 2048 1700000000123
# HELP container_network_receive_bytes_total Cumulative count of bytes received
# TYPE container_network_receive_bytes_total counter
container_network_receive_bytes_total{` + sb + `} 1580 1700000000123
# HELP container_network_receive_errors_total Cumulative count of errors encountered while receiving
# TYPE container_network_receive_errors_total counter
container_network_receive_errors_total{` + sb + `} 0 1700000000123
# HELP container_network_transmit_bytes_total Cumulative count of bytes transmitted
# TYPE container_network_transmit_bytes_total counter
container_network_transmit_bytes_total{` + sb + `} 542 1700000000123
# HELP container_network_transmit_errors_total Cumulative count of errors encountered while transmitting
# TYPE container_network_transmit_errors_total counter
container_network_transmit_errors_total{` + sb + `} 0 1700000000123
# HELP container_start_time_seconds Start time of the container since unix epoch in seconds.
# TYPE container_start_time_seconds gauge
container_start_time_seconds{` + c1 + `} 1.699999e+09
container_start_time_seconds{` + c2 + `} 1.699999001e+09
`
	if err := testutil.GatherAndCompare(h.registry(context.Background()), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestSummaryImageWithoutPods: without the kubelet's pods the image is the runtime's.
func TestSummaryImageWithoutPods(t *testing.T) {
	rt, summary, _ := summaryFixture()
	h, _ := newTestHandler(Options{Runtime: rt, Summary: summary})
	want := `
# HELP container_memory_rss Size of RSS in bytes.
# TYPE container_memory_rss gauge
container_memory_rss{container="app",id="c1",image="sha256:d72cc0",name="c1",namespace="ns",pod="web"} 1024 1700000000123
`
	if err := testutil.GatherAndCompare(h.registry(context.Background()), strings.NewReader(want), "container_memory_rss"); err != nil {
		t.Error(err)
	}
}

// TestUnsupportedRuntimeAskedAgainLater: a runtime without the calls is asked again only
// after recheckUnsupported, and then serves its own metrics if it has them by now.
func TestUnsupportedRuntimeAskedAgainLater(t *testing.T) {
	f := containerd2()
	unimplemented := status.Error(codes.Unimplemented, "unknown method")
	f.InjectError("ListMetricDescriptors", unimplemented)
	summary := &fakeSummary{summary: &statsapi.Summary{}}
	h, clk := newTestHandler(Options{Runtime: f, Summary: summary})
	for range 3 {
		clk.Step(time.Minute)
		h.registry(context.Background())
	}
	if got := calls(f, "ListMetricDescriptors"); got != 1 {
		t.Errorf("ListMetricDescriptors called %d times within %v, want 1", got, recheckUnsupported)
	}
	if summary.calls != 3 {
		t.Errorf("summary read %d times for 3 collections", summary.calls)
	}
	clk.Step(recheckUnsupported)
	err := testutil.GatherAndCompare(h.registry(context.Background()), strings.NewReader(`
# HELP container_cpu_usage_seconds_total [INTERNAL] Cumulative CPU time consumed in seconds.
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",id="c1",image="busybox:1.36",namespace="ns",pod="web"} 2 1700000000123
`), "container_cpu_usage_seconds_total")
	if err != nil {
		t.Errorf("after %v: %v", recheckUnsupported, err)
	}
}

// TestNoDescriptorsServesSummary: a runtime that describes no metric (CRI-O with its
// metrics off) gets the summary's figures.
func TestNoDescriptorsServesSummary(t *testing.T) {
	f := critest.NewFakeRuntimeService()
	summary := &fakeSummary{summary: &statsapi.Summary{}}
	h, _ := newTestHandler(Options{Runtime: f, Summary: summary})
	h.registry(context.Background())
	if summary.calls != 1 || calls(f, "ListPodSandboxMetrics") != 0 {
		t.Errorf("summary read %d times, ListPodSandboxMetrics called %d times; want 1 and 0", summary.calls, calls(f, "ListPodSandboxMetrics"))
	}
}

// TestRuntimeFailureServesMachineMetrics: when the runtime fails, the scrape still gets
// the machine metrics, and no figures from the summary in the runtime's place.
func TestRuntimeFailureServesMachineMetrics(t *testing.T) {
	f := containerd2()
	f.InjectError("ListPodSandboxMetrics", status.Error(codes.Unavailable, "connection refused"))
	summary := &fakeSummary{summary: &statsapi.Summary{}}
	machine := func() (*Machine, error) {
		return &Machine{NumCores: 2, MemoryBytes: 8 << 30, SwapBytes: 0, MachineID: "m1", SystemUUID: "u1", BootID: "b1"}, nil
	}
	h, _ := newTestHandler(Options{Runtime: f, Summary: summary, Machine: machine})
	want := `
# HELP machine_cpu_cores Number of logical CPU cores.
# TYPE machine_cpu_cores gauge
machine_cpu_cores{boot_id="b1",machine_id="m1",system_uuid="u1"} 2
# HELP machine_memory_bytes Amount of memory installed on the machine.
# TYPE machine_memory_bytes gauge
machine_memory_bytes{boot_id="b1",machine_id="m1",system_uuid="u1"} 8.589934592e+09
# HELP machine_scrape_error 1 if there was an error while getting machine metrics, 0 otherwise.
# TYPE machine_scrape_error gauge
machine_scrape_error 0
# HELP machine_swap_bytes Amount of swap memory available on the machine.
# TYPE machine_swap_bytes gauge
machine_swap_bytes{boot_id="b1",machine_id="m1",system_uuid="u1"} 0
`
	if err := testutil.GatherAndCompare(h.registry(context.Background()), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if summary.calls != 0 {
		t.Errorf("the summary was read %d times for a failing runtime", summary.calls)
	}
}

func TestMachineScrapeError(t *testing.T) {
	c := newMachineCollector(func() (*Machine, error) { return nil, errors.New("no /etc/machine-id") })
	want := `
# HELP machine_scrape_error 1 if there was an error while getting machine metrics, 0 otherwise.
# TYPE machine_scrape_error gauge
machine_scrape_error 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestServeHTTP: the handler answers in Prometheus's text format.
func TestServeHTTP(t *testing.T) {
	h, _ := newTestHandler(Options{Runtime: containerd2(), Summary: &fakeSummary{}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics/cadvisor", nil))
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") ||
		!strings.Contains(rec.Body.String(), `container_cpu_usage_seconds_total{container="app"`) {
		t.Errorf("%d %q\n%s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
}
