package app

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
)

// fakeCRI is an in-process CRI v1 runtime: a gRPC server on a unix socket whose
// runtime and image services delegate to cri-api's FakeRuntimeService and
// FakeImageService, so a test can read what nodelet asked for (Called, Sandboxes,
// Containers, Images). GetContainerEvents is left unimplemented: nodelet relists.
type fakeCRI struct {
	Runtime  *critest.FakeRuntimeService
	Images   *critest.FakeImageService
	Endpoint string // unix://<socket>
}

// startFakeCRI serves a ready runtime (runtime and network conditions true, cgroupfs
// driver) on a socket in a fresh temp directory until the test ends. Images get a size
// (nodelet, as upstream, rejects an ImageStatus without one) and the image filesystem
// is that temp directory.
func startFakeCRI(t *testing.T) *fakeCRI {
	t.Helper()
	rt := critest.NewFakeRuntimeService()
	rt.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
	rt.FakeLinuxConfiguration = &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS}
	dir := t.TempDir()
	img := critest.NewFakeImageService()
	img.SetFakeImageSize(4 << 20)
	img.SetFakeFilesystemUsage([]*runtimeapi.FilesystemUsage{{
		Timestamp: time.Now().UnixNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: dir},
		UsedBytes: &runtimeapi.UInt64Value{Value: 4 << 20}, InodesUsed: &runtimeapi.UInt64Value{Value: 16},
	}})

	socket := filepath.Join(dir, "cri.sock") // well under the 108-byte limit
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, &fakeRuntimeServer{f: rt})
	runtimeapi.RegisterImageServiceServer(srv, &fakeImageServer{f: img})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return &fakeCRI{Runtime: rt, Images: img, Endpoint: "unix://" + socket}
}

type fakeRuntimeServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	f *critest.FakeRuntimeService
}

func (s *fakeRuntimeServer) Version(ctx context.Context, req *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	resp, err := s.f.Version(ctx, req.Version)
	if err != nil {
		return nil, err
	}
	resp.RuntimeApiVersion = "v1" // the fake says "0.1.0"
	return resp, nil
}

func (s *fakeRuntimeServer) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return s.f.Status(ctx, req.Verbose)
}

func (s *fakeRuntimeServer) RuntimeConfig(ctx context.Context, _ *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	return s.f.RuntimeConfig(ctx)
}

func (s *fakeRuntimeServer) UpdateRuntimeConfig(ctx context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	return &runtimeapi.UpdateRuntimeConfigResponse{}, s.f.UpdateRuntimeConfig(ctx, req.RuntimeConfig)
}

func (s *fakeRuntimeServer) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	id, err := s.f.RunPodSandbox(ctx, req.Config, req.RuntimeHandler)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

func (s *fakeRuntimeServer) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	return &runtimeapi.StopPodSandboxResponse{}, s.f.StopPodSandbox(ctx, req.PodSandboxId)
}

func (s *fakeRuntimeServer) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	return &runtimeapi.RemovePodSandboxResponse{}, s.f.RemovePodSandbox(ctx, req.PodSandboxId)
}

func (s *fakeRuntimeServer) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	return s.f.PodSandboxStatus(ctx, req.PodSandboxId, req.Verbose)
}

func (s *fakeRuntimeServer) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	items, err := s.f.ListPodSandbox(ctx, req.Filter)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxResponse{Items: items}, nil
}

func (s *fakeRuntimeServer) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	id, err := s.f.CreateContainer(ctx, req.PodSandboxId, req.Config, req.SandboxConfig)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

func (s *fakeRuntimeServer) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	return &runtimeapi.StartContainerResponse{}, s.f.StartContainer(ctx, req.ContainerId)
}

func (s *fakeRuntimeServer) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	return &runtimeapi.StopContainerResponse{}, s.f.StopContainer(ctx, req.ContainerId, req.Timeout)
}

func (s *fakeRuntimeServer) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	return &runtimeapi.RemoveContainerResponse{}, s.f.RemoveContainer(ctx, req.ContainerId)
}

func (s *fakeRuntimeServer) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	cs, err := s.f.ListContainers(ctx, req.Filter)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListContainersResponse{Containers: cs}, nil
}

func (s *fakeRuntimeServer) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return s.f.ContainerStatus(ctx, req.ContainerId, req.Verbose)
}

func (s *fakeRuntimeServer) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	res := &runtimeapi.ContainerResources{Linux: req.Linux, Windows: req.Windows}
	return &runtimeapi.UpdateContainerResourcesResponse{}, s.f.UpdateContainerResources(ctx, req.ContainerId, res)
}

func (s *fakeRuntimeServer) ReopenContainerLog(ctx context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	return &runtimeapi.ReopenContainerLogResponse{}, s.f.ReopenContainerLog(ctx, req.ContainerId)
}

func (s *fakeRuntimeServer) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	st, err := s.f.ContainerStats(ctx, req.ContainerId)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: st}, nil
}

func (s *fakeRuntimeServer) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	st, err := s.f.ListContainerStats(ctx, req.Filter)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: st}, nil
}

func (s *fakeRuntimeServer) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	st, err := s.f.PodSandboxStats(ctx, req.PodSandboxId)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: st}, nil
}

func (s *fakeRuntimeServer) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	st, err := s.f.ListPodSandboxStats(ctx, req.Filter)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: st}, nil
}

type fakeImageServer struct {
	runtimeapi.UnimplementedImageServiceServer
	f *critest.FakeImageService
}

func (s *fakeImageServer) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref, err := s.f.PullImage(ctx, req.Image, req.Auth, req.SandboxConfig)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PullImageResponse{ImageRef: ref}, nil
}

func (s *fakeImageServer) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	return s.f.ImageStatus(ctx, req.Image, req.Verbose)
}

func (s *fakeImageServer) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	images, err := s.f.ListImages(ctx, req.Filter)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListImagesResponse{Images: images}, nil
}

func (s *fakeImageServer) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	return &runtimeapi.RemoveImageResponse{}, s.f.RemoveImage(ctx, req.Image)
}

func (s *fakeImageServer) ImageFsInfo(ctx context.Context, _ *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return s.f.ImageFsInfo(ctx)
}
