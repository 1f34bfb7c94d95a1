package stats

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// stubSummaries answers with fixed summaries, or err.
type stubSummaries struct {
	full, cpuMem *statsapi.Summary
	err          error
}

func (s stubSummaries) Get(context.Context) (*statsapi.Summary, error) { return s.full, s.err }
func (s stubSummaries) GetCPUAndMemoryStats(context.Context) (*statsapi.Summary, error) {
	return s.cpuMem, s.err
}

func serve(h http.Handler, method, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

func TestSummaryHandler(t *testing.T) {
	full := &statsapi.Summary{Node: statsapi.NodeStats{NodeName: "full"}}
	cpuMem := &statsapi.Summary{Node: statsapi.NodeStats{NodeName: "cpu-and-memory"}}
	h := NewSummaryHandler(stubSummaries{full: full, cpuMem: cpuMem})
	for _, tc := range []struct {
		method, target string
		code           int
		node           string
	}{
		{"GET", "/stats/summary", 200, "full"},
		{"POST", "/stats/summary", 200, "full"},
		{"GET", "/stats/summary?only_cpu_and_memory=true", 200, "cpu-and-memory"},
		{"GET", "/stats/summary?only_cpu_and_memory=false", 200, "full"},
		{"GET", "/stats/summary?only_cpu_and_memory=true&only_cpu_and_memory=true", 200, "full"},
		{"PUT", "/stats/summary", 405, ""},
		{"GET", "/stats/", 404, ""},
		{"GET", "/stats/container", 404, ""},
	} {
		rec := serve(h, tc.method, tc.target)
		if rec.Code != tc.code {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.target, rec.Code, tc.code)
			continue
		}
		if tc.code != 200 {
			continue
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: content type %q", tc.method, tc.target, ct)
		}
		var got statsapi.Summary
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Node.NodeName != tc.node {
			t.Errorf("%s %s: node %q (%v), want %q", tc.method, tc.target, got.Node.NodeName, err, tc.node)
		}
	}
	// go-restful's indentation: one space.
	if body := serve(h, "GET", "/stats/summary").Body.String(); !strings.HasPrefix(body, "{\n \"node\": {\n  \"nodeName\": \"full\",") {
		t.Errorf("body not indented as upstream's:\n%s", body)
	}
}

func TestSummaryHandlerError(t *testing.T) {
	h := NewSummaryHandler(stubSummaries{err: errors.New("failed to list pod stats: boom")})
	rec := serve(h, "GET", "/stats/summary")
	if rec.Code != 500 || rec.Body.String() != "Internal Error: failed to list pod stats: boom" {
		t.Errorf("%d %q, want 500 Internal Error: ...", rec.Code, rec.Body.String())
	}
}

func TestResourceMetrics(t *testing.T) {
	at := func(sec int64) metav1.Time { return metaTime(time.Unix(sec, 0)) }
	summary := &statsapi.Summary{
		Node: statsapi.NodeStats{
			CPU:    &statsapi.CPUStats{Time: at(1800000001), UsageCoreNanoSeconds: ptrTo[uint64](12_500_000_000)},
			Memory: &statsapi.MemoryStats{Time: at(1800000002), WorkingSetBytes: ptrTo[uint64](1 << 30)},
			Swap:   &statsapi.SwapStats{Time: at(1800000002), SwapUsageBytes: ptrTo[uint64](0)},
		},
		Pods: []statsapi.PodStats{{
			PodRef: statsapi.PodReference{Name: "web", Namespace: "default", UID: "u1"},
			Containers: []statsapi.ContainerStats{{
				Name:      "app",
				StartTime: metaTime(time.Unix(1790000000, 500_000_000)),
				CPU:       &statsapi.CPUStats{Time: at(1800000003), UsageCoreNanoSeconds: ptrTo[uint64](1_000_000)},
				Memory:    &statsapi.MemoryStats{Time: at(1800000003), WorkingSetBytes: ptrTo[uint64](4096)},
				Swap: &statsapi.SwapStats{Time: at(1800000003), SwapUsageBytes: ptrTo[uint64](10),
					SwapAvailableBytes: ptrTo[uint64](90)},
			}, {
				// Start time unknown: no container_start_time_seconds.
				Name: "sidecar",
				CPU:  &statsapi.CPUStats{Time: at(1800000004)},
			}},
			CPU:    &statsapi.CPUStats{Time: at(1800000005), UsageCoreNanoSeconds: ptrTo[uint64](2_000_000)},
			Memory: &statsapi.MemoryStats{Time: at(1800000005), WorkingSetBytes: ptrTo[uint64](8192)},
		}},
	}
	h := NewResourceMetricsHandler(stubSummaries{cpuMem: summary})
	rec := serve(h, "GET", ResourceMetricsPath)
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("%d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	const want = `# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="default",pod="web"} 0.001 1800000003000
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="app",namespace="default",pod="web"} 4096 1800000003000
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="app",namespace="default",pod="web"} 1.7900000005e+09
# HELP container_swap_limit_bytes [ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems
# TYPE container_swap_limit_bytes gauge
container_swap_limit_bytes{container="app",namespace="default",pod="web"} 100 1800000003000
# HELP container_swap_usage_bytes [ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems
# TYPE container_swap_usage_bytes gauge
container_swap_usage_bytes{container="app",namespace="default",pod="web"} 10 1800000003000
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 12.5 1800000001000
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1.073741824e+09 1800000002000
# HELP node_swap_usage_bytes [ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems
# TYPE node_swap_usage_bytes gauge
node_swap_usage_bytes 0 1800000002000
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="default",pod="web"} 0.002 1800000005000
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace="default",pod="web"} 8192 1800000005000
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
`
	if got := rec.Body.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestResourceMetricsScrapeError(t *testing.T) {
	h := NewResourceMetricsHandler(stubSummaries{err: errors.New("runtime down")})
	body, _ := io.ReadAll(serve(h, "GET", ResourceMetricsPath).Body)
	if !strings.Contains(string(body), "\nresource_scrape_error 1\n") || strings.Contains(string(body), "node_cpu") {
		t.Errorf("body:\n%s\nwant resource_scrape_error 1 and nothing else", body)
	}
}

func TestResourceMetricsGzipEscapingAndDuplicates(t *testing.T) {
	pod := statsapi.PodStats{
		PodRef: statsapi.PodReference{Name: "we\"b", Namespace: `de\fault`},
		CPU:    &statsapi.CPUStats{Time: metav1.NewTime(time.Unix(1800000000, 0)), UsageCoreNanoSeconds: ptrTo[uint64](1e9)},
	}
	// The same pod twice (two ready sandboxes): written once.
	summary := &statsapi.Summary{Pods: []statsapi.PodStats{pod, pod}}
	h := NewResourceMetricsHandler(stubSummaries{cpuMem: summary})
	req := httptest.NewRequest("GET", ResourceMetricsPath, nil)
	req.Header.Set("Accept-Encoding", "deflate, gzip;q=1.0")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("content encoding %q, want gzip", rec.Header().Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	line := `pod_cpu_usage_seconds_total{namespace="de\\fault",pod="we\"b"} 1 1800000000000` + "\n"
	if strings.Count(string(body), line) != 1 {
		t.Errorf("body:\n%s\nwant once: %s", body, line)
	}
}
