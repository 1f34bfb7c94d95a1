//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"
)

// servingStandalone is a standalone nodelet that serves the kubelet API on loopback:
// anonymous requests allowed (no API server to ask), and the read-only port.
type servingStandalone struct {
	*standalone
	port, readOnlyPort int
}

func startServingStandalone(t *testing.T) *servingStandalone {
	t.Helper()
	port, readOnlyPort := freePort(t), freePort(t)
	extra := fmt.Sprintf(`address: 127.0.0.1
port: %d
readOnlyPort: %d
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
`, port, readOnlyPort)
	s := startStandaloneOn(t, "e2e-"+string(uuid.NewUUID())[:8], t.TempDir(), extra)
	return &servingStandalone{standalone: s, port: port, readOnlyPort: readOnlyPort}
}

// sample is one line of Prometheus's text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// exposition is a parsed scrape: the samples and each family's help.
type exposition struct {
	samples []sample
	help    map[string]string
}

// parseExposition reads Prometheus's text format (label values here hold no quotes).
func parseExposition(t *testing.T, text string) exposition {
	t.Helper()
	e := exposition{help: map[string]string{}}
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			e.help[name] = help
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := sample{labels: map[string]string{}}
		series, rest, _ := strings.Cut(line, "} ")
		name, labels, hasLabels := strings.Cut(series, "{")
		if !hasLabels {
			name, rest, _ = strings.Cut(line, " ")
		}
		s.name = name
		for _, pair := range strings.Split(labels, `",`) {
			if k, v, ok := strings.Cut(pair, `="`); ok {
				s.labels[k] = strings.TrimSuffix(v, `"`)
			}
		}
		value, _, _ := strings.Cut(rest, " ")
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		s.value = v
		e.samples = append(e.samples, s)
	}
	return e
}

// find returns the samples of a family whose labels include match.
func (e exposition) find(name string, match map[string]string) []sample {
	var out []sample
	for _, s := range e.samples {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range match {
			ok = ok && s.labels[k] == v
		}
		if ok {
			out = append(out, s)
		}
	}
	return out
}

func labelNames(s sample) []string {
	var out []string
	for k := range s.labels {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestMetricsCadvisor: /metrics/cadvisor serves a running pod's container CPU, memory and
// start time and its network, with its container's and sandbox's IDs and its image, on
// both the read-only and the authenticated port. On containerd 2.x the families are the
// runtime's (ListPodSandboxMetrics) with upstream's "[INTERNAL]" help; on containerd 1.6,
// which lacks the call, cAdvisor's names and labels computed from the stats summary.
func TestMetricsCadvisor(t *testing.T) {
	s := startServingStandalone(t)
	s.writeManifest(t, "scraped.yaml", busyboxPod("scraped", "Always", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	waitFor(t, 30*time.Second, "container running", func() bool { return len(s.containers(t, "scraped", false)) == 1 })
	ctr := s.containers(t, "scraped", false)[0]
	pod := map[string]string{"pod": "scraped-" + s.node, "namespace": "default"}
	appLabels := map[string]string{"pod": pod["pod"], "namespace": "default", "container": "c0"}

	client := &http.Client{Timeout: 20 * time.Second}
	var e exposition
	// A scrape may serve a collection made before the container ran, for 10 s.
	waitFor(t, 30*time.Second, "the container's metrics", func() bool {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics/cadvisor", s.readOnlyPort))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return false
		}
		e = parseExposition(t, string(b))
		return len(e.find("container_memory_working_set_bytes", appLabels)) == 1 &&
			len(e.find("container_network_receive_bytes_total", pod)) > 0
	})

	ws := e.find("container_memory_working_set_bytes", appLabels)[0]
	if ws.labels["id"] != ctr.Id || ws.labels["image"] != busybox || ws.value <= 0 {
		t.Errorf("working set %v, want id %s, image %s and bytes", ws, ctr.Id, busybox)
	}
	if cpu := e.find("container_cpu_usage_seconds_total", appLabels); len(cpu) != 1 {
		t.Errorf("container_cpu_usage_seconds_total of the container: %v", cpu)
	}
	if st := e.find("container_start_time_seconds", appLabels); len(st) != 1 || st[0].value < float64(time.Unix(0, ctr.CreatedAt).Unix()-1) {
		t.Errorf("container_start_time_seconds %v, container created at %v", st, time.Unix(0, ctr.CreatedAt))
	}
	sandbox := s.sandboxes(t, "scraped")[0].Id
	net := e.find("container_network_receive_bytes_total", map[string]string{"pod": pod["pod"], "container": "", "interface": "eth0"})
	if len(net) != 1 || net[0].labels["id"] != sandbox {
		t.Errorf("container_network_receive_bytes_total of the pod: %v, want one for eth0 with id %s", net, sandbox)
	}
	if m := e.find("machine_cpu_cores", nil); len(m) != 1 || m[0].value < 1 || m[0].labels["machine_id"] == "" {
		t.Errorf("machine_cpu_cores: %v", m)
	}

	if os.Getenv("NODELET_RUNTIME") == "containerd2" {
		// The runtime's own families, labels and help, annotated as upstream annotates them.
		if got := labelNames(ws); !slices.Equal(got, []string{"container", "id", "image", "namespace", "pod"}) {
			t.Errorf("labels %v, want containerd's", got)
		}
		if h := e.help["container_memory_working_set_bytes"]; !strings.HasPrefix(h, "[INTERNAL] ") {
			t.Errorf("help %q, want the runtime's, annotated [INTERNAL]", h)
		}
		for _, family := range []string{"container_memory_rss", "container_oom_events_total", "container_threads", "container_network_transmit_packets_total"} {
			if len(e.find(family, pod)) == 0 {
				t.Errorf("no %s from the runtime", family)
			}
		}
	} else {
		if got := labelNames(ws); !slices.Equal(got, []string{"container", "id", "image", "name", "namespace", "pod"}) {
			t.Errorf("labels %v, want cAdvisor's", got)
		}
		if h := e.help["container_memory_working_set_bytes"]; h != "Current working set in bytes." {
			t.Errorf("help %q, want cAdvisor's", h)
		}
		if cpu := e.find("container_cpu_usage_seconds_total", appLabels); len(cpu) == 1 && cpu[0].labels["cpu"] != "total" {
			t.Errorf("cpu label %q, want cAdvisor's total", cpu[0].labels["cpu"])
		}
	}

	// The authenticated port serves it too (anonymous is allowed here, and authorized as
	// nodes/metrics).
	code, body := get(t, insecureClient(nil), fmt.Sprintf("https://127.0.0.1:%d/metrics/cadvisor", s.port), "")
	if code != http.StatusOK || !strings.Contains(body, "container_memory_working_set_bytes{") {
		t.Errorf("HTTPS /metrics/cadvisor: %d %.300s", code, body)
	}
}
