package probe

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// startGRPC serves on a loopback port; with hs it also serves the health service.
func startGRPC(t *testing.T, hs *health.Server, opts ...grpc.ServerOption) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	if hs != nil {
		healthpb.RegisterHealthServer(s, hs)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().(*net.TCPAddr).Port
}

func TestGRPCServingThenNotServing(t *testing.T) {
	hs := health.NewServer()
	port := startGRPC(t, hs)
	ctx := context.Background()

	if got, out, err := GRPC(ctx, "127.0.0.1", "", port, time.Second); got != Success || err != nil || out != "service healthy" {
		t.Errorf("SERVING: GRPC = %q, %q, %v", got, out, err)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	got, out, err := GRPC(ctx, "127.0.0.1", "", port, time.Second)
	if got != Failure || err != nil || out != `service unhealthy (responded with "NOT_SERVING")` {
		t.Errorf("NOT_SERVING: GRPC = %q, %q, %v", got, out, err)
	}
}

func TestGRPCServiceName(t *testing.T) {
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_SERVING)
	port := startGRPC(t, hs)
	ctx := context.Background()

	if got, out, err := GRPC(ctx, "127.0.0.1", "db", port, time.Second); got != Success || err != nil {
		t.Errorf("service db: GRPC = %q, %q, %v", got, out, err)
	}
	got, out, err := GRPC(ctx, "127.0.0.1", "cache", port, time.Second)
	if got != Failure || err != nil || !strings.Contains(out, "health rpc probe failed") || !strings.Contains(out, "NotFound") {
		t.Errorf("unknown service: GRPC = %q, %q, %v", got, out, err)
	}
}

func TestGRPCSendsUserAgent(t *testing.T) {
	agents := make(chan string, 1)
	spy := grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		agents <- strings.Join(md.Get("user-agent"), ",")
		return h(ctx, req)
	})
	port := startGRPC(t, health.NewServer(), spy)
	if got, out, err := GRPC(context.Background(), "127.0.0.1", "", port, time.Second); got != Success {
		t.Fatalf("GRPC = %q, %q, %v", got, out, err)
	}
	if ua := <-agents; !strings.HasPrefix(ua, "kube-probe/1.37") {
		t.Errorf("user-agent = %q, want kube-probe/1.37 first", ua)
	}
}

func TestGRPCWithoutHealthService(t *testing.T) {
	port := startGRPC(t, nil)
	got, out, err := GRPC(context.Background(), "127.0.0.1", "", port, time.Second)
	if got != Failure || err != nil || !strings.Contains(out, "does not implement the grpc health protocol") {
		t.Errorf("GRPC = %q, %q, %v", got, out, err)
	}
}

func TestGRPCClosedPort(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	got, out, err := GRPC(context.Background(), "127.0.0.1", "", port, time.Second)
	if got != Failure || err != nil || !strings.Contains(out, "failed to connect service") {
		t.Errorf("GRPC = %q, %q, %v", got, out, err)
	}
}

func TestGRPCTimeout(t *testing.T) {
	// A listener that accepts but never speaks HTTP/2: the call can only time out.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start := time.Now()
	got, out, err := GRPC(context.Background(), "127.0.0.1", "", ln.Addr().(*net.TCPAddr).Port, 300*time.Millisecond)
	if got != Failure || err != nil || out != "timeout: health rpc did not complete within 300ms" {
		t.Errorf("GRPC = %q, %q, %v", got, out, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %v, want about the 300ms timeout", took)
	}
}
