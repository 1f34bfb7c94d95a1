package main

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// victims hands out pods whose container has never been restarted: a container's
// second restart waits for the crash back-off (10 s), so each sample kills another pod.
type victims struct {
	used map[string]bool // pod names
}

func (v *victims) next(ctx context.Context, n *node) (*runtimeapi.Container, error) {
	cs, err := n.running(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		pod := c.Labels[criconfig.PodNameLabel]
		if c.Metadata.Attempt == 0 && !v.used[pod] {
			v.used[pod] = true
			return c, nil
		}
	}
	return nil, fmt.Errorf("no pod left whose container was never restarted (%d running)", len(cs))
}

// killAndTimeRestart kills the container's process with SIGKILL from the host, waits for
// nodelet to run its replacement and returns the time from the old container's exit to
// the new one's start, as the runtime stamped them.
func (n *node) killAndTimeRestart(ctx context.Context, c *runtimeapi.Container) (time.Duration, error) {
	pid, err := n.containerPID(ctx, c.Id)
	if err != nil {
		return 0, err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, err
	}
	pod := c.Labels[criconfig.PodNameLabel]
	next, err := n.waitReplaced(ctx, pod, c.Id, 15*time.Second)
	if err != nil {
		return 0, err
	}
	old, err := n.rs.ContainerStatus(ctx, c.Id, false)
	if err != nil {
		return 0, err
	}
	if old.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		return 0, fmt.Errorf("the killed container of %s is %s", pod, old.Status.State)
	}
	cur, err := n.rs.ContainerStatus(ctx, next, false)
	if err != nil {
		return 0, err
	}
	return time.Duration(cur.Status.StartedAt - old.Status.FinishedAt), nil
}

// containerPID asks the runtime for the process ID of a running container.
func (n *node) containerPID(ctx context.Context, id string) (int, error) {
	resp, err := n.rs.ContainerStatus(ctx, id, true)
	if err != nil {
		return 0, err
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil || info.Pid == 0 {
		return 0, fmt.Errorf("no pid in the verbose status of %s: %v", id, err)
	}
	return info.Pid, nil
}

// waitReplaced polls (every 10 ms) until another container than old runs in the pod.
func (n *node) waitReplaced(ctx context.Context, pod, old string, timeout time.Duration) (string, error) {
	filter := &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{criconfig.PodNameLabel: pod},
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		cs, err := n.rs.ListContainers(ctx, filter)
		if err != nil {
			return "", err
		}
		if len(cs) == 1 && cs[0].Id != old {
			return cs[0].Id, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("the killed container of %s not replaced after %v; see %s", pod, timeout, n.logPath)
}
