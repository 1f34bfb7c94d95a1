package probe

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// GRPC calls grpc.health.v1.Health/Check for service ("" is the whole server) over plain
// text and passes when the answer is SERVING. Every other outcome — no connection, no
// health service, a timeout, any other status — is a failure, as with grpc_health_probe.
func GRPC(ctx context.Context, host, service string, port int, timeout time.Duration) (Result, string, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()), // probes have no credentials
		grpc.WithUserAgent(UserAgent()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return dialer(0).DialContext(ctx, "tcp", a)
		}),
	)
	if err != nil {
		return Failure, fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err), nil
	}
	defer func() { _ = conn.Close() }()

	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return Failure, grpcFailure(addr, service, timeout, err), nil
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return Failure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String()), nil
	}
	return Success, "service healthy", nil
}

// grpcFailure words a failed Check call the way upstream's probe does.
func grpcFailure(addr, service string, timeout time.Duration, err error) string {
	klog.V(4).InfoS("gRPC health check failed", "addr", addr, "service", service, "err", err)
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Unimplemented:
		return fmt.Sprintf("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): %s", st.Message())
	case codes.DeadlineExceeded:
		return fmt.Sprintf("timeout: health rpc did not complete within %v", timeout)
	case codes.Unavailable:
		// The client connects lazily, so a refused connection shows up here.
		return fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err)
	default:
		return fmt.Sprintf("error: health rpc probe failed: %+v", err)
	}
}
