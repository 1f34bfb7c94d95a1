package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStats returns one container's stats. Repeated identical failures
// for one container are logged once a minute.
func (r *remoteRuntimeService) ContainerStats(ctx context.Context, containerID string) (*runtimeapi.ContainerStats, error) {
	r.trace("ContainerStats", "containerID", containerID, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: containerID})
	if err != nil {
		if r.errLogs.shouldLog(containerID, err.Error()) {
			r.logger.Error(err, "ContainerStats from runtime service failed", "containerID", containerID)
		}
		return nil, err
	}
	r.errLogs.clear(containerID)
	r.trace("ContainerStats Response", "containerID", containerID, "stats", resp.GetStats())
	return resp.GetStats(), nil
}

// ListContainerStats returns the stats of the containers that match filter.
// It sets no deadline of its own, only the caller's: collecting writable
// layer usage for every container can take longer than a normal request.
func (r *remoteRuntimeService) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	r.trace("ListContainerStats", "filter", filter)
	resp, err := r.client.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: filter})
	if err != nil {
		r.logger.Error(err, "ListContainerStats with filter from runtime service failed", "filter", filter)
		return nil, err
	}
	r.trace("ListContainerStats Response", "filter", filter, "stats", resp.GetStats())
	return resp.GetStats(), nil
}

// PodSandboxStats returns one sandbox's stats. Repeated identical failures
// for one sandbox are logged once a minute.
func (r *remoteRuntimeService) PodSandboxStats(ctx context.Context, podSandboxID string) (*runtimeapi.PodSandboxStats, error) {
	r.trace("PodSandboxStats", "podSandboxID", podSandboxID, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.PodSandboxStats(ctx, &runtimeapi.PodSandboxStatsRequest{PodSandboxId: podSandboxID})
	if err != nil {
		if r.errLogs.shouldLog(podSandboxID, err.Error()) {
			r.logger.Error(err, "PodSandboxStats from runtime service failed", "podSandboxID", podSandboxID)
		}
		return nil, err
	}
	r.errLogs.clear(podSandboxID)
	r.trace("PodSandboxStats Response", "podSandboxID", podSandboxID, "stats", resp.GetStats())
	return resp.GetStats(), nil
}

// ListPodSandboxStats returns the stats of the sandboxes that match filter.
// Unlike ListContainerStats it has the request timeout: runtimes may cache
// disk usage, as upstream notes.
func (r *remoteRuntimeService) ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	r.trace("ListPodSandboxStats", "filter", filter, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: filter})
	if err != nil {
		r.logger.Error(err, "ListPodSandboxStats with filter from runtime service failed", "filter", filter)
		return nil, err
	}
	r.trace("ListPodSandboxStats Response", "filter", filter, "stats", resp.GetStats())
	return resp.GetStats(), nil
}

// ListMetricDescriptors returns the descriptors of the metrics that
// ListPodSandboxMetrics reports; an error wrapping ErrNotSupported when the runtime
// lacks the call.
func (r *remoteRuntimeService) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	r.trace("ListMetricDescriptors", "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.ListMetricDescriptors(ctx, &runtimeapi.ListMetricDescriptorsRequest{})
	if err != nil {
		return nil, r.optionalCallFailed("ListMetricDescriptors", err)
	}
	r.trace("ListMetricDescriptors Response", "descriptors", resp.GetDescriptors())
	return resp.GetDescriptors(), nil
}

// ListPodSandboxMetrics returns the runtime's metrics for all sandboxes; an error
// wrapping ErrNotSupported when the runtime lacks the call.
func (r *remoteRuntimeService) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	r.trace("ListPodSandboxMetrics", "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil {
		return nil, r.optionalCallFailed("ListPodSandboxMetrics", err)
	}
	r.trace("ListPodSandboxMetrics Response", "metrics", resp.GetPodMetrics())
	return resp.GetPodMetrics(), nil
}

// GetContainerEvents streams container events into eventsCh until the stream
// ends, ctx is done, or the runtime fails; it always returns a non-nil error
// saying which: ctx's error once ctx is done, io.EOF (wrapped) when the runtime
// closed the stream, an error wrapping ErrNotSupported when the runtime has no
// event stream (containerd 1.6), or the gRPC error. connected, if set, is called
// once the stream is open. The stream has no deadline: it is meant to last as
// long as ctx.
//
// The end of the stream is logged at V(2) only. Its caller reconnects and owns
// the reporting: a runtime restart would otherwise log an error per attempt.
func (r *remoteRuntimeService) GetContainerEvents(ctx context.Context, eventsCh chan *runtimeapi.ContainerEventResponse, connected func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	r.trace("GetContainerEvents")
	stream, err := r.client.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		return r.containerEventsEnded(ctx, "GetContainerEvents failed to get streaming client", err)
	}
	if connected != nil {
		connected(stream)
	}
	for {
		event, err := stream.Recv()
		if err != nil {
			return r.containerEventsEnded(ctx, "Container event stream ended", err)
		}
		r.logger.V(4).Info("Container event received", "containerID", event.GetContainerId(), "type", event.GetContainerEventType())
		select {
		case eventsCh <- event:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// containerEventsEnded words why the event stream ended.
func (r *remoteRuntimeService) containerEventsEnded(ctx context.Context, msg string, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err() // the caller stopped watching
	case status.Code(err) == codes.DeadlineExceeded && deadlineWithin(ctx, time.Second):
		// The caller's deadline, which the runtime enforces too (sent as grpc-timeout,
		// truncated to its unit): it can end the stream a moment before ctx is done.
		return context.DeadlineExceeded
	case errors.Is(err, io.EOF):
		err = fmt.Errorf("container event stream closed by the runtime: %w", err)
	default:
		err = notSupported("GetContainerEvents", err)
	}
	r.logger.V(2).Info(msg, "err", err)
	return err
}

// deadlineWithin reports whether ctx has a deadline less than d from now.
func deadlineWithin(ctx context.Context, d time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return ok && time.Until(deadline) < d
}
