package kubeletserver

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/api/server"
)

// openOptions let anyone in (anonymous, AlwaysAllow), to test what the routes answer.
func openOptions(t *testing.T) Options {
	o := defaultOptions(t)
	o.Anonymous, o.WebhookAuthentication, o.AuthorizationMode = true, false, "AlwaysAllow"
	return o
}

func TestHealthz(t *testing.T) {
	host := &fakeHost{}
	extraErr := error(nil)
	s := startServer(t, openOptions(t), Deps{Host: host, HealthChecks: []server.HealthCheck{{Name: "runtime", Check: func() error { return extraErr }}}})
	c := client()
	for _, path := range []string{"/healthz", "/healthz/ping", "/healthz/log", "/healthz/syncloop", "/healthz/runtime"} {
		if r := do(t, c, "GET", base(s)+path, ""); r.code != 200 || r.body != "ok" {
			t.Errorf("%s: %d %q", path, r.code, r.body)
		}
	}
	if r := do(t, c, "GET", base(s)+"/healthz?verbose", ""); r.body != "[+]ping ok\n[+]log ok\n[+]syncloop ok\n[+]runtime ok\nhealthz check passed\n" {
		t.Errorf("verbose: %q", r.body)
	}
	host.syncLoopErr = errors.New("sync Loop took longer than expected")
	if r := do(t, c, "GET", base(s)+"/healthz", ""); r.code != 500 || r.body != "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\n[+]runtime ok\nhealthz check failed\n" {
		t.Errorf("failing syncloop: %d %q", r.code, r.body)
	}
	if r := do(t, c, "GET", base(s)+"/healthz/syncloop", ""); r.code != 500 || r.body != "internal server error: sync Loop took longer than expected\n" {
		t.Errorf("/healthz/syncloop: %d %q", r.code, r.body)
	}
	if r := do(t, c, "GET", base(s)+"/healthz?exclude=syncloop&exclude=nope&verbose", ""); r.code != 200 ||
		!strings.Contains(r.body, "[+]syncloop excluded: ok\n") || !strings.Contains(r.body, `no matches for "nope"`) {
		t.Errorf("exclude: %d %q", r.code, r.body)
	}
}

func TestPodsAndRunningPods(t *testing.T) {
	host := &fakeHost{
		pods:    []*v1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Status: v1.PodStatus{Phase: v1.PodRunning}}},
		running: []*v1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"}}},
	}
	s := startServer(t, openOptions(t), Deps{Host: host})
	c := client()
	for path, want := range map[string]string{"/pods": "Running", "/runningpods/": "u1"} {
		r := do(t, c, "GET", base(s)+path, "")
		var list v1.PodList
		if err := json.Unmarshal([]byte(r.body), &list); err != nil || r.code != 200 || r.hdr.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %q %v", path, r.code, r.body, err)
		}
		if list.Kind != "PodList" || list.APIVersion != "v1" || len(list.Items) != 1 || !strings.Contains(r.body, want) {
			t.Errorf("%s: %s", path, r.body)
		}
		if r := do(t, c, "POST", base(s)+path, ""); r.code != http.StatusMethodNotAllowed || r.hdr.Get("Allow") != "GET" {
			t.Errorf("POST %s: %d %v", path, r.code, r.hdr)
		}
	}
	host.pods = nil
	if r := do(t, c, "GET", base(s)+"/pods", ""); !strings.Contains(r.body, `"items":[]`) {
		t.Errorf("no pods: %s", r.body)
	}
}

func TestConfigz(t *testing.T) {
	o := openOptions(t)
	o.Configz.MaxPods = 42
	s := startServer(t, o, Deps{})
	r := do(t, client(), "GET", base(s)+"/configz", "")
	var got struct {
		KubeletConfig map[string]any `json:"kubeletconfig"`
	}
	if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.code != 200 {
		t.Fatalf("%d %q %v", r.code, r.body, err)
	}
	kc := got.KubeletConfig
	if kc["kind"] != "KubeletConfiguration" || kc["apiVersion"] != "kubelet.config.k8s.io/v1beta1" || kc["maxPods"] != float64(42) {
		t.Errorf("configz: %v", kc)
	}
	if o.Configz.Kind != "" {
		t.Error("serving /configz changed the running configuration")
	}
}

// TestMountedHandlers: handlers from other packages see the full path; without one the
// path is 404.
func TestMountedHandlers(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(r.Method + " " + r.URL.Path)) })
	s := startServer(t, openOptions(t), Deps{Exec: echo, Attach: echo, PortForward: echo, Run: echo, ContainerLogs: echo,
		Checkpoint: echo, Stats: echo, Metrics: echo, MetricsResource: echo, MetricsProbes: echo})
	c := client()
	for _, path := range []string{"/exec/ns/p/c", "/attach/ns/p/uid/c", "/portForward/ns/p", "/run/ns/p/c", "/containerLogs/ns/p/c",
		"/checkpoint/ns/p/c", "/stats/summary", "/stats", "/metrics", "/metrics/resource", "/metrics/probes"} {
		if r := do(t, c, "POST", base(s)+path, ""); r.code != 200 || r.body != "POST "+path {
			t.Errorf("%s: %d %q", path, r.code, r.body)
		}
	}
	for _, path := range []string{"/metrics/cadvisor", "/metrics/slis", "/nope", "/stats"} {
		bare := startServer(t, openOptions(t), Deps{})
		if r := do(t, c, "GET", base(bare)+path, ""); r.code != 404 {
			t.Errorf("%s without a handler: %d %q", path, r.code, r.body)
		}
	}
}

func TestDebuggingHandlersDisabled(t *testing.T) {
	o := openOptions(t)
	o.EnableDebuggingHandlers = false
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("reached")) })
	s := startServer(t, o, Deps{Exec: echo, Attach: echo, PortForward: echo, Run: echo, ContainerLogs: echo, Checkpoint: echo, Stats: echo})
	c := client()
	for _, path := range []string{"/exec/ns/p/c", "/attach/ns/p/c", "/portForward/ns/p", "/run/ns/p/c", "/containerLogs/ns/p/c", "/runningpods/", "/debug/pprof/", "/logs/"} {
		if r := do(t, c, "GET", base(s)+path, ""); r.code != http.StatusMethodNotAllowed || r.body != "Debug endpoints are disabled.\n" {
			t.Errorf("%s: %d %q", path, r.code, r.body)
		}
	}
	for _, path := range []string{"/configz", "/checkpoint/ns/p/c", "/debug/flags/v"} {
		if r := do(t, c, "GET", base(s)+path, ""); r.code != 404 {
			t.Errorf("%s: %d %q, want 404 as upstream (not installed)", path, r.code, r.body)
		}
	}
	if r := do(t, c, "GET", base(s)+"/stats/summary", ""); r.code != 200 {
		t.Errorf("stats stay on: %d", r.code)
	}
}

func TestProfilingAndDebugFlags(t *testing.T) {
	s := startServer(t, openOptions(t), Deps{})
	c := client()
	if r := do(t, c, "GET", base(s)+"/debug/pprof/", ""); r.code != 200 || !strings.Contains(r.body, "goroutine") {
		t.Errorf("pprof index: %d", r.code)
	}
	if r := do(t, c, "GET", base(s)+"/debug/pprof/goroutine?debug=1", ""); r.code != 200 || !strings.Contains(r.body, "goroutine profile") {
		t.Errorf("goroutine profile: %d", r.code)
	}
	if r := do(t, c, "GET", base(s)+"/debug/flags/v", ""); r.code != http.StatusNotAcceptable || r.body != "unsupported http method\n" {
		t.Errorf("GET flags: %d %q", r.code, r.body)
	}
	var level klog.Level
	old := level.String()
	t.Cleanup(func() { _ = level.Set(old) })
	req, _ := http.NewRequest("PUT", base(s)+"/debug/flags/v", strings.NewReader("7"))
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 200 || !klog.V(7).Enabled() {
		t.Fatalf("PUT 7: %v %v, V(7) %v", resp, err, klog.V(7).Enabled())
	}
	resp.Body.Close()
	req, _ = http.NewRequest("PUT", base(s)+"/debug/flags/v", strings.NewReader("x"))
	if resp, _ := c.Do(req); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("PUT x: %d", resp.StatusCode)
	}

	o := openOptions(t)
	o.EnableProfilingHandler, o.EnableDebugFlagsHandler, o.EnableSystemLogHandler = false, false, false
	off := startServer(t, o, Deps{})
	for path, msg := range map[string]string{"/debug/pprof/heap": "profiling endpoint is disabled.\n", "/debug/flags/v": "flags endpoint is disabled.\n", "/logs/": "logs endpoint is disabled.\n"} {
		if r := do(t, c, "GET", base(off)+path, ""); r.code != http.StatusMethodNotAllowed || r.body != msg {
			t.Errorf("%s: %d %q", path, r.code, r.body)
		}
	}
}

func TestSystemLogs(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "syslog", []byte("line one\n"))
	outside := writeFile(t, t.TempDir(), "secret", []byte("secret\n"))
	if err := os.Symlink(outside, filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	o := openOptions(t)
	o.NodeLogDir = dir
	s := startServer(t, o, Deps{})
	c := client()
	if r := do(t, c, "GET", base(s)+"/logs/", ""); r.code != 200 || !strings.Contains(r.body, "syslog") {
		t.Errorf("listing: %d %q", r.code, r.body)
	}
	if r := do(t, c, "GET", base(s)+"/logs/syslog", ""); r.code != 200 || r.body != "line one\n" {
		t.Errorf("file: %d %q", r.code, r.body)
	}
	if r := do(t, c, "GET", base(s)+"/logs/escape", ""); r.code == 200 || strings.Contains(r.body, "secret") {
		t.Errorf("a symlink out of the log directory was followed: %d %q", r.code, r.body)
	}
	if r := do(t, c, "POST", base(s)+"/logs/syslog", ""); r.code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", r.code)
	}
	// Without enableSystemLogQuery a query is ignored: the file server answers.
	if r := do(t, c, "GET", base(s)+"/logs/?query=kubelet", ""); r.code != 200 || !strings.Contains(r.body, "syslog") {
		t.Errorf("query without enableSystemLogQuery: %d %q", r.code, r.body)
	}

	o.EnableSystemLogQuery = true
	q := startServer(t, o, Deps{})
	for query, want := range map[string]struct {
		code int
		body string
	}{
		"?query=/syslog":              {200, "line one\n"},
		"?query=nosuchsvc":            {200, "\nlog not found for nosuchsvc\n"},
		"?query=syslog":               {200, "line one\n"},
		"?query=a%24b":                {406, "input contains unsupported characters"},
		"?query=/syslog&query=/x":     {406, "cannot specify more than one file"},
		"?query=/syslog&tailLines=3":  {406, "cannot specify file with options"},
		"?tailLines=abc":              {400, "tailLines"},
		"?tailLines=3":                {406, "cannot be empty with options"},
		"?query=svc&tailLines=100001": {406, "must be between 0 and 100000"},
		"?query=svc&boot=1":           {406, "must be less than 1"},
		"?query=svc&sinceTime=2025-01-02T00:00:00Z&untilTime=2025-01-01T00:00:00Z": {406, "must be after `sinceTime`"},
	} {
		r := do(t, c, "GET", base(q)+"/logs/"+query, "")
		if r.code != want.code || !strings.Contains(r.body, want.body) {
			t.Errorf("%s: %d %q, want %d %q", query, r.code, r.body, want.code, want.body)
		}
	}
	if r := do(t, c, "GET", base(q)+"/logs/syslog?query=x", ""); r.code != http.StatusNotAcceptable || !strings.Contains(r.body, "path not allowed in query mode") {
		t.Errorf("path with a query: %d %q", r.code, r.body)
	}
}

func TestReadOnlyPort(t *testing.T) {
	o := openOptions(t)
	if o.ReadOnlyPort != 0 {
		t.Fatalf("readOnlyPort defaults to %d", o.ReadOnlyPort)
	}
	if s := startServer(t, o, Deps{}); s.ReadOnlyAddr() != nil {
		t.Fatal("read-only server started with readOnlyPort 0")
	}
	ro := defaultOptions(t) // webhook authentication on: only the read-only port is open
	ro.ReadOnlyPort = freePort(t)
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok " + r.URL.Path)) })
	host := &fakeHost{pods: []*v1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p"}}}}
	s := startServer(t, ro, Deps{Host: host, Client: (&reviews{}).client(), Stats: echo, Metrics: echo, Exec: echo})
	url := "http://" + s.ReadOnlyAddr().String()
	c := &http.Client{}
	for path, code := range map[string]int{"/pods": 200, "/healthz": 200, "/stats/summary": 200, "/metrics": 200,
		"/exec/ns/p/c": 405, "/runningpods/": 405, "/logs/": 405, "/debug/pprof/": 405, "/configz": 404, "/checkpoint/ns/p/c": 404, "/debug/flags/v": 404} {
		if r := do(t, c, "GET", url+path, ""); r.code != code {
			t.Errorf("read-only %s: %d %q, want %d", path, r.code, r.body, code)
		}
	}
	if r := do(t, client(), "GET", base(s)+"/pods", ""); r.code != http.StatusUnauthorized {
		t.Errorf("the secure port stays authenticated: %d", r.code)
	}
}

// freePort is a port nothing listens on right now.
func freePort(t *testing.T) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

func TestRequestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := startServer(t, openOptions(t), Deps{Registerer: reg})
	c := client()
	do(t, c, "GET", base(s)+"/pods", "")
	do(t, c, "GET", base(s)+"/some/thing", "")
	want := `
# HELP kubelet_http_requests_total [ALPHA] Number of the http requests received since the server started
# TYPE kubelet_http_requests_total counter
kubelet_http_requests_total{long_running="false",method="GET",path="other",server_type="readwrite"} 1
kubelet_http_requests_total{long_running="false",method="GET",path="pods",server_type="readwrite"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubelet_http_requests_total"); err != nil {
		t.Error(err)
	}
	if got := metricLabels("POST", "/exec/ns/p/c", "readwrite"); strings.Join(got, ",") != "POST,exec,readwrite,true" {
		t.Errorf("exec labels: %v", got)
	}
	if got := metricLabels("BREW", "/metrics/resource", "readonly"); strings.Join(got, ",") != "other,metrics/resource,readonly,false" {
		t.Errorf("metrics labels: %v", got)
	}
}

func TestJournalArgs(t *testing.T) {
	since := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	tail, boot := 10, -1
	q := &nodeLogQuery{sinceTime: &since, tailLines: &tail, boot: &boot, pattern: "err.*"}
	got := strings.Join(q.journalArgs([]string{"kubelet", "containerd"}), " ")
	want := "--utc --no-pager --output=short-precise --since=2025-3-4 05:6:7 --pager-end --lines=10 --unit=kubelet --unit=containerd --grep=err.* --boot -1"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// TestStreamingWritersKept: with request logging on (-v=3), handlers still get a writer
// they can flush and hijack (log streaming and SPDY upgrades need them).
func TestStreamingWritersKept(t *testing.T) {
	var level klog.Level
	old := level.String()
	_ = level.Set("3")
	t.Cleanup(func() { _ = level.Set(old) })
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, flusher := w.(http.Flusher)
		hj, hijacker := w.(http.Hijacker)
		if !flusher || !hijacker {
			http.Error(w, "wrapped away", 500)
			return
		}
		conn, buf, err := hj.Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		buf.Flush()
	})
	s := startServer(t, openOptions(t), Deps{Exec: h})
	if r := do(t, client(), "POST", base(s)+"/exec/ns/p/c", ""); r.code != 200 || r.body != "hijacked" {
		t.Fatalf("%d %q", r.code, r.body)
	}
}
