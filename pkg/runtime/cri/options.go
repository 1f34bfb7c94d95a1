package cri

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Option customises a client made by NewRemoteRuntimeService or
// NewRemoteImageService.
type Option func(*options)

type options struct {
	logger  klog.Logger
	clock   clock.PassiveClock
	metrics *Metrics
	// tracerProvider, when set, makes every call a span (see WithTracerProvider).
	tracerProvider trace.TracerProvider
	// pool, when set, shares one connection among the clients of a socket.
	pool *ConnPool
}

// WithLogger sets the logger for errors and V(10) request tracing. The
// default is klog's global logger.
func WithLogger(logger klog.Logger) Option {
	return func(o *options) { o.logger = logger }
}

// WithClock sets the clock that paces the one-per-minute repetition of
// identical per-container errors; tests pass a fake one.
func WithClock(c clock.PassiveClock) Option {
	return func(o *options) { o.clock = c }
}

// WithConnPool makes the client share its connection with the pool's other clients of
// the same socket (see ConnPool).
func WithConnPool(p *ConnPool) Option {
	return func(o *options) { o.pool = p }
}

// WithMetrics wraps the returned client so that every call is recorded in m
// (see NewInstrumentedRuntimeService).
func WithMetrics(m *Metrics) Option {
	return func(o *options) { o.metrics = m }
}

func buildOptions(opts []Option) options {
	o := options{logger: klog.Background(), clock: clock.RealClock{}}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// checkTimeouts rejects a non-positive request timeout, which would make
// every call fail at once, and lets a non-positive connection timeout fall
// back to the request timeout.
func checkTimeouts(connectionTimeout, requestTimeout time.Duration) (time.Duration, error) {
	if requestTimeout <= 0 {
		return 0, fmt.Errorf("CRI request timeout must be positive, got %v", requestTimeout)
	}
	if connectionTimeout <= 0 {
		return requestTimeout, nil
	}
	return connectionTimeout, nil
}
