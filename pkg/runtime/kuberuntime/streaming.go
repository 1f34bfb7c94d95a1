package kuberuntime

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/logs"
)

// GetExec returns the runtime's streaming URL for an exec session.
func (m *Manager) GetExec(ctx context.Context, id container.ContainerID, cmd []string, stdin, stdout, stderr, tty bool) (*url.URL, error) {
	resp, err := m.runtime.Exec(ctx, &runtimeapi.ExecRequest{
		ContainerId: id.ID, Cmd: cmd, Tty: tty, Stdin: stdin, Stdout: stdout, Stderr: stderr,
	})
	if err != nil {
		return nil, err
	}
	return url.Parse(resp.Url)
}

// GetAttach returns the runtime's streaming URL for attaching to a container.
func (m *Manager) GetAttach(ctx context.Context, id container.ContainerID, stdin, stdout, stderr, tty bool) (*url.URL, error) {
	resp, err := m.runtime.Attach(ctx, &runtimeapi.AttachRequest{
		ContainerId: id.ID, Stdin: stdin, Stdout: stdout, Stderr: stderr, Tty: tty,
	})
	if err != nil {
		return nil, err
	}
	return url.Parse(resp.Url)
}

// GetPortForward returns the runtime's streaming URL for forwarding ports of the pod's
// newest sandbox.
func (m *Manager) GetPortForward(ctx context.Context, podName, podNamespace string, podUID types.UID, ports []int32) (*url.URL, error) {
	ids, err := m.sandboxIDsOfPod(ctx, podUID)
	if err != nil {
		return nil, fmt.Errorf("failed to find sandboxID for pod %s: %w", podDesc(podName, podNamespace, podUID), err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("failed to find sandboxID for pod %s", podDesc(podName, podNamespace, podUID))
	}
	resp, err := m.runtime.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: ids[0], Port: ports})
	if err != nil {
		return nil, err
	}
	return url.Parse(resp.Url)
}

// podDesc is upstream's format.PodDesc: "name_namespace(uid)".
func podDesc(name, namespace string, uid types.UID) string {
	return fmt.Sprintf("%s_%s(%s)", name, namespace, uid)
}

// RunInContainer runs cmd in the container and returns stdout followed by stderr; a
// non-zero exit is returned as the error (a cri.ExecExitError from the CRI client).
func (m *Manager) RunInContainer(ctx context.Context, id container.ContainerID, cmd []string, timeout time.Duration) ([]byte, error) {
	stdout, stderr, err := m.runtime.ExecSync(ctx, id.ID, cmd, timeout)
	// Not interleaved in order, but enough for hook messages and logs.
	return append(stdout, stderr...), err
}

// GetContainerLogs writes the container's log, as selected by opts, to stdout and stderr.
func (m *Manager) GetContainerLogs(ctx context.Context, pod *v1.Pod, id container.ContainerID, opts *v1.PodLogOptions, stdout, stderr io.Writer) error {
	resp, err := m.runtime.ContainerStatus(ctx, id.ID, false)
	if err != nil {
		klog.V(4).InfoS("Failed to get container status", "containerID", id.String(), "err", err)
		return fmt.Errorf("unable to retrieve container logs for %v", id.String())
	}
	status := resp.GetStatus()
	if status == nil {
		return cri.ErrContainerStatusNil
	}
	if opts == nil {
		opts = &v1.PodLogOptions{}
	}
	return logs.ReadLogs(ctx, status.GetLogPath(), id.ID, logs.NewLogOptions(opts, m.clock.Now()), m.runtime, stdout, stderr)
}
