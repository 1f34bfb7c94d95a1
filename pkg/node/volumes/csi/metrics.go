package csi

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// operationsSeconds is upstream's csi_operations_seconds: every call to a driver, by
// driver, gRPC method and status code. migrated is always "false": nodelet migrates no
// in-tree volume plugin to CSI.
var operationsSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Subsystem: "csi", Name: "operations_seconds",
	Help:    "[ALPHA] Container Storage Interface operation duration with gRPC error code status total",
	Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600},
}, []string{"driver_name", "method_name", "grpc_status_code", "migrated"})

// Collector returns csi_operations_seconds, for the caller's /metrics registry.
func Collector() prometheus.Collector { return operationsSeconds }

// timeCalls is a client interceptor recording each call to the driver in
// csi_operations_seconds.
func timeCalls(driver string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		operationsSeconds.WithLabelValues(driver, method, statusCode(err), "false").Observe(time.Since(start).Seconds())
		return err
	}
}

// statusCode is the call's gRPC code as upstream labels it; a failure before any call
// is "unknown-non-grpc".
func statusCode(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return "unknown-non-grpc"
	}
	return st.Code().String()
}
