// Package tracing builds the kubelet's OpenTelemetry tracer provider from the
// KubeletConfiguration's tracing field, as upstream's cmd/kubelet/app newTracerProvider does:
// spans go over OTLP/gRPC to tracing.endpoint (default localhost:4317), sampled at
// tracing.samplingRatePerMillion, under service.name "kubelet" and host.name the node's
// host name. Without tracing the provider is a no-op one that exports nothing and dials
// nothing.
package tracing

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/util/validation/field"
	cbtracing "k8s.io/component-base/tracing"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
)

const (
	// Gate is the kubelet's tracing feature gate. Upstream made it GA (locked on) in
	// 1.34; nodelet still lets featureGates turn it off.
	Gate = "KubeletTracing"
	// serviceName is upstream's server.ComponentKubelet.
	serviceName = "kubelet"
	// InstrumentationScope names the tracer of the pod sync spans: upstream's kubelet
	// package path, so collectors group nodelet's spans as they group the kubelet's.
	InstrumentationScope = "k8s.io/kubernetes/pkg/kubelet"
)

// Provider is the kubelet's tracer provider: an exporting one when tracing is configured,
// a no-op one otherwise. Shutdown flushes the spans not yet exported.
type Provider struct {
	cbtracing.TracerProvider
	enabled bool
}

// Enabled reports whether spans may be exported: the configuration sets tracing and the
// KubeletTracing gate is on.
func Enabled(cfg *kubeletconfig.KubeletConfiguration) bool {
	if cfg.Tracing == nil {
		return false
	}
	on, set := cfg.FeatureGates[Gate]
	return !set || on
}

// NewProvider builds the provider for cfg; hostName is the node's host name (upstream's
// GetHostname of --hostname-override), recorded as host.name on every span.
func NewProvider(ctx context.Context, cfg *kubeletconfig.KubeletConfiguration, hostName string) (*Provider, error) {
	if !Enabled(cfg) {
		return &Provider{TracerProvider: cbtracing.NewNoopTracerProvider()}, nil
	}
	if err := Validate(cfg.Tracing); err != nil {
		return nil, err
	}
	res := resource.WithAttributes(semconv.ServiceNameKey.String(serviceName), semconv.HostNameKey.String(hostName))
	tp, err := cbtracing.NewProvider(ctx, cfg.Tracing, []otlptracegrpc.Option{}, []resource.Option{res})
	if err != nil {
		return nil, fmt.Errorf("could not configure tracer provider: %w", err)
	}
	return &Provider{TracerProvider: tp, enabled: true}, nil
}

// Enabled reports whether the provider exports spans.
func (p *Provider) Enabled() bool { return p.enabled }

// KubeletTracer is the tracer of the pod sync spans, upstream kubelet's instrumentation scope.
func (p *Provider) KubeletTracer() trace.Tracer { return p.Tracer(InstrumentationScope) }

// Validate checks a tracing configuration as upstream's kubelet does (component-base's
// ValidateTracingConfiguration): the sampling rate within [0, 1000000] and an endpoint
// of a scheme gRPC can dial (none, dns, unix or unix-abstract).
func Validate(c *tracingapi.TracingConfiguration) error {
	// The gate argument is unused upstream too: the checks do not depend on any gate.
	return tracingapi.ValidateTracingConfiguration(c, nil, field.NewPath("tracing")).ToAggregate()
}
