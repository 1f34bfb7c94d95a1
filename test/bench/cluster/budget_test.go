package main

import (
	"strings"
	"testing"
	"time"
)

// The bring-up's line splits the machine's CPU into the control plane, the kubelet, its
// containerd and what is left; the floor's line has the machine alone.
func TestPrintCPUBudgetsSplitsTheMachine(t *testing.T) {
	s := time.Second
	r := newDensityResults()
	r.floor = []time.Duration{14 * s}
	r.floorBudget = []cpuBudget{{machine: 27 * s, controlPlane: s, containerd: 10 * s}}
	r.up["nodelet"] = []time.Duration{20 * s}
	r.upBudget["nodelet"] = []cpuBudget{{machine: 38 * s, controlPlane: 8 * s, kubelet: 2 * s, containerd: 12 * s}}
	var out strings.Builder
	printCPUBudgets(&out, r)
	got := out.String()
	for _, want := range []string{"floor (medians): 27.0 s busy in 14.00 s = containerd 10.0 + control plane (idle) 1.0 + the rest (shims, runc, CNI plugins, the bench, the other node idle) 16.0", "nodelet  machine CPU over its bring-up (medians): 38.0 s busy in 20.00 s = control plane 8.0 + kubelet 2.0 + its containerd 12.0 + the rest", "16.0\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "upstream") {
		t.Errorf("a kubelet without samples got a line:\n%s", got)
	}
}
