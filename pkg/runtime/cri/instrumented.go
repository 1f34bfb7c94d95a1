package cri

import (
	"context"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Operation names for the operation_type label, as upstream's kubelet uses
// them (instrumented_services.go).
const (
	opVersion                   = "version"
	opStatus                    = "status"
	opRuntimeConfig             = "runtime_config"
	opUpdateRuntimeConfig       = "update_runtime_config"
	opRunPodSandbox             = "run_podsandbox"
	opStopPodSandbox            = "stop_podsandbox"
	opRemovePodSandbox          = "remove_podsandbox"
	opPodSandboxStatus          = "podsandbox_status"
	opListPodSandbox            = "list_podsandbox"
	opPortForward               = "port_forward"
	opUpdatePodSandboxResources = "update_podsandbox_resources"
	opCheckpointPod             = "checkpoint_pod"
	opRestorePod                = "restore_pod"
	opCreateContainer           = "create_container"
	opStartContainer            = "start_container"
	opStopContainer             = "stop_container"
	opRemoveContainer           = "remove_container"
	opListContainers            = "list_containers"
	opContainerStatus           = "container_status"
	opUpdateContainer           = "update_container"
	opReopenContainerLog        = "reopen_container_log"
	opExecSync                  = "exec_sync"
	opExec                      = "exec"
	opAttach                    = "attach"
	opCheckpointContainer       = "checkpoint_container"
	opGetContainerEvents        = "get_container_events"
	opContainerStats            = "container_stats"
	opListContainerStats        = "list_container_stats"
	opPodSandboxStats           = "podsandbox_stats"
	opListPodSandboxStats       = "list_podsandbox_stats"
	opListMetricDescriptors     = "list_metric_descriptors"
	opListPodSandboxMetrics     = "list_podsandbox_metrics"
	opListImages                = "list_images"
	opImageStatus               = "image_status"
	opPullImage                 = "pull_image"
	opRemoveImage               = "remove_image"
	opImageFsInfo               = "image_fs_info"
)

// observe runs call and records it in m under operation.
func observe[T any](m *Metrics, operation string, call func() (T, error)) (T, error) {
	start := time.Now()
	out, err := call()
	m.record(operation, start, err)
	return out, err
}

// observeErr is observe for calls that return only an error.
func observeErr(m *Metrics, operation string, call func() error) error {
	start := time.Now()
	err := call()
	m.record(operation, start, err)
	return err
}

// instrumentedRuntimeService records every call of the wrapped service.
type instrumentedRuntimeService struct {
	svc internalapi.RuntimeService
	m   *Metrics
}

// NewInstrumentedRuntimeService wraps svc so that each call (except Close)
// is counted, timed and, when it fails, counted as an error in m. Any
// RuntimeService can be wrapped, including the cri-api testing fakes.
func NewInstrumentedRuntimeService(svc internalapi.RuntimeService, m *Metrics) internalapi.RuntimeService {
	return &instrumentedRuntimeService{svc: svc, m: m}
}

func (in *instrumentedRuntimeService) Close(ctx context.Context) error { return in.svc.Close(ctx) }

func (in *instrumentedRuntimeService) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	return observe(in.m, opVersion, func() (*runtimeapi.VersionResponse, error) { return in.svc.Version(ctx, apiVersion) })
}

func (in *instrumentedRuntimeService) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	return observe(in.m, opStatus, func() (*runtimeapi.StatusResponse, error) { return in.svc.Status(ctx, verbose) })
}

func (in *instrumentedRuntimeService) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	return observe(in.m, opRuntimeConfig, func() (*runtimeapi.RuntimeConfigResponse, error) { return in.svc.RuntimeConfig(ctx) })
}

func (in *instrumentedRuntimeService) UpdateRuntimeConfig(ctx context.Context, c *runtimeapi.RuntimeConfig) error {
	return observeErr(in.m, opUpdateRuntimeConfig, func() error { return in.svc.UpdateRuntimeConfig(ctx, c) })
}

// RunPodSandbox also records the per-runtime-handler sandbox metrics.
func (in *instrumentedRuntimeService) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	start := time.Now()
	id, err := observe(in.m, opRunPodSandbox, func() (string, error) { return in.svc.RunPodSandbox(ctx, config, runtimeHandler) })
	in.m.recordRunPodSandbox(runtimeHandler, start, err)
	return id, err
}

func (in *instrumentedRuntimeService) StopPodSandbox(ctx context.Context, id string) error {
	return observeErr(in.m, opStopPodSandbox, func() error { return in.svc.StopPodSandbox(ctx, id) })
}

func (in *instrumentedRuntimeService) RemovePodSandbox(ctx context.Context, id string) error {
	return observeErr(in.m, opRemovePodSandbox, func() error { return in.svc.RemovePodSandbox(ctx, id) })
}

func (in *instrumentedRuntimeService) PodSandboxStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	return observe(in.m, opPodSandboxStatus, func() (*runtimeapi.PodSandboxStatusResponse, error) {
		return in.svc.PodSandboxStatus(ctx, id, verbose)
	})
}

func (in *instrumentedRuntimeService) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return observe(in.m, opListPodSandbox, func() ([]*runtimeapi.PodSandbox, error) { return in.svc.ListPodSandbox(ctx, filter) })
}

func (in *instrumentedRuntimeService) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return observe(in.m, opPortForward, func() (*runtimeapi.PortForwardResponse, error) { return in.svc.PortForward(ctx, req) })
}

func (in *instrumentedRuntimeService) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	return observe(in.m, opUpdatePodSandboxResources, func() (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
		return in.svc.UpdatePodSandboxResources(ctx, req)
	})
}

func (in *instrumentedRuntimeService) CheckpointPod(ctx context.Context, req *runtimeapi.CheckpointPodRequest) error {
	return observeErr(in.m, opCheckpointPod, func() error { return in.svc.CheckpointPod(ctx, req) })
}

func (in *instrumentedRuntimeService) RestorePod(ctx context.Context, req *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	return observe(in.m, opRestorePod, func() (*runtimeapi.RestorePodResponse, error) { return in.svc.RestorePod(ctx, req) })
}

func (in *instrumentedRuntimeService) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	return observe(in.m, opCreateContainer, func() (string, error) {
		return in.svc.CreateContainer(ctx, podSandboxID, config, sandboxConfig)
	})
}

func (in *instrumentedRuntimeService) StartContainer(ctx context.Context, id string) error {
	return observeErr(in.m, opStartContainer, func() error { return in.svc.StartContainer(ctx, id) })
}

func (in *instrumentedRuntimeService) StopContainer(ctx context.Context, id string, timeout int64) error {
	return observeErr(in.m, opStopContainer, func() error { return in.svc.StopContainer(ctx, id, timeout) })
}

func (in *instrumentedRuntimeService) RemoveContainer(ctx context.Context, id string) error {
	return observeErr(in.m, opRemoveContainer, func() error { return in.svc.RemoveContainer(ctx, id) })
}

func (in *instrumentedRuntimeService) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return observe(in.m, opListContainers, func() ([]*runtimeapi.Container, error) { return in.svc.ListContainers(ctx, filter) })
}

func (in *instrumentedRuntimeService) ContainerStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	return observe(in.m, opContainerStatus, func() (*runtimeapi.ContainerStatusResponse, error) {
		return in.svc.ContainerStatus(ctx, id, verbose)
	})
}

func (in *instrumentedRuntimeService) UpdateContainerResources(ctx context.Context, id string, resources *runtimeapi.ContainerResources) error {
	return observeErr(in.m, opUpdateContainer, func() error { return in.svc.UpdateContainerResources(ctx, id, resources) })
}

func (in *instrumentedRuntimeService) ReopenContainerLog(ctx context.Context, id string) error {
	return observeErr(in.m, opReopenContainerLog, func() error { return in.svc.ReopenContainerLog(ctx, id) })
}

func (in *instrumentedRuntimeService) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	start := time.Now()
	stdout, stderr, err := in.svc.ExecSync(ctx, id, cmd, timeout)
	in.m.record(opExecSync, start, err)
	return stdout, stderr, err
}

func (in *instrumentedRuntimeService) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return observe(in.m, opExec, func() (*runtimeapi.ExecResponse, error) { return in.svc.Exec(ctx, req) })
}

func (in *instrumentedRuntimeService) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return observe(in.m, opAttach, func() (*runtimeapi.AttachResponse, error) { return in.svc.Attach(ctx, req) })
}

func (in *instrumentedRuntimeService) CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) error {
	return observeErr(in.m, opCheckpointContainer, func() error { return in.svc.CheckpointContainer(ctx, req) })
}

// GetContainerEvents is recorded when the stream ends, as upstream does.
func (in *instrumentedRuntimeService) GetContainerEvents(ctx context.Context, ch chan *runtimeapi.ContainerEventResponse, connected func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	return observeErr(in.m, opGetContainerEvents, func() error { return in.svc.GetContainerEvents(ctx, ch, connected) })
}

func (in *instrumentedRuntimeService) ContainerStats(ctx context.Context, id string) (*runtimeapi.ContainerStats, error) {
	return observe(in.m, opContainerStats, func() (*runtimeapi.ContainerStats, error) { return in.svc.ContainerStats(ctx, id) })
}

func (in *instrumentedRuntimeService) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	return observe(in.m, opListContainerStats, func() ([]*runtimeapi.ContainerStats, error) {
		return in.svc.ListContainerStats(ctx, filter)
	})
}

func (in *instrumentedRuntimeService) PodSandboxStats(ctx context.Context, id string) (*runtimeapi.PodSandboxStats, error) {
	return observe(in.m, opPodSandboxStats, func() (*runtimeapi.PodSandboxStats, error) { return in.svc.PodSandboxStats(ctx, id) })
}

func (in *instrumentedRuntimeService) ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	return observe(in.m, opListPodSandboxStats, func() ([]*runtimeapi.PodSandboxStats, error) {
		return in.svc.ListPodSandboxStats(ctx, filter)
	})
}

func (in *instrumentedRuntimeService) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	return observe(in.m, opListMetricDescriptors, func() ([]*runtimeapi.MetricDescriptor, error) {
		return in.svc.ListMetricDescriptors(ctx)
	})
}

func (in *instrumentedRuntimeService) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	return observe(in.m, opListPodSandboxMetrics, func() ([]*runtimeapi.PodSandboxMetrics, error) {
		return in.svc.ListPodSandboxMetrics(ctx)
	})
}

// instrumentedImageService records every call of the wrapped service.
type instrumentedImageService struct {
	svc internalapi.ImageManagerService
	m   *Metrics
}

// NewInstrumentedImageService wraps svc so that each call (except Close) is
// recorded in m, as NewInstrumentedRuntimeService does for the runtime.
func NewInstrumentedImageService(svc internalapi.ImageManagerService, m *Metrics) internalapi.ImageManagerService {
	return &instrumentedImageService{svc: svc, m: m}
}

func (in *instrumentedImageService) Close(ctx context.Context) error { return in.svc.Close(ctx) }

func (in *instrumentedImageService) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return observe(in.m, opListImages, func() ([]*runtimeapi.Image, error) { return in.svc.ListImages(ctx, filter) })
}

func (in *instrumentedImageService) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	return observe(in.m, opImageStatus, func() (*runtimeapi.ImageStatusResponse, error) { return in.svc.ImageStatus(ctx, image, verbose) })
}

func (in *instrumentedImageService) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	return observe(in.m, opPullImage, func() (string, error) { return in.svc.PullImage(ctx, image, auth, podSandboxConfig) })
}

func (in *instrumentedImageService) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	return observeErr(in.m, opRemoveImage, func() error { return in.svc.RemoveImage(ctx, image) })
}

// ImageFsInfo returns the wrapped service's error; upstream's wrapper drops
// it (returns nil), which hides failures from callers.
func (in *instrumentedImageService) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return observe(in.m, opImageFsInfo, func() (*runtimeapi.ImageFsInfoResponse, error) { return in.svc.ImageFsInfo(ctx) })
}
