package cri

import (
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// WithTracerProvider makes every CRI call a client span of tp, a child of the span in the
// call's context, and passes the trace context to the runtime in the call's metadata (W3C
// traceparent and baggage), as upstream's CRI client does with the kubelet's provider.
// Without it (or with nil) calls are not instrumented at all.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// tracingDialOptions installs otelgrpc's client stats handler with upstream's options
// (cri-client's remote_runtime.go and remote_image.go): spans with message events, the
// trace-context and baggage propagators. Its gRPC metrics go to a no-op meter: the
// kubelet does not export them (upstream sets a no-op global meter provider for the same
// reason, otelgrpc's instruments otherwise pile up in the global delegate).
func tracingDialOptions(tp trace.TracerProvider) []grpc.DialOption {
	if tp == nil {
		return nil
	}
	handler := otelgrpc.NewClientHandler(
		otelgrpc.WithMessageEvents(otelgrpc.ReceivedEvents, otelgrpc.SentEvents),
		otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithMeterProvider(noop.NewMeterProvider()),
	)
	return []grpc.DialOption{grpc.WithStatsHandler(handler)}
}
