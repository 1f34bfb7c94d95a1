package cri

import (
	"context"
	"errors"
	"fmt"
	"io"

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
// ListPodSandboxMetrics reports.
func (r *remoteRuntimeService) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	r.trace("ListMetricDescriptors", "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.ListMetricDescriptors(ctx, &runtimeapi.ListMetricDescriptorsRequest{})
	if err != nil {
		r.logger.Error(err, "ListMetricDescriptors from runtime service failed")
		return nil, err
	}
	r.trace("ListMetricDescriptors Response", "descriptors", resp.GetDescriptors())
	return resp.GetDescriptors(), nil
}

// ListPodSandboxMetrics returns the runtime's metrics for all sandboxes.
func (r *remoteRuntimeService) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	r.trace("ListPodSandboxMetrics", "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
	if err != nil {
		r.logger.Error(err, "ListPodSandboxMetrics from runtime service failed")
		return nil, err
	}
	r.trace("ListPodSandboxMetrics Response", "metrics", resp.GetPodMetrics())
	return resp.GetPodMetrics(), nil
}

// GetContainerEvents streams container events into eventsCh until the stream
// ends, ctx is done, or the runtime fails; it always returns a non-nil error
// saying which. connected, if set, is called once the stream is open. The
// stream has no deadline: it is meant to last as long as ctx.
func (r *remoteRuntimeService) GetContainerEvents(ctx context.Context, eventsCh chan *runtimeapi.ContainerEventResponse, connected func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	stream, err := r.client.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		r.logger.Error(err, "GetContainerEvents failed to get streaming client")
		return err
	}
	if connected != nil {
		connected(stream)
	}
	for {
		event, err := stream.Recv()
		if err != nil {
			return r.containerEventsEnded(err)
		}
		r.logger.V(4).Info("container event received", "event", event)
		select {
		case eventsCh <- event:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// containerEventsEnded logs why the event stream ended. A runtime without
// event support (containerd 1.6) answers Unimplemented on the first receive;
// that is made explicit so the caller knows to fall back to relisting.
func (r *remoteRuntimeService) containerEventsEnded(err error) error {
	switch {
	case errors.Is(err, io.EOF):
		r.logger.Error(err, "container events stream is closed")
		return err
	case status.Code(err) == codes.Unimplemented:
		err = fmt.Errorf("runtime does not implement CRI container events (GetContainerEvents): %w", err)
	}
	r.logger.Error(err, "failed to receive streaming container event")
	return err
}
