package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nodelet/nodelet/pkg/metrics"
)

func TestHealthzFollowsChecks(t *testing.T) {
	var broken atomic.Bool
	srv, err := ListenHealthz("127.0.0.1", 0, HealthCheck{Name: "runtime", Check: func() error {
		if broken.Load() {
			return errors.New("runtime down")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv.Serve(ctx)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok" {
		t.Fatalf("healthy: %d %q", code, body)
	}
	if code, body := get("/healthz?verbose"); code != 200 || !strings.Contains(body, "[+]runtime ok") {
		t.Fatalf("verbose: %d %q", code, body)
	}
	broken.Store(true)
	code, body := get("/healthz")
	if code != http.StatusInternalServerError || !strings.Contains(body, "[-]runtime failed") || strings.Contains(body, "runtime down") {
		t.Fatalf("unhealthy: %d %q (want 500, the check named, details withheld)", code, body)
	}
}

func TestListenHealthzReportsPortConflict(t *testing.T) {
	first, err := ListenHealthz("127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer first.ln.Close()
	port := int32(first.ln.Addr().(*net.TCPAddr).Port)
	if _, err := ListenHealthz("127.0.0.1", port); err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("got %v, want address already in use", err)
	}
}

// Each /healthz request records its checks' results for /metrics/slis, as upstream's
// healthz handler does.
func TestHealthzRecordsSLIs(t *testing.T) {
	regs, err := metrics.NewRegistries("node-a")
	if err != nil {
		t.Fatal(err)
	}
	h := healthzHandler([]HealthCheck{
		{Name: "ping", Check: func() error { return nil }},
		{Name: "sli-broken", Check: func() error { return errors.New("down") }},
	})
	for range 2 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/healthz", nil))
	}
	rec := httptest.NewRecorder()
	regs.SLIsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics/slis", nil))
	for _, want := range []string{
		`kubernetes_healthcheck{name="sli-broken",type="healthz"} 0`,
		`kubernetes_healthchecks_total{name="sli-broken",status="error",type="healthz"} 2`,
		`kubernetes_healthcheck{name="ping",type="healthz"} 1`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics/slis lacks %q:\n%s", want, rec.Body.String())
		}
	}
}
