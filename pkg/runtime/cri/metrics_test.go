package cri

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
)

func newTestMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// TestMetricsOverGRPC checks the counters through the real clients built
// with WithMetrics.
func TestMetricsOverGRPC(t *testing.T) {
	m, reg := newTestMetrics(t)
	f := newFakeCRI()
	f.set("RunPodSandbox", &runtimeapi.RunPodSandboxResponse{PodSandboxId: "sb"})
	f.set("ListImages", &runtimeapi.ListImagesResponse{})
	rs, is := newTestClients(t, f, WithMetrics(m))
	ctx := context.Background()

	if _, err := rs.Version(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Version(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	if err := rs.StartContainer(ctx, "c1"); err == nil { // the fake answers Unimplemented
		t.Fatal("want an error")
	}
	if _, err := rs.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{}, "runc"); err != nil {
		t.Fatal(err)
	}
	if _, err := is.ListImages(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := is.PullImage(ctx, &runtimeapi.ImageSpec{Image: "x"}, nil, nil); err == nil {
		t.Fatal("want an error")
	}

	// The exposed names are upstream's. Compared first: reading a counter
	// below with WithLabelValues creates its series.
	const wantErrors = `
# HELP kubelet_runtime_operations_errors_total [ALPHA] Cumulative number of runtime operation errors by operation type.
# TYPE kubelet_runtime_operations_errors_total counter
kubelet_runtime_operations_errors_total{operation_type="pull_image"} 1
kubelet_runtime_operations_errors_total{operation_type="start_container"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantErrors), "kubelet_runtime_operations_errors_total"); err != nil {
		t.Error(err)
	}
	for op, want := range map[string][2]float64{ // operation -> {total, errors}
		"version": {2, 0}, "start_container": {1, 1}, "run_podsandbox": {1, 0},
		"list_images": {1, 0}, "pull_image": {1, 1},
	} {
		if got := testutil.ToFloat64(m.operations.WithLabelValues(op)); got != want[0] {
			t.Errorf("%s total = %v, want %v", op, got, want[0])
		}
		if got := testutil.ToFloat64(m.operationErrors.WithLabelValues(op)); got != want[1] {
			t.Errorf("%s errors = %v, want %v", op, got, want[1])
		}
	}
	if got := testutil.ToFloat64(m.runPodSandboxErrors.WithLabelValues("runc")); got != 0 {
		t.Errorf("run_podsandbox errors for runc = %v", got)
	}

	n, err := testutil.GatherAndCount(reg, "kubelet_runtime_operations_total", "kubelet_runtime_operations_duration_seconds", "kubelet_run_podsandbox_duration_seconds")
	if err != nil || n != 5+5+1 {
		t.Errorf("series count %d, %v; want 11", n, err)
	}
}

func TestNewMetricsTwiceOnOneRegistry(t *testing.T) {
	m1, reg := newTestMetrics(t)
	m2, err := NewMetrics(reg)
	if err != nil {
		t.Fatalf("second NewMetrics: %v", err)
	}
	m1.record(opVersion, time.Now(), nil)
	m2.record(opVersion, time.Now(), errors.New("x"))
	if got := testutil.ToFloat64(m1.operations.WithLabelValues(opVersion)); got != 2 {
		t.Errorf("shared counter = %v, want 2", got)
	}
}

// TestInstrumentedRuntimeServiceLabels drives every RuntimeService method of
// the wrapper around cri-api's fake, with an injected error, and checks that
// exactly the right operation_type was counted.
func TestInstrumentedRuntimeServiceLabels(t *testing.T) {
	ctx := context.Background()
	type call func(internalapi.RuntimeService) error
	ignore2 := func(_ any, err error) error { return err }
	tests := []struct {
		method, op string
		call       call
	}{
		{"Version", "version", func(s internalapi.RuntimeService) error { return ignore2(s.Version(ctx, "v1")) }},
		{"Status", "status", func(s internalapi.RuntimeService) error { return ignore2(s.Status(ctx, false)) }},
		{"RuntimeConfig", "runtime_config", func(s internalapi.RuntimeService) error { return ignore2(s.RuntimeConfig(ctx)) }},
		{"UpdateRuntimeConfig", "update_runtime_config", func(s internalapi.RuntimeService) error {
			return s.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{})
		}},
		{"RunPodSandbox", "run_podsandbox", func(s internalapi.RuntimeService) error {
			return ignore2(s.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{}}, "h"))
		}},
		{"StopPodSandbox", "stop_podsandbox", func(s internalapi.RuntimeService) error { return s.StopPodSandbox(ctx, "sb") }},
		{"RemovePodSandbox", "remove_podsandbox", func(s internalapi.RuntimeService) error { return s.RemovePodSandbox(ctx, "sb") }},
		{"PodSandboxStatus", "podsandbox_status", func(s internalapi.RuntimeService) error { return ignore2(s.PodSandboxStatus(ctx, "sb", false)) }},
		{"ListPodSandbox", "list_podsandbox", func(s internalapi.RuntimeService) error { return ignore2(s.ListPodSandbox(ctx, nil)) }},
		{"PortForward", "port_forward", func(s internalapi.RuntimeService) error {
			return ignore2(s.PortForward(ctx, &runtimeapi.PortForwardRequest{}))
		}},
		{"UpdatePodSandboxResources", "update_podsandbox_resources", func(s internalapi.RuntimeService) error {
			return ignore2(s.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{}))
		}},
		{"CheckpointPod", "checkpoint_pod", func(s internalapi.RuntimeService) error {
			return s.CheckpointPod(ctx, &runtimeapi.CheckpointPodRequest{})
		}},
		{"RestorePod", "restore_pod", func(s internalapi.RuntimeService) error {
			return ignore2(s.RestorePod(ctx, &runtimeapi.RestorePodRequest{}))
		}},
		{"CreateContainer", "create_container", func(s internalapi.RuntimeService) error {
			return ignore2(s.CreateContainer(ctx, "sb", &runtimeapi.ContainerConfig{}, nil))
		}},
		{"StartContainer", "start_container", func(s internalapi.RuntimeService) error { return s.StartContainer(ctx, "c") }},
		{"StopContainer", "stop_container", func(s internalapi.RuntimeService) error { return s.StopContainer(ctx, "c", 1) }},
		{"RemoveContainer", "remove_container", func(s internalapi.RuntimeService) error { return s.RemoveContainer(ctx, "c") }},
		{"ListContainers", "list_containers", func(s internalapi.RuntimeService) error { return ignore2(s.ListContainers(ctx, nil)) }},
		{"ContainerStatus", "container_status", func(s internalapi.RuntimeService) error { return ignore2(s.ContainerStatus(ctx, "c", false)) }},
		{"UpdateContainerResources", "update_container", func(s internalapi.RuntimeService) error { return s.UpdateContainerResources(ctx, "c", nil) }},
		{"ReopenContainerLog", "reopen_container_log", func(s internalapi.RuntimeService) error { return s.ReopenContainerLog(ctx, "c") }},
		{"ExecSync", "exec_sync", func(s internalapi.RuntimeService) error {
			_, _, err := s.ExecSync(ctx, "c", []string{"true"}, 0)
			return err
		}},
		{"Exec", "exec", func(s internalapi.RuntimeService) error { return ignore2(s.Exec(ctx, &runtimeapi.ExecRequest{})) }},
		{"Attach", "attach", func(s internalapi.RuntimeService) error { return ignore2(s.Attach(ctx, &runtimeapi.AttachRequest{})) }},
		{"CheckpointContainer", "checkpoint_container", func(s internalapi.RuntimeService) error {
			return s.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{})
		}},
		{"ContainerStats", "container_stats", func(s internalapi.RuntimeService) error { return ignore2(s.ContainerStats(ctx, "c")) }},
		{"ListContainerStats", "list_container_stats", func(s internalapi.RuntimeService) error { return ignore2(s.ListContainerStats(ctx, nil)) }},
		{"PodSandboxStats", "podsandbox_stats", func(s internalapi.RuntimeService) error { return ignore2(s.PodSandboxStats(ctx, "sb")) }},
		{"ListPodSandboxStats", "list_podsandbox_stats", func(s internalapi.RuntimeService) error { return ignore2(s.ListPodSandboxStats(ctx, nil)) }},
		{"ListMetricDescriptors", "list_metric_descriptors", func(s internalapi.RuntimeService) error { return ignore2(s.ListMetricDescriptors(ctx)) }},
		{"ListPodSandboxMetrics", "list_podsandbox_metrics", func(s internalapi.RuntimeService) error { return ignore2(s.ListPodSandboxMetrics(ctx)) }},
	}
	m, _ := newTestMetrics(t)
	fake := critest.NewFakeRuntimeService()
	svc := NewInstrumentedRuntimeService(fake, m)
	injected := errors.New("injected")
	for i, tc := range tests {
		t.Run(tc.method, func(t *testing.T) {
			fake.InjectError(tc.method, injected)
			if err := tc.call(svc); !errors.Is(err, injected) {
				t.Fatalf("error %v, want the injected one passed through", err)
			}
			if got := testutil.ToFloat64(m.operations.WithLabelValues(tc.op)); got != 1 {
				t.Errorf("%s total = %v, want 1", tc.op, got)
			}
			if got := testutil.ToFloat64(m.operationErrors.WithLabelValues(tc.op)); got != 1 {
				t.Errorf("%s errors = %v, want 1", tc.op, got)
			}
			// No other label was touched: one series per call so far.
			if n := testutil.CollectAndCount(m.operations); n != i+1 {
				t.Errorf("%d operation series after %d calls", n, i+1)
			}
		})
	}

	// GetContainerEvents: cri-api's fake cannot fail it; count the success.
	if err := svc.GetContainerEvents(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.operations.WithLabelValues("get_container_events")); got != 1 {
		t.Errorf("get_container_events total = %v", got)
	}
	if got := testutil.ToFloat64(m.operationErrors.WithLabelValues("get_container_events")); got != 0 {
		t.Errorf("get_container_events errors = %v", got)
	}
	if got := testutil.ToFloat64(m.runPodSandboxErrors.WithLabelValues("h")); got != 1 {
		t.Errorf("run_podsandbox errors for handler h = %v, want 1", got)
	}
}

func TestInstrumentedImageServiceLabels(t *testing.T) {
	ctx := context.Background()
	img := &runtimeapi.ImageSpec{Image: "busybox"}
	tests := []struct {
		method, op string
		call       func(internalapi.ImageManagerService) error
	}{
		{"ListImages", "list_images", func(s internalapi.ImageManagerService) error { _, err := s.ListImages(ctx, nil); return err }},
		{"ImageStatus", "image_status", func(s internalapi.ImageManagerService) error { _, err := s.ImageStatus(ctx, img, false); return err }},
		{"PullImage", "pull_image", func(s internalapi.ImageManagerService) error { _, err := s.PullImage(ctx, img, nil, nil); return err }},
		{"RemoveImage", "remove_image", func(s internalapi.ImageManagerService) error { return s.RemoveImage(ctx, img) }},
		{"ImageFsInfo", "image_fs_info", func(s internalapi.ImageManagerService) error { _, err := s.ImageFsInfo(ctx); return err }},
	}
	m, _ := newTestMetrics(t)
	fake := critest.NewFakeImageService()
	svc := NewInstrumentedImageService(fake, m)
	injected := errors.New("injected")
	for _, tc := range tests {
		t.Run(tc.method, func(t *testing.T) {
			if err := tc.call(svc); err != nil {
				t.Fatalf("plain call: %v", err)
			}
			fake.InjectError(tc.method, injected)
			if err := tc.call(svc); !errors.Is(err, injected) {
				t.Fatalf("error %v, want the injected one passed through", err)
			}
			if got := testutil.ToFloat64(m.operations.WithLabelValues(tc.op)); got != 2 {
				t.Errorf("%s total = %v, want 2", tc.op, got)
			}
			if got := testutil.ToFloat64(m.operationErrors.WithLabelValues(tc.op)); got != 1 {
				t.Errorf("%s errors = %v, want 1", tc.op, got)
			}
		})
	}
}
