package app

import (
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func TestBinaryTrimDelay(t *testing.T) {
	for _, tc := range []struct {
		value   string
		delay   time.Duration
		enabled bool
		err     bool
	}{
		{"", defaultBinaryTrimDelay, true, false},
		{"off", 0, false, false},
		{"30s", 30 * time.Second, true, false},
		{"0s", 0, true, false},
		{"-1s", 0, false, true},
		{"soon", 0, false, true},
		{"false", 0, false, true},
	} {
		delay, enabled, err := binaryTrimDelay(tc.value)
		if (err != nil) != tc.err || delay != tc.delay || enabled != tc.enabled {
			t.Errorf("binaryTrimDelay(%q) = %v, %v, %v; want %v, %v, error %v", tc.value, delay, enabled, err, tc.delay, tc.enabled, tc.err)
		}
		if err != nil && !strings.Contains(err.Error(), binaryTrimEnv) {
			t.Errorf("binaryTrimDelay(%q): error %q does not name %s", tc.value, err, binaryTrimEnv)
		}
	}
}

func TestSetGCPercentLeavesAGivenGOGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	setGCPercent(func(string) string { return "200" })
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set, GC percent changed to %d", got)
	}
	setGCPercent(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("without GOGC, GC percent %d, want %d", got, gcPercent)
	}
}
