package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RunPodSandbox creates and starts a pod sandbox and returns its ID. It gets
// twice the request timeout, as upstream does: it includes network setup.
func (r *remoteRuntimeService) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	timeout := 2 * r.timeout
	r.trace("RunPodSandbox", "config", config, "runtimeHandler", runtimeHandler, "timeout", timeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := r.client.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: config, RuntimeHandler: runtimeHandler})
	if err != nil {
		r.logger.Error(err, "RunPodSandbox from runtime service failed")
		return "", err
	}
	if resp.GetPodSandboxId() == "" {
		md := config.GetMetadata()
		err := invalidResponse("RunPodSandbox", ErrMissingPodSandboxID, "for sandbox %s/%s", md.GetNamespace(), md.GetName())
		r.logger.Error(err, "RunPodSandbox failed")
		return "", err
	}
	r.trace("RunPodSandbox Response", "podSandboxID", resp.GetPodSandboxId())
	return resp.GetPodSandboxId(), nil
}

// StopPodSandbox stops the sandbox, force-stopping its containers.
func (r *remoteRuntimeService) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	r.trace("StopPodSandbox", "podSandboxID", podSandboxID, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if _, err := r.client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podSandboxID}); err != nil {
		r.logger.Error(err, "StopPodSandbox from runtime service failed", "podSandboxID", podSandboxID)
		return err
	}
	r.trace("StopPodSandbox Response", "podSandboxID", podSandboxID)
	return nil
}

// RemovePodSandbox removes the sandbox and any containers left in it.
func (r *remoteRuntimeService) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	r.trace("RemovePodSandbox", "podSandboxID", podSandboxID, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if _, err := r.client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podSandboxID}); err != nil {
		r.logger.Error(err, "RemovePodSandbox from runtime service failed", "podSandboxID", podSandboxID)
		return err
	}
	r.trace("RemovePodSandbox Response", "podSandboxID", podSandboxID)
	return nil
}

// PodSandboxStatus returns the sandbox's status. Like upstream it does not
// log a failed call: NotFound is routine while pods are torn down, and the
// callers log what matters.
func (r *remoteRuntimeService) PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	r.trace("PodSandboxStatus", "podSandboxID", podSandboxID, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podSandboxID, Verbose: verbose})
	if err != nil {
		return nil, err
	}
	r.trace("PodSandboxStatus Response", "podSandboxID", podSandboxID, "status", resp.GetStatus())
	if err := checkPodSandboxStatus(podSandboxID, resp.GetStatus()); err != nil {
		r.logger.Error(err, "verify PodSandboxStatus failed", "podSandboxID", podSandboxID)
		return nil, err
	}
	return resp, nil
}

// ListPodSandbox returns the sandboxes that match filter.
func (r *remoteRuntimeService) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	r.trace("ListPodSandbox", "filter", filter, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: filter})
	if err != nil {
		r.logger.Error(err, "ListPodSandbox with filter from runtime service failed", "filter", filter)
		return nil, err
	}
	r.trace("ListPodSandbox Response", "filter", filter, "items", resp.GetItems())
	return resp.GetItems(), nil
}

// PortForward returns the streaming URL for forwarding ports into a sandbox.
func (r *remoteRuntimeService) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	r.trace("PortForward", "podSandboxID", req.GetPodSandboxId(), "port", req.GetPort(), "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.PortForward(ctx, req)
	if err != nil {
		r.logger.Error(err, "PortForward from runtime service failed", "podSandboxID", req.GetPodSandboxId())
		return nil, err
	}
	r.trace("PortForward Response", "podSandboxID", req.GetPodSandboxId())
	if err := checkURL("PortForward", resp.GetUrl()); err != nil {
		r.logger.Error(err, "PortForward failed")
		return nil, err
	}
	return resp, nil
}

// UpdatePodSandboxResources tells the runtime about new pod-level resources
// after the kubelet has resized the pod cgroup.
func (r *remoteRuntimeService) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	r.trace("UpdatePodSandboxResources", "podSandboxID", req.GetPodSandboxId(), "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.UpdatePodSandboxResources(ctx, req)
	if err != nil {
		r.logger.Error(err, "UpdatePodSandboxResources from runtime service failed", "podSandboxID", req.GetPodSandboxId())
		return nil, err
	}
	r.trace("UpdatePodSandboxResources Response", "podSandboxID", req.GetPodSandboxId())
	return resp, nil
}

// CheckpointPod checkpoints a pod's containers into options.OutputPath.
// The caller's deadline is used when it has one (the CRI asks the caller to
// choose it); otherwise the request timeout applies.
func (r *remoteRuntimeService) CheckpointPod(ctx context.Context, options *runtimeapi.CheckpointPodRequest) error {
	r.trace("CheckpointPod", "options", options)
	ctx, cancel := withDefaultTimeout(ctx, r.timeout)
	defer cancel()
	if _, err := r.client.CheckpointPod(ctx, options); err != nil {
		r.logger.Error(err, "CheckpointPod from runtime service failed", "podSandboxID", options.GetPodSandboxId())
		return err
	}
	r.trace("CheckpointPod Response", "podSandboxID", options.GetPodSandboxId())
	return nil
}

// RestorePod creates a sandbox and its containers from a pod checkpoint.
// Deadline as for CheckpointPod.
func (r *remoteRuntimeService) RestorePod(ctx context.Context, options *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	r.trace("RestorePod", "checkpointPath", options.GetCheckpointPath(), "runtimeHandler", options.GetRuntimeHandler())
	ctx, cancel := withDefaultTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.RestorePod(ctx, options)
	if err != nil {
		r.logger.Error(err, "RestorePod from runtime service failed", "checkpointPath", options.GetCheckpointPath())
		return nil, err
	}
	if err := checkRestoredPod(resp); err != nil {
		r.logger.Error(err, "RestorePod failed", "checkpointPath", options.GetCheckpointPath())
		return nil, err
	}
	r.trace("RestorePod Response", "podSandboxID", resp.GetPodSandboxId())
	return resp, nil
}

// checkRestoredPod requires the IDs the caller needs to start the restored
// containers.
func checkRestoredPod(resp *runtimeapi.RestorePodResponse) error {
	if resp.GetPodSandboxId() == "" {
		return invalidResponse("RestorePod", ErrMissingPodSandboxID, "")
	}
	for _, c := range resp.GetRestoredContainers() {
		if c.GetContainerId() == "" {
			return invalidResponse("RestorePod", ErrMissingContainerID, "for container %q", c.GetName())
		}
	}
	return nil
}
