package main

import (
	"reflect"
	"testing"
	"time"
)

// Each step goes first in turn, and every step runs once per round.
func TestInTurnRotatesTheFirstStep(t *testing.T) {
	for round, want := range [][]string{{"n", "u", "raw"}, {"u", "raw", "n"}, {"raw", "n", "u"}, {"n", "u", "raw"}} {
		var got []string
		step := func(name string) func() error { return func() error { got = append(got, name); return nil } }
		if err := inTurn(round, step("n"), step("u"), step("raw")); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round %d: order %v, want %v", round, got, want)
		}
	}
}

func TestMedianIsTheMiddleSample(t *testing.T) {
	got := median([]time.Duration{5, 1, 4, 2, 3})
	if got != 3 {
		t.Errorf("median = %v, want 3", got)
	}
	if median(nil) != 0 {
		t.Error("median of no samples should be 0")
	}
}
