package config

import (
	"strings"
	"testing"
)

// TestTracingIsHonoured: setting tracing, or the KubeletTracing gate, is no longer warned
// about as something nodelet ignores.
func TestTracingIsHonoured(t *testing.T) {
	cfg, err := loadDefaulted(t, "featureGates:\n  KubeletTracing: true\ntracing:\n  samplingRatePerMillion: 100\n")
	if err != nil {
		t.Fatal(err)
	}
	if w := unhonouredFields(cfg); strings.Contains(w, "tracing") || strings.Contains(w, "featureGates") {
		t.Errorf("warning names tracing or featureGates: %s", w)
	}
}
