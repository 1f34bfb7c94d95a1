package main

import (
	"math"
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
