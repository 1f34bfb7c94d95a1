package tracing_test

import (
	"context"
	"strings"
	"testing"
	"time"

	tracingapi "k8s.io/component-base/tracing/api/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/tracing"
	"github.com/nodelet/nodelet/pkg/tracing/tracingtest"
)

func configFor(endpoint string, rate *int32, gates map[string]bool) *kubeletconfig.KubeletConfiguration {
	return &kubeletconfig.KubeletConfiguration{
		FeatureGates: gates,
		Tracing:      &tracingapi.TracingConfiguration{Endpoint: ptr.To(endpoint), SamplingRatePerMillion: rate},
	}
}

// startSpan makes one root span and flushes the provider.
func startSpan(t *testing.T, tp *tracing.Provider) {
	t.Helper()
	_, span := tp.KubeletTracer().Start(context.Background(), "syncPod")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// With tracing set and every trace sampled, a span reaches the collector with upstream's
// resource (service.name kubelet, host.name) and the kubelet's instrumentation scope.
func TestSpansAreExportedWhereTracingPoints(t *testing.T) {
	rcv := tracingtest.Start(t)
	tp, err := tracing.NewProvider(context.Background(), configFor(rcv.Endpoint, ptr.To[int32](1000000), nil), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if !tp.Enabled() {
		t.Fatal("tracing is configured but the provider is not enabled")
	}
	startSpan(t, tp)
	spans := rcv.Spans()
	if len(spans) != 1 {
		t.Fatalf("received %d spans, want 1: %+v", len(spans), spans)
	}
	s := spans[0]
	if s.Name != "syncPod" || s.Scope != "k8s.io/kubernetes/pkg/kubelet" {
		t.Errorf("span %q of scope %q, want syncPod of k8s.io/kubernetes/pkg/kubelet", s.Name, s.Scope)
	}
	if s.Resource["service.name"] != "kubelet" || s.Resource["host.name"] != "node-a" {
		t.Errorf("resource %v, want service.name kubelet and host.name node-a", s.Resource)
	}
}

// Without samplingRatePerMillion upstream samples no trace it starts (only those whose
// remote parent was sampled); with the KubeletTracing gate off, or no tracing field,
// nothing is exported and the collector is never dialled.
func TestNothingIsExported(t *testing.T) {
	cases := map[string]func(endpoint string) *kubeletconfig.KubeletConfiguration{
		"no tracing field": func(string) *kubeletconfig.KubeletConfiguration { return &kubeletconfig.KubeletConfiguration{} },
		"gate off": func(e string) *kubeletconfig.KubeletConfiguration {
			return configFor(e, ptr.To[int32](1000000), map[string]bool{tracing.Gate: false})
		},
		"no sampling rate": func(e string) *kubeletconfig.KubeletConfiguration { return configFor(e, nil, nil) },
		"zero sampling rate": func(e string) *kubeletconfig.KubeletConfiguration {
			return configFor(e, ptr.To[int32](0), nil)
		},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			rcv := tracingtest.Start(t)
			tp, err := tracing.NewProvider(context.Background(), cfg(rcv.Endpoint), "node-a")
			if err != nil {
				t.Fatal(err)
			}
			startSpan(t, tp)
			if n := len(rcv.Spans()); n != 0 {
				t.Errorf("received %d spans, want none", n)
			}
			if n := rcv.Connections(); n != 0 {
				t.Errorf("%d connections to the collector, want none", n)
			}
			if off := !strings.Contains(name, "sampling"); off && tp.Enabled() {
				t.Error("the provider is enabled, want a no-op one")
			}
		})
	}
}

// The gate defaults to on; setting it true changes nothing.
func TestGateOnByDefault(t *testing.T) {
	for _, gates := range []map[string]bool{nil, {tracing.Gate: true}, {"Other": false}} {
		if !tracing.Enabled(configFor("localhost:4317", nil, gates)) {
			t.Errorf("featureGates %v: tracing not enabled", gates)
		}
	}
}

func TestInvalidConfigurationIsRejected(t *testing.T) {
	cases := map[string]*kubeletconfig.KubeletConfiguration{
		"sampling rate must be positive":    configFor("localhost:4317", ptr.To[int32](-1), nil),
		"less than or equal to one million": configFor("localhost:4317", ptr.To[int32](1000001), nil),
		"unsupported scheme: https":         configFor("https://collector:4317", nil, nil),
	}
	for want, cfg := range cases {
		_, err := tracing.NewProvider(context.Background(), cfg, "node-a")
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "tracing.") {
			t.Errorf("error %v, want one naming the tracing field and saying %q", err, want)
		}
	}
}
