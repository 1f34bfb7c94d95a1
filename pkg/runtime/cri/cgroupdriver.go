package cri

import (
	"context"
	"errors"
	"fmt"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// The cgroup drivers, as KubeletConfiguration's cgroupDriver names them.
const (
	CgroupDriverSystemd  = "systemd"
	CgroupDriverCgroupfs = "cgroupfs"
)

// Upstream's patience with a runtime that is still starting when asked for its config.
const (
	runtimeConfigAttempts   = 3
	runtimeConfigRetryDelay = 2 * time.Second
)

// ErrNoCgroupDriver is returned by RuntimeCgroupDriver when the runtime answered
// RuntimeConfig without a Linux config: it has no opinion, the configured driver stands.
var ErrNoCgroupDriver = errors.New("container runtime reported no cgroup driver")

// RuntimeCgroupDriver asks the runtime which cgroup driver it uses ("systemd" or
// "cgroupfs"), as upstream's kubelet does at start-up. A runtime without RuntimeConfig
// (containerd 1.6) gets an error wrapping ErrNotSupported at once; other failures are
// retried twice, 2 s apart (the runtime may still be starting).
func RuntimeCgroupDriver(ctx context.Context, rs internalapi.RuntimeService) (string, error) {
	return runtimeCgroupDriver(ctx, rs, runtimeConfigRetryDelay)
}

func runtimeCgroupDriver(ctx context.Context, rs internalapi.RuntimeService, retryDelay time.Duration) (string, error) {
	var resp *runtimeapi.RuntimeConfigResponse
	var err error
	for attempt := 1; ; attempt++ {
		resp, err = rs.RuntimeConfig(ctx)
		if err == nil || IsNotSupported(err) || attempt == runtimeConfigAttempts {
			break
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(retryDelay):
		}
	}
	if err != nil {
		return "", err
	}
	linux := resp.GetLinux()
	if linux == nil {
		// GetCgroupDriver of a nil config would say systemd, which nobody said.
		return "", ErrNoCgroupDriver
	}
	switch d := linux.GetCgroupDriver(); d {
	case runtimeapi.CgroupDriver_SYSTEMD:
		return CgroupDriverSystemd, nil
	case runtimeapi.CgroupDriver_CGROUPFS:
		return CgroupDriverCgroupfs, nil
	default:
		return "", fmt.Errorf("runtime returned an unknown cgroup driver %d", d)
	}
}

// ResolveCgroupDriver returns the cgroup driver nodelet should use: the runtime's when
// it reports one (fromRuntime), else configured. It logs upstream's lines: the fallback when the
// runtime lacks RuntimeConfig, the driver taken from the runtime, and (nodelet's own)
// that the configuration said otherwise. Other errors are returned: upstream's kubelet
// refuses to start when a runtime that has RuntimeConfig keeps failing it.
func ResolveCgroupDriver(ctx context.Context, rs internalapi.RuntimeService, configured string) (driver string, fromRuntime bool, err error) {
	driver, err = RuntimeCgroupDriver(ctx, rs)
	switch {
	case IsNotSupported(err):
		klog.InfoS("CRI implementation should be updated to support RuntimeConfig. Falling back to using cgroupDriver from kubelet config.")
		return configured, false, nil
	case errors.Is(err, ErrNoCgroupDriver):
		return configured, false, nil
	case err != nil:
		return "", false, err
	}
	klog.InfoS("Using cgroup driver setting received from the CRI runtime", "cgroupDriver", driver)
	if configured != "" && configured != driver {
		klog.InfoS("The cgroupDriver in the kubelet configuration differs from the container runtime's; using the runtime's",
			"configured", configured, "runtime", driver)
	}
	return driver, true, nil
}
