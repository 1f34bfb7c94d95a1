package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegistries(t *testing.T) {
	r, err := NewRegistries("node-a")
	if err != nil {
		t.Fatal(err)
	}
	probes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prober_probe_total", Help: "test"}, []string{"probe_type"})
	probes.WithLabelValues("Readiness").Inc()
	if err := r.Probes.Register(probes); err != nil {
		t.Fatal(err)
	}
	StartedPodsTotal.Inc()

	body := scrape(t, r.Handler())
	for _, want := range []string{
		`kubelet_node_name{node="node-a"} 1`,
		"# HELP kubelet_started_pods_total [ALPHA] Cumulative number of pods started",
		"# TYPE kubelet_pod_start_duration_seconds histogram",
		"# TYPE kubelet_pleg_relist_duration_seconds histogram",
		// upstream's legacy registry has the process and Go collectors
		"process_start_time_seconds ", "process_resident_memory_bytes ", "go_goroutines ",
		"go_gc_duration_seconds", "go_sched_gomaxprocs_threads ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "prober_probe_total") {
		t.Error("/metrics serves the probe metrics; upstream serves them on /metrics/probes only")
	}

	body = scrape(t, r.ProbesHandler())
	for _, want := range []string{
		"# HELP process_start_time_seconds [ALPHA] Start time of the process since unix epoch in seconds.",
		`prober_probe_total{probe_type="Readiness"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics/probes lacks %q", want)
		}
	}
	if strings.Contains(body, "kubelet_") || strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics/probes serves more than the probe metrics:\n%s", body)
	}

	// A second set of registries (tests, a restarted loop) shares the same metrics.
	if _, err := NewRegistries("node-a"); err != nil {
		t.Fatalf("second NewRegistries: %v", err)
	}
}

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

func TestCgroupVersion(t *testing.T) {
	if v := cgroupVersion(t.TempDir() + "/missing"); v != 0 {
		t.Errorf("a missing directory is cgroup version %d, want 0", v)
	}
	if v := cgroupVersion("/sys/fs/cgroup"); v != 1 && v != 2 {
		t.Skipf("no cgroup hierarchy at /sys/fs/cgroup (%d)", v)
	}
}
