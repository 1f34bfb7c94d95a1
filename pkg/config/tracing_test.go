package config

import (
	"strings"
	"testing"
)

// TestTracingValidatedAsUpstream: tracing is checked with component-base's rules and
// words, whatever the KubeletTracing gate says (upstream's validation reads no gate).
func TestTracingValidatedAsUpstream(t *testing.T) {
	cases := []struct {
		body    string
		wantErr string // "" means accepted
	}{
		{"tracing: {}\n", ""},
		{"tracing:\n  endpoint: localhost:4317\n  samplingRatePerMillion: 1000000\n", ""},
		{"tracing:\n  endpoint: unix:///run/otel.sock\n", ""},
		{"tracing:\n  samplingRatePerMillion: -1\n",
			"invalid configuration: tracing.samplingRatePerMillion: Invalid value: -1: sampling rate must be positive"},
		{"tracing:\n  samplingRatePerMillion: 1000001\n",
			"tracing.samplingRatePerMillion: Invalid value: 1000001: sampling rate per million must be less than or equal to one million"},
		{"tracing:\n  endpoint: http://collector:4317\n", "tracing.endpoint: Invalid value: \"http://collector:4317\": unsupported scheme: http."},
		{"featureGates:\n  KubeletTracing: false\ntracing:\n  samplingRatePerMillion: -1\n", "sampling rate must be positive"},
	}
	for _, c := range cases {
		cfg, err := loadDefaulted(t, c.body)
		if err == nil {
			err = Validate(cfg)
		}
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%q: rejected: %v", c.body, err)
		case c.wantErr != "" && err == nil:
			t.Errorf("%q: accepted, want error %q", c.body, c.wantErr)
		case c.wantErr != "" && !strings.Contains(err.Error(), c.wantErr):
			t.Errorf("%q: error %q does not contain %q", c.body, err, c.wantErr)
		}
	}
}

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
