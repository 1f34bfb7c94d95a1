package main

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// Pods never Ready rank after the slowest: a percentile that falls among them is
// infinite, one below them is a plain nearest rank.
func TestChurnPercentileRanksNeverReadyLast(t *testing.T) {
	var ready []time.Duration
	for i := 98; i >= 1; i-- { // 1..98 s, out of order
		ready = append(ready, time.Duration(i)*time.Second)
	}
	for _, c := range []struct {
		p    float64
		want float64
	}{{0.5, 50}, {0.98, 98}, {0.99, math.Inf(1)}, {1, math.Inf(1)}} {
		if got := churnPercentile(ready, 2, c.p); got != c.want {
			t.Errorf("p%v of 98 Ready and 2 never: %v, want %v", c.p, got, c.want)
		}
	}
	if got := churnPercentile(ready, 0, 1); got != 98 {
		t.Errorf("max of all Ready = %v, want 98", got)
	}
	if got := churnPercentile(nil, 0, 0.5); got != 0 {
		t.Errorf("no pods: %v, want 0", got)
	}
}

func TestCreateToReadyCountsTheNeverReady(t *testing.T) {
	k := &kubelet{namespace: "ns"}
	t0 := time.Now()
	started := map[string]time.Time{"a": t0, "b": t0.Add(time.Second), "c": t0.Add(2 * time.Second)}
	readyAt := func(key string) (time.Time, bool) {
		switch key {
		case "ns/a":
			return t0.Add(1500 * time.Millisecond), true
		case "ns/c":
			return t0.Add(2500 * time.Millisecond), true
		}
		return time.Time{}, false
	}
	ready, never := createToReady(k, []string{"a", "b", "c"}, started, readyAt)
	if never != 1 || len(ready) != 2 || ready[0] != 1500*time.Millisecond || ready[1] != 500*time.Millisecond {
		t.Errorf("ready %v, never %d; want [1.5s 500ms], 1", ready, never)
	}
}

// Rows of infinite figures print as not Ready; a ratio of two infinities has no verdict.
func TestRowWithInfiniteFigures(t *testing.T) {
	inf := math.Inf(1)
	r := row{n: inf, u: 2, aim: 0.7, duration: true}
	if r.format(r.n) != "∞ (not Ready)" || r.ratio() != "+Inf" || r.aimCell() != "≤ 0.70 MISSED" {
		t.Errorf("nodelet never Ready: %q %q %q", r.format(r.n), r.ratio(), r.aimCell())
	}
	r = row{n: 1, u: inf, aim: 0.7, duration: true}
	if r.ratio() != "0.00" || r.aimCell() != "≤ 0.70 met" {
		t.Errorf("upstream never Ready: %q %q", r.ratio(), r.aimCell())
	}
	r = row{n: inf, u: inf, aim: 0.7, duration: true}
	if r.ratio() != "-" || r.aimCell() != "≤ 0.70 n/a" {
		t.Errorf("both never Ready: %q %q", r.ratio(), r.aimCell())
	}
}

// The floor's lines give its percentiles and each kubelet's create → Ready above them;
// a failed floor says why, and no floor prints nothing.
func TestPrintChurnFloor(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, m := range v {
			out = append(out, time.Duration(m)*time.Millisecond)
		}
		return out
	}
	b := &bench{o: options{churnFloorDuration: 2 * time.Minute}, results: results{churn: newChurnResults()}}
	var out strings.Builder
	b.printChurnFloor(&out)
	if out.Len() != 0 {
		t.Errorf("printed without a floor: %q", out.String())
	}
	r := &b.results.churn
	r.floor = ms(100, 200, 300, 400)
	r.ready["nodelet"] = ms(150, 250, 350, 500)
	r.ready["upstream"] = ms(200, 300, 400, 600)
	b.printChurnFloor(&out)
	for _, want := range []string{
		"for 2m0s, RunPodSandbox → StartContainer returned: p50 0.20 s, p90 0.40 s, p99 0.40 s, max 0.40 s (4 pods)",
		"p50 above the floor's (counts the API's and the watch's part): nodelet +0.05 s, upstream +0.10 s, ratio 0.50",
		"p99 above the floor's (counts the API's and the watch's part): nodelet +0.10 s, upstream +0.20 s, ratio 0.50",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	r.floorErr = errors.New("deadline exceeded")
	b.printChurnFloor(&out)
	if !strings.Contains(out.String(), "no churn floor: the raw CRI churn failed: deadline exceeded") {
		t.Errorf("failed floor: %q", out.String())
	}
}
