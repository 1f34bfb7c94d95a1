package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- { // 1..100, given out of order
		d = append(d, time.Duration(i))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 50}, {0.9, 90}, {0.99, 99}, {1, 100}, {0.001, 1}} {
		if got := percentile(d, c.p); got != c.want {
			t.Errorf("percentile(1..100, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile([]time.Duration{7, 3}, 0.99); got != 7 {
		t.Errorf("p99 of two samples = %v, want the larger, 7", got)
	}
	if percentile(nil, 0.5) != 0 {
		t.Error("percentile of no samples should be 0")
	}
}

// Windows pool into one: all latencies, summed time, so that requests per second is the
// total over the total time, not a mean of rates.
func TestPooledSumsWindows(t *testing.T) {
	a := window{latencies: make([]time.Duration, 30), elapsed: 10 * time.Second, kubeletCPU: time.Second}
	b := window{latencies: make([]time.Duration, 10), elapsed: 10 * time.Second, kubeletCPU: 2 * time.Second}
	p := pooled([]window{a, b})
	if len(p.latencies) != 40 || p.elapsed != 20*time.Second || p.kubeletCPU != 3*time.Second {
		t.Fatalf("pooled = %d latencies over %v, kubelet CPU %v; want 40 over 20s, 3s", len(p.latencies), p.elapsed, p.kubeletCPU)
	}
	if got := p.perSecond(); got != 2 {
		t.Errorf("perSecond = %v, want 2", got)
	}
}

// hammer counts every answered request of each client and fails the window on an answer
// other than 200.
func TestHammerCountsRequestsAndFailsOnErrors(t *testing.T) {
	var calls atomic.Int64
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		_, _ = w.Write([]byte("12345"))
	}))
	defer ok.Close()
	w, err := hammer(context.Background(), 3, 100*time.Millisecond, httpGet(ok.Client(), ok.URL))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(w.latencies)) != calls.Load() || len(w.latencies) < 3 || w.bytes != 5 {
		t.Errorf("hammer: %d latencies, server saw %d requests, last body %d bytes; want equal, at least 3, 5 bytes", len(w.latencies), calls.Load(), w.bytes)
	}
	forbidden := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusForbidden)
	}))
	defer forbidden.Close()
	if _, err := hammer(context.Background(), 2, 50*time.Millisecond, httpGet(forbidden.Client(), forbidden.URL)); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("hammer against a 403: err = %v, want the status", err)
	}
}

func TestBusyTicksLeavesOutIdleIOWaitStealAndGuest(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	got, err := busyTicks("cpu  100 1 50 9000 20 3 4 2 30 0")
	if err != nil {
		t.Fatal(err)
	}
	if want := 158 * 10 * time.Millisecond; got != want {
		t.Errorf("busyTicks = %v, want %v", got, want)
	}
	if _, err := busyTicks("cpu0 1 2 3 4 5 6 7 8"); err == nil {
		t.Error("busyTicks accepted a per-CPU line")
	}
}

func TestIsShimOfMatchesTheShimsOfOneContainerd(t *testing.T) {
	cmdline := func(args ...string) []byte { return []byte(strings.Join(args, "\x00") + "\x00") }
	shim := cmdline("/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", "/run/a/containerd.sock")
	if !isShimOf(shim, "/run/a/containerd.sock") {
		t.Error("a shim of /run/a not matched")
	}
	if isShimOf(shim, "/run/b/containerd.sock") {
		t.Error("a shim of /run/a matched for /run/b")
	}
	if isShimOf(cmdline("containerd", "--config", "x", "-address", "/run/a/containerd.sock"), "/run/a/containerd.sock") {
		t.Error("containerd itself matched as a shim")
	}
	if isShimOf(cmdline("/usr/bin/containerd-shim-runc-v2", "-address"), "/run/a/containerd.sock") || isShimOf(nil, "x") {
		t.Error("a shim without an address matched")
	}
}
