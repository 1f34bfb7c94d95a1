package cri

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CreateContainer creates a container in the sandbox and returns its ID.
func (r *remoteRuntimeService) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	r.trace("CreateContainer", "podSandboxID", podSandboxID, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: podSandboxID, Config: config, SandboxConfig: sandboxConfig,
	})
	if err != nil {
		r.logger.Error(err, "CreateContainer in sandbox from runtime service failed", "podSandboxID", podSandboxID)
		return "", err
	}
	r.trace("CreateContainer Response", "podSandboxID", podSandboxID, "containerID", resp.GetContainerId())
	if resp.GetContainerId() == "" {
		err := invalidResponse("CreateContainer", ErrMissingContainerID, "for container %q", config.GetMetadata().GetName())
		r.logger.Error(err, "CreateContainer failed")
		return "", err
	}
	return resp.GetContainerId(), nil
}

// StartContainer starts a created container.
func (r *remoteRuntimeService) StartContainer(ctx context.Context, containerID string) error {
	r.trace("StartContainer", "containerID", containerID, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if _, err := r.client.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: containerID}); err != nil {
		r.logger.Error(err, "StartContainer from runtime service failed", "containerID", containerID)
		return err
	}
	r.trace("StartContainer Response", "containerID", containerID)
	return nil
}

// StopContainer stops a container, giving it gracePeriod seconds before
// SIGKILL. The call's deadline is the request timeout plus the grace period,
// leaving time for the kill and the round trip after the grace period ends.
func (r *remoteRuntimeService) StopContainer(ctx context.Context, containerID string, gracePeriod int64) error {
	timeout := r.timeout + time.Duration(gracePeriod)*time.Second
	r.trace("StopContainer", "containerID", containerID, "gracePeriod", gracePeriod, "timeout", timeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r.errLogs.clear(containerID)
	if _, err := r.client.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: containerID, Timeout: gracePeriod}); err != nil {
		r.logger.Error(err, "StopContainer from runtime service failed", "containerID", containerID)
		return err
	}
	r.trace("StopContainer Response", "containerID", containerID)
	return nil
}

// RemoveContainer removes a container, force-stopping it if it runs.
func (r *remoteRuntimeService) RemoveContainer(ctx context.Context, containerID string) error {
	r.trace("RemoveContainer", "containerID", containerID, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	r.errLogs.clear(containerID)
	if _, err := r.client.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: containerID}); err != nil {
		r.logger.Error(err, "RemoveContainer from runtime service failed", "containerID", containerID)
		return err
	}
	r.trace("RemoveContainer Response", "containerID", containerID)
	return nil
}

// ListContainers returns the containers that match filter.
func (r *remoteRuntimeService) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	r.trace("ListContainers", "filter", filter, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: filter})
	if err != nil {
		r.logger.Error(err, "ListContainers with filter from runtime service failed", "filter", filter)
		return nil, err
	}
	r.trace("ListContainers Response", "filter", filter, "containers", resp.GetContainers())
	return resp.GetContainers(), nil
}

// ContainerStatus returns a container's status. Repeated identical failures
// for one container are logged once a minute.
func (r *remoteRuntimeService) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	r.trace("ContainerStatus", "containerID", containerID, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID, Verbose: verbose})
	if err != nil {
		if r.errLogs.shouldLog(containerID, err.Error()) {
			r.logger.Error(err, "ContainerStatus from runtime service failed", "containerID", containerID)
		}
		return nil, err
	}
	r.errLogs.clear(containerID)
	r.trace("ContainerStatus Response", "containerID", containerID, "status", resp.GetStatus())
	if err := checkContainerStatus(containerID, resp.GetStatus()); err != nil {
		r.logger.Error(err, "verify ContainerStatus failed", "containerID", containerID)
		return nil, err
	}
	return resp, nil
}

// UpdateContainerResources applies new resource limits to a container.
func (r *remoteRuntimeService) UpdateContainerResources(ctx context.Context, containerID string, resources *runtimeapi.ContainerResources) error {
	r.trace("UpdateContainerResources", "containerID", containerID, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if _, err := r.client.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: containerID, Linux: resources.GetLinux(), Windows: resources.GetWindows(),
	}); err != nil {
		r.logger.Error(err, "UpdateContainerResources from runtime service failed", "containerID", containerID)
		return err
	}
	r.trace("UpdateContainerResources Response", "containerID", containerID)
	return nil
}

// ReopenContainerLog asks the runtime to reopen a container's log file after
// the kubelet rotated it.
func (r *remoteRuntimeService) ReopenContainerLog(ctx context.Context, containerID string) error {
	r.trace("ReopenContainerLog", "containerID", containerID, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if _, err := r.client.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: containerID}); err != nil {
		r.logger.Error(err, "ReopenContainerLog from runtime service failed", "containerID", containerID)
		return err
	}
	r.trace("ReopenContainerLog Response", "containerID", containerID)
	return nil
}

// ExecSync runs cmd in the container and returns its output. A non-zero exit
// is an *ExecExitError; a runtime-side timeout wraps ErrCommandTimedOut.
// The call's deadline is the command timeout plus the request timeout, so the
// runtime has time to clean up after killing the command; a zero command
// timeout means no limit, so the call then has no deadline of its own.
func (r *remoteRuntimeService) ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	r.trace("ExecSync", "containerID", containerID, "cmd", cmd, "timeout", timeout)
	if timeout != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout+timeout)
		defer cancel()
	}
	resp, err := r.client.ExecSync(ctx, &runtimeapi.ExecSyncRequest{
		ContainerId: containerID, Cmd: cmd, Timeout: int64(timeout.Seconds()),
	})
	if err != nil {
		r.logger.Error(err, "ExecSync cmd from runtime service failed", "containerID", containerID, "cmd", cmd)
		if status.Code(err) == codes.DeadlineExceeded {
			err = fmt.Errorf("%w: %q timed out after %s: %w", ErrCommandTimedOut, strings.Join(cmd, " "), timeout, err)
		}
		return nil, nil, err
	}
	r.trace("ExecSync Response", "containerID", containerID, "exitCode", resp.GetExitCode())
	if resp.GetExitCode() != 0 {
		return resp.GetStdout(), resp.GetStderr(), &ExecExitError{Cmd: cmd, Code: int(resp.GetExitCode()), Stderr: resp.GetStderr()}
	}
	return resp.GetStdout(), resp.GetStderr(), nil
}

// Exec returns the streaming URL for an interactive exec.
func (r *remoteRuntimeService) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	r.trace("Exec", "containerID", req.GetContainerId(), "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.Exec(ctx, req)
	if err != nil {
		r.logger.Error(err, "Exec cmd from runtime service failed", "containerID", req.GetContainerId(), "cmd", req.GetCmd())
		return nil, err
	}
	r.trace("Exec Response", "containerID", req.GetContainerId())
	if err := checkURL("Exec", resp.GetUrl()); err != nil {
		r.logger.Error(err, "Exec failed")
		return nil, err
	}
	return resp, nil
}

// Attach returns the streaming URL for attaching to a running container.
func (r *remoteRuntimeService) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	r.trace("Attach", "containerID", req.GetContainerId(), "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.Attach(ctx, req)
	if err != nil {
		r.logger.Error(err, "Attach container from runtime service failed", "containerID", req.GetContainerId())
		return nil, err
	}
	r.trace("Attach Response", "containerID", req.GetContainerId())
	if err := checkURL("Attach", resp.GetUrl()); err != nil {
		r.logger.Error(err, "Attach failed")
		return nil, err
	}
	return resp, nil
}

// CheckpointContainer checkpoints a container. Like upstream, a requested
// timeout longer than the request timeout is honoured; a shorter or zero one
// is raised to the request timeout (sent to the runtime in seconds).
func (r *remoteRuntimeService) CheckpointContainer(ctx context.Context, options *runtimeapi.CheckpointContainerRequest) error {
	r.trace("CheckpointContainer", "options", options)
	if options == nil {
		return errors.New("CheckpointContainer requires non-nil CheckpointContainerRequest")
	}
	if options.GetTimeout() < 0 {
		return errors.New("CheckpointContainer requires the timeout value to be >= 0")
	}
	req, timeout := r.checkpointTimeout(options)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := r.client.CheckpointContainer(ctx, req); err != nil {
		r.logger.Error(err, "CheckpointContainer from runtime service failed", "containerID", req.GetContainerId())
		return err
	}
	r.trace("CheckpointContainer Response", "containerID", req.GetContainerId())
	return nil
}

// checkpointTimeout returns the request to send (a copy: the caller's is not
// changed) and the call's deadline.
func (r *remoteRuntimeService) checkpointTimeout(options *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerRequest, time.Duration) {
	req := proto.Clone(options).(*runtimeapi.CheckpointContainerRequest)
	if requested := time.Duration(req.GetTimeout()) * time.Second; requested > r.timeout {
		return req, requested
	}
	req.Timeout = int64(r.timeout / time.Second)
	return req, r.timeout
}
