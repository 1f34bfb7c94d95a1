package main

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/test/internal/audit"
)

// The lifecycle window less the idle one (scaled to its length), per pod.
func TestPerPodSubtractsTheBackground(t *testing.T) {
	life := audit.Counts{"patch pods/status": 42, "update leases": 6, "create events": 60}
	idle := audit.Counts{"update leases": 6, "get nodes": 2}
	got := perPod(life, idle, 1, 20)
	want := map[string]float64{"patch pods/status": 2.1, "update leases": 0, "create events": 3, "get nodes": -0.1}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
	if got := perPod(audit.Counts{"update leases": 12}, audit.Counts{"update leases": 6}, 2, 1); got["update leases"] != 0 {
		t.Errorf("a lifecycle twice the idle window's length: %v, want 0", got)
	}
}

func TestWriteRequestTableBusiestFirstWithTotals(t *testing.T) {
	var out bytes.Buffer
	writeRequestTable(&out, map[string]float64{"patch pods/status": 2, "create events": 3}, map[string]float64{"get pods": 1, "patch pods/status": 4}, "%.1f")
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	var first []string
	for _, l := range lines {
		first = append(first, strings.Fields(l)[0]+" "+strings.Fields(l)[1])
	}
	want := []string{"request nodelet", "patch pods/status", "create events", "get pods", "total 5.0"}
	if !reflect.DeepEqual(first, want) {
		t.Errorf("table:\n%s\nrows %q, want %q", out.String(), first, want)
	}
	out.Reset()
	writeRequestTable(&out, map[string]float64{"update leases": -0.0001}, nil, "%.2f")
	if strings.Contains(out.String(), "-0.00") {
		t.Errorf("a rounding to zero should print 0.00, not -0.00:\n%s", out.String())
	}
	if !strings.HasPrefix(lines[1], "  patch pods/status   ") || len(lines[1]) != len(lines[0]) {
		t.Errorf("names left-aligned, figures right-aligned:\n%s", out.String())
	}
	if f := strings.Fields(lines[len(lines)-1]); len(f) != 3 || f[1] != "5.0" || f[2] != "5.0" {
		t.Errorf("totals line %q, want 5.0 and 5.0", lines[len(lines)-1])
	}
}
