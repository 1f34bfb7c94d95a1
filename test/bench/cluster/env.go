package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// rig is one containerd started with hack/runtime.sh under its own state and run
// directories, bridge and pod subnet: each kubelet gets one, since a kubelet removes the
// pods it does not own.
type rig struct {
	stateDir, runDir, bridge, podCIDR string
	// flavour is hack/runtime.sh's NODELET_RUNTIME: containerd (Debian's 1.6) or
	// containerd2 (2.x, which streams container events); empty is containerd.
	flavour  string
	endpoint string
	// startedHere: the bench brought it up, so it takes it down again. A rig that was
	// already running (say, left by an interrupted run) is left as found.
	startedHere bool
}

func (r *rig) env() []string {
	flavour := r.flavour
	if flavour == "" {
		flavour = "containerd"
	}
	return append(os.Environ(), "NODELET_STATE_DIR="+r.stateDir, "NODELET_RUN_DIR="+r.runDir,
		"NODELET_BRIDGE="+r.bridge, "NODELET_POD_CIDR="+r.podCIDR, "NODELET_RUNTIME="+flavour)
}

// up starts the rig (hack/runtime.sh up) and reads its CRI endpoint.
func (r *rig) up(ctx context.Context, repo string) error {
	status := exec.CommandContext(ctx, filepath.Join(repo, "hack", "runtime.sh"), "status")
	status.Env = r.env()
	r.startedHere = status.Run() != nil
	out, err := runScript(ctx, repo, r.env(), "runtime.sh", "up")
	if err != nil {
		return err
	}
	ep, ok := strings.CutPrefix(out, "CONTAINER_RUNTIME_ENDPOINT=")
	if !ok {
		return fmt.Errorf("hack/runtime.sh up printed %q, not a CONTAINER_RUNTIME_ENDPOINT line", out)
	}
	r.endpoint = ep
	return nil
}

// pid is the rig's containerd process (hack/runtime.sh writes it to RUN_DIR/containerd.pid).
func (r *rig) pid() (int, error) {
	data, err := os.ReadFile(filepath.Join(r.runDir, "containerd.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// down stops the rig and deletes its state if this run started it.
func (r *rig) down(repo string) error {
	if !r.startedHere {
		return nil
	}
	_, err := runScript(context.Background(), repo, r.env(), "runtime.sh", "down")
	return err
}

// runScript runs hack/NAME ARGS with env, its stderr passed through, and returns its
// stdout trimmed (the scripts print only their result line there).
func runScript(ctx context.Context, repo string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "hack", name), args...)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/%s %s: %w", name, strings.Join(args, " "), err)
	}
	return string(bytes.TrimSpace(out)), nil
}

// controlPlaneUp starts the shared control plane if it is not up and returns the admin
// kubeconfig path. The bench leaves it up.
func controlPlaneUp(ctx context.Context, repo string) (string, error) {
	out, err := runScript(ctx, repo, os.Environ(), "controlplane.sh", "up")
	if err != nil {
		return "", err
	}
	path, ok := strings.CutPrefix(out, "KUBECONFIG=")
	if !ok {
		return "", fmt.Errorf("hack/controlplane.sh up printed %q, not a KUBECONFIG line", out)
	}
	return path, nil
}

// ensureUpstreamKubelet builds upstream's kubelet into the cache when it is missing
// (hack/controlplane.sh build; 15-25 minutes cold on 2 cores).
func ensureUpstreamKubelet(ctx context.Context, repo, bin string) error {
	if _, err := os.Stat(bin); err == nil {
		return nil
	}
	fmt.Fprintf(os.Stderr, "bench: %s missing: building it (hack/controlplane.sh build)\n", bin)
	if _, err := runScript(ctx, repo, os.Environ(), "controlplane.sh", "build"); err != nil {
		return err
	}
	_, err := os.Stat(bin)
	return err
}
