package topologymanager

import (
	"fmt"
	"testing"
)

func TestMask(t *testing.T) {
	m := MustMask(0, 2)
	if !m.IsSet(2) || m.IsSet(1) || m.Count() != 2 || fmt.Sprint(m.Bits()) != "[0 2]" || m.Pretty() != "0,2" {
		t.Errorf("mask %s: bits %v", m, m.Bits())
	}
	if _, err := NewMask(64); err == nil {
		t.Error("NUMA node 64 accepted")
	}
	if !MustMask(1).IsNarrowerThan(MustMask(0, 1)) || !MustMask(0, 1).IsNarrowerThan(MustMask(0, 2)) || MustMask(1).IsNarrowerThan(MustMask(0)) {
		t.Error("IsNarrowerThan: fewer nodes first, then lower IDs")
	}
	var got []string
	IterateMasks([]int{0, 1, 2}, func(m Mask) { got = append(got, m.Pretty()) })
	if want := "[0 1 2 0,1 0,2 1,2 0,1,2]"; fmt.Sprint(got) != want {
		t.Errorf("IterateMasks: %v, want %s", got, want)
	}
	if !(TopologyHint{MustMask(0, 1), true}).LessThan(TopologyHint{MustMask(0), false}) {
		t.Error("a preferred hint sorts before a narrower one that is not")
	}
}
