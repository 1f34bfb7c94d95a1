// Command grpc-health is a test image for gRPC probes: a grpc.health.v1 server on :9090
// that answers SERVING, for the whole server ("") and for the service "probe", until the
// file /tmp/not-serving exists, and NOT_SERVING from then on (checked on every call).
// Other service names get NotFound, as the protocol says. Tests create the file with exec
// (the image has busybox). It exits 0 on SIGTERM or SIGINT.
package main

import (
	"context"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

const notServingFile = "/tmp/not-serving"

type fileHealth struct {
	healthpb.UnimplementedHealthServer
}

func (fileHealth) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if req.GetService() != "" && req.GetService() != "probe" {
		return nil, status.Errorf(codes.NotFound, "unknown service %q", req.GetService())
	}
	if _, err := os.Stat(notServingFile); err == nil {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ln, err := net.Listen("tcp", ":9090")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, fileHealth{})
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	log.Print("grpc-health: grpc.health.v1 on :9090")
	if err := srv.Serve(ln); err != nil {
		log.Fatal(err)
	}
}
