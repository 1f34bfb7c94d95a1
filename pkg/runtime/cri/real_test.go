//go:build e2e

// Run against a real runtime with
//
//	CONTAINER_RUNTIME_ENDPOINT=unix:///run/nodelet-dev2/containerd.sock go test -tags e2e -run Real -v ./pkg/runtime/cri/
package cri

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerd 1.6 lacks RuntimeConfig and the event stream (ErrNotSupported); 2.x has
// both.
func TestRealOptionalCalls(t *testing.T) {
	ep := os.Getenv("CONTAINER_RUNTIME_ENDPOINT")
	if ep == "" {
		t.Skip("CONTAINER_RUNTIME_ENDPOINT not set")
	}
	ctx := context.Background()
	rs, err := NewRemoteRuntimeService(ctx, ep, 10*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	v, err := rs.Version(ctx, "0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	old := strings.HasPrefix(v.RuntimeVersion, "1.")
	driver, err := RuntimeCgroupDriver(ctx, rs)
	t.Logf("%s %s: cgroup driver %q, %v", v.RuntimeName, v.RuntimeVersion, driver, err)
	if old != IsNotSupported(err) {
		t.Errorf("RuntimeConfig on %s: %v", v.RuntimeVersion, err)
	}
	if !old && driver != CgroupDriverCgroupfs && driver != CgroupDriverSystemd {
		t.Errorf("no cgroup driver from %s", v.RuntimeVersion)
	}

	watch, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err = rs.GetContainerEvents(watch, make(chan *runtimeapi.ContainerEventResponse, 100), nil)
	t.Logf("GetContainerEvents: %v", err)
	if old && !IsNotSupported(err) {
		t.Errorf("containerd %s: event stream ended with %v, want ErrNotSupported", v.RuntimeVersion, err)
	}
	if !old && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("containerd %s: event stream ended with %v before the watch ended", v.RuntimeVersion, err)
	}
}
