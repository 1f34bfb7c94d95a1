package cri

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// testRequestTimeout is the request timeout the clients under test get.
const testRequestTimeout = 10 * time.Second

// noDeadline marks a call that reached the server without a deadline.
const noDeadline time.Duration = -1

// fakeCRI is the state behind an in-process CRI server: canned replies and
// errors per method, and what each call brought (request and deadline).
type fakeCRI struct {
	mu        sync.Mutex
	replies   map[string]any
	errs      map[string]error
	requests  map[string]any
	deadlines map[string]time.Duration
	events    []*runtimeapi.ContainerEventResponse
	// eventsErr ends the event stream after the events (nil: a clean end).
	eventsErr error
	// eventsHold, when set, keeps the stream open after the events until it is closed.
	eventsHold chan struct{}
	// server is the gRPC server startFakeCRI started.
	server *grpc.Server
}

func newFakeCRI() *fakeCRI {
	f := &fakeCRI{
		replies:   map[string]any{},
		errs:      map[string]error{},
		requests:  map[string]any{},
		deadlines: map[string]time.Duration{},
	}
	f.set("Version", &runtimeapi.VersionResponse{
		Version: "0.1.0", RuntimeName: "fake", RuntimeVersion: "1.0", RuntimeApiVersion: "v1",
	})
	f.set("ImageFsInfo", &runtimeapi.ImageFsInfoResponse{})
	return f
}

func (f *fakeCRI) set(method string, reply any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replies[method] = reply
}

func (f *fakeCRI) unset(method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.replies, method)
}

func (f *fakeCRI) fail(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[method] = err
}

func (f *fakeCRI) deadline(method string) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.deadlines[method]
	return d, ok
}

func (f *fakeCRI) request(method string) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[method]
}

// recordDeadline remembers how much time the call had left when it arrived.
func (f *fakeCRI) recordDeadline(ctx context.Context, fullMethod string) {
	method := fullMethod[strings.LastIndex(fullMethod, "/")+1:]
	left := noDeadline
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deadlines[method] = left
}

// reply answers method with the canned error or reply, or Unimplemented.
func reply[T any](f *fakeCRI, method string, req any) (T, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests[method] = req
	var zero T
	if err := f.errs[method]; err != nil {
		return zero, err
	}
	if r, ok := f.replies[method]; ok {
		return r.(T), nil
	}
	return zero, status.Errorf(codes.Unimplemented, "method %s not implemented", method)
}

// startFakeCRI serves f's runtime and image services on a fresh unix socket
// and returns the endpoint.
func startFakeCRI(t *testing.T, f *fakeCRI) string {
	t.Helper()
	// A short path: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "cri.sock")
	serveFakeCRI(t, f, socket)
	return "unix://" + socket
}

// serveFakeCRI serves f on socket until the test ends or f.server is stopped; a stopped
// server's socket is gone, and serving again on it is a runtime restart.
func serveFakeCRI(t *testing.T, f *fakeCRI, socket string) {
	t.Helper()
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			f.recordDeadline(ctx, info.FullMethod)
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			f.recordDeadline(ss.Context(), info.FullMethod)
			return h(srv, ss)
		}),
	)
	runtimeapi.RegisterRuntimeServiceServer(srv, &fakeRuntimeServer{f: f})
	runtimeapi.RegisterImageServiceServer(srv, &fakeImageServer{f: f})
	f.mu.Lock()
	f.server = srv
	f.mu.Unlock()
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
}

// newTestClients starts a fake CRI server and connects both clients to it.
func newTestClients(t *testing.T, f *fakeCRI, opts ...Option) (internalapi.RuntimeService, internalapi.ImageManagerService) {
	t.Helper()
	endpoint := startFakeCRI(t, f)
	ctx := context.Background()
	opts = append([]Option{WithLogger(logr.Discard())}, opts...) // quiet unless a test asks
	rs, err := NewRemoteRuntimeService(ctx, endpoint, 5*time.Second, testRequestTimeout, opts...)
	if err != nil {
		t.Fatalf("NewRemoteRuntimeService: %v", err)
	}
	t.Cleanup(func() { _ = rs.Close(ctx) })
	is, err := NewRemoteImageService(ctx, endpoint, 5*time.Second, testRequestTimeout, opts...)
	if err != nil {
		t.Fatalf("NewRemoteImageService: %v", err)
	}
	t.Cleanup(func() { _ = is.Close(ctx) })
	return rs, is
}

type fakeRuntimeServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	f *fakeCRI
}

func (s *fakeRuntimeServer) Version(_ context.Context, req *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return reply[*runtimeapi.VersionResponse](s.f, "Version", req)
}

func (s *fakeRuntimeServer) Status(_ context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return reply[*runtimeapi.StatusResponse](s.f, "Status", req)
}

func (s *fakeRuntimeServer) RunPodSandbox(_ context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	return reply[*runtimeapi.RunPodSandboxResponse](s.f, "RunPodSandbox", req)
}

func (s *fakeRuntimeServer) StopPodSandbox(_ context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	return reply[*runtimeapi.StopPodSandboxResponse](s.f, "StopPodSandbox", req)
}

func (s *fakeRuntimeServer) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	return reply[*runtimeapi.PodSandboxStatusResponse](s.f, "PodSandboxStatus", req)
}

func (s *fakeRuntimeServer) CreateContainer(_ context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	return reply[*runtimeapi.CreateContainerResponse](s.f, "CreateContainer", req)
}

func (s *fakeRuntimeServer) StartContainer(_ context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	return reply[*runtimeapi.StartContainerResponse](s.f, "StartContainer", req)
}

func (s *fakeRuntimeServer) StopContainer(_ context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	return reply[*runtimeapi.StopContainerResponse](s.f, "StopContainer", req)
}

func (s *fakeRuntimeServer) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return reply[*runtimeapi.ListContainersResponse](s.f, "ListContainers", req)
}

func (s *fakeRuntimeServer) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return reply[*runtimeapi.ContainerStatusResponse](s.f, "ContainerStatus", req)
}

func (s *fakeRuntimeServer) ExecSync(_ context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	return reply[*runtimeapi.ExecSyncResponse](s.f, "ExecSync", req)
}

func (s *fakeRuntimeServer) Exec(_ context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return reply[*runtimeapi.ExecResponse](s.f, "Exec", req)
}

func (s *fakeRuntimeServer) Attach(_ context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return reply[*runtimeapi.AttachResponse](s.f, "Attach", req)
}

func (s *fakeRuntimeServer) PortForward(_ context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return reply[*runtimeapi.PortForwardResponse](s.f, "PortForward", req)
}

func (s *fakeRuntimeServer) ContainerStats(_ context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	return reply[*runtimeapi.ContainerStatsResponse](s.f, "ContainerStats", req)
}

func (s *fakeRuntimeServer) ListContainerStats(_ context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	return reply[*runtimeapi.ListContainerStatsResponse](s.f, "ListContainerStats", req)
}

func (s *fakeRuntimeServer) ListPodSandboxStats(_ context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	return reply[*runtimeapi.ListPodSandboxStatsResponse](s.f, "ListPodSandboxStats", req)
}

func (s *fakeRuntimeServer) CheckpointContainer(_ context.Context, req *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerResponse, error) {
	return reply[*runtimeapi.CheckpointContainerResponse](s.f, "CheckpointContainer", req)
}

func (s *fakeRuntimeServer) CheckpointPod(_ context.Context, req *runtimeapi.CheckpointPodRequest) (*runtimeapi.CheckpointPodResponse, error) {
	return reply[*runtimeapi.CheckpointPodResponse](s.f, "CheckpointPod", req)
}

func (s *fakeRuntimeServer) RestorePod(_ context.Context, req *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	return reply[*runtimeapi.RestorePodResponse](s.f, "RestorePod", req)
}

// GetContainerEvents sends the canned events and ends the stream; with no
// events configured it answers Unimplemented, as containerd 1.6 does.
func (s *fakeRuntimeServer) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	s.f.mu.Lock()
	events, end, hold := s.f.events, s.f.eventsErr, s.f.eventsHold
	s.f.mu.Unlock()
	if events == nil {
		return status.Error(codes.Unimplemented, "method GetContainerEvents not implemented")
	}
	for _, e := range events {
		if err := stream.Send(e); err != nil {
			return err
		}
	}
	if hold != nil {
		select {
		case <-hold:
		case <-stream.Context().Done():
		}
	}
	return end
}

func (s *fakeRuntimeServer) RuntimeConfig(_ context.Context, req *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	return reply[*runtimeapi.RuntimeConfigResponse](s.f, "RuntimeConfig", req)
}

func (s *fakeRuntimeServer) ListMetricDescriptors(_ context.Context, req *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	return reply[*runtimeapi.ListMetricDescriptorsResponse](s.f, "ListMetricDescriptors", req)
}

func (s *fakeRuntimeServer) ListPodSandboxMetrics(_ context.Context, req *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	return reply[*runtimeapi.ListPodSandboxMetricsResponse](s.f, "ListPodSandboxMetrics", req)
}

type fakeImageServer struct {
	runtimeapi.UnimplementedImageServiceServer
	f *fakeCRI
}

func (s *fakeImageServer) ListImages(_ context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return reply[*runtimeapi.ListImagesResponse](s.f, "ListImages", req)
}

func (s *fakeImageServer) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	return reply[*runtimeapi.ImageStatusResponse](s.f, "ImageStatus", req)
}

func (s *fakeImageServer) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	return reply[*runtimeapi.PullImageResponse](s.f, "PullImage", req)
}

func (s *fakeImageServer) RemoveImage(_ context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	return reply[*runtimeapi.RemoveImageResponse](s.f, "RemoveImage", req)
}

func (s *fakeImageServer) ImageFsInfo(_ context.Context, req *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return reply[*runtimeapi.ImageFsInfoResponse](s.f, "ImageFsInfo", req)
}
