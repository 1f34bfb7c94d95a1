package cri

import (
	"context"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCallDeadlines checks the deadline each call carries to the runtime,
// as measured by the server when the call arrives.
func TestCallDeadlines(t *testing.T) {
	f := newFakeCRI()
	f.set("Status", &runtimeapi.StatusResponse{Status: readyStatus()})
	f.set("RunPodSandbox", &runtimeapi.RunPodSandboxResponse{PodSandboxId: "sb"})
	f.set("StopContainer", &runtimeapi.StopContainerResponse{})
	f.set("StartContainer", &runtimeapi.StartContainerResponse{})
	f.set("ExecSync", &runtimeapi.ExecSyncResponse{})
	f.set("ListContainerStats", &runtimeapi.ListContainerStatsResponse{})
	f.set("ListPodSandboxStats", &runtimeapi.ListPodSandboxStatsResponse{})
	f.set("PullImage", &runtimeapi.PullImageResponse{ImageRef: "sha256:abc"})
	f.set("ListImages", &runtimeapi.ListImagesResponse{})
	f.set("CheckpointPod", &runtimeapi.CheckpointPodResponse{})
	rs, is := newTestClients(t, f)

	tests := []struct {
		name   string
		method string
		call   func(context.Context, internalapi.RuntimeService, internalapi.ImageManagerService) error
		want   time.Duration // noDeadline for none
	}{
		{"Status gets the request timeout", "Status",
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				_, err := rs.Status(ctx, false)
				return err
			}, testRequestTimeout},
		{"StartContainer gets the request timeout", "StartContainer",
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				return rs.StartContainer(ctx, "c1")
			}, testRequestTimeout},
		{"RunPodSandbox gets twice the request timeout", "RunPodSandbox",
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				_, err := rs.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{}, "")
				return err
			}, 2 * testRequestTimeout},
		{"StopContainer adds the grace period", "StopContainer",
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				return rs.StopContainer(ctx, "c1", 30)
			}, testRequestTimeout + 30*time.Second},
		{"ExecSync adds the command timeout", "ExecSync",
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				_, _, err := rs.ExecSync(ctx, "c1", []string{"true"}, 7*time.Second)
				return err
			}, testRequestTimeout + 7*time.Second},
		{"ListContainerStats has no deadline", "ListContainerStats",
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				_, err := rs.ListContainerStats(ctx, nil)
				return err
			}, noDeadline},
		{"ListPodSandboxStats gets the request timeout", "ListPodSandboxStats",
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				_, err := rs.ListPodSandboxStats(ctx, nil)
				return err
			}, testRequestTimeout},
		{"CheckpointPod without caller deadline gets the request timeout", "CheckpointPod",
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				return rs.CheckpointPod(ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: "sb"})
			}, testRequestTimeout},
		{"PullImage has no deadline", "PullImage",
			func(ctx context.Context, _ internalapi.RuntimeService, is internalapi.ImageManagerService) error {
				_, err := is.PullImage(ctx, &runtimeapi.ImageSpec{Image: "busybox"}, nil, nil)
				return err
			}, noDeadline},
		{"ListImages gets the request timeout", "ListImages",
			func(ctx context.Context, _ internalapi.RuntimeService, is internalapi.ImageManagerService) error {
				_, err := is.ListImages(ctx, nil)
				return err
			}, testRequestTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(context.Background(), rs, is); err != nil {
				t.Fatalf("call failed: %v", err)
			}
			got, ok := f.deadline(tc.method)
			if !ok {
				t.Fatalf("server saw no %s call", tc.method)
			}
			checkDeadline(t, got, tc.want)
		})
	}
}

func TestExecSyncWithoutCommandTimeoutHasNoDeadline(t *testing.T) {
	f := newFakeCRI()
	f.set("ExecSync", &runtimeapi.ExecSyncResponse{})
	rs, _ := newTestClients(t, f)
	if _, _, err := rs.ExecSync(context.Background(), "c1", []string{"true"}, 0); err != nil {
		t.Fatal(err)
	}
	got, _ := f.deadline("ExecSync")
	checkDeadline(t, got, noDeadline)
	if req := f.request("ExecSync").(*runtimeapi.ExecSyncRequest); req.Timeout != 0 {
		t.Errorf("request Timeout = %d, want 0", req.Timeout)
	}
}

func TestCallerDeadlineStillApplies(t *testing.T) {
	f := newFakeCRI()
	f.set("PullImage", &runtimeapi.PullImageResponse{ImageRef: "sha256:abc"})
	f.set("RunPodSandbox", &runtimeapi.RunPodSandboxResponse{PodSandboxId: "sb"})
	f.set("CheckpointPod", &runtimeapi.CheckpointPodResponse{})
	rs, is := newTestClients(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := is.PullImage(ctx, &runtimeapi.ImageSpec{Image: "busybox"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{}, ""); err != nil {
		t.Fatal(err)
	}
	long, cancelLong := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancelLong()
	if err := rs.CheckpointPod(long, &runtimeapi.CheckpointPodRequest{PodSandboxId: "sb"}); err != nil {
		t.Fatal(err)
	}
	for method, want := range map[string]time.Duration{
		"PullImage": 3 * time.Second, "RunPodSandbox": 3 * time.Second, "CheckpointPod": 10 * time.Minute,
	} {
		got, _ := f.deadline(method)
		t.Run(method, func(t *testing.T) { checkDeadline(t, got, want) })
	}
}

func TestCheckpointContainerTimeout(t *testing.T) {
	f := newFakeCRI()
	f.set("CheckpointContainer", &runtimeapi.CheckpointContainerResponse{})
	rs, _ := newTestClients(t, f)
	ctx := context.Background()

	long := &runtimeapi.CheckpointContainerRequest{ContainerId: "c1", Timeout: 300}
	if err := rs.CheckpointContainer(ctx, long); err != nil {
		t.Fatal(err)
	}
	got, _ := f.deadline("CheckpointContainer")
	checkDeadline(t, got, 300*time.Second)

	short := &runtimeapi.CheckpointContainerRequest{ContainerId: "c1", Timeout: 0}
	if err := rs.CheckpointContainer(ctx, short); err != nil {
		t.Fatal(err)
	}
	got, _ = f.deadline("CheckpointContainer")
	checkDeadline(t, got, testRequestTimeout)
	if sent := f.request("CheckpointContainer").(*runtimeapi.CheckpointContainerRequest); sent.Timeout != int64(testRequestTimeout/time.Second) {
		t.Errorf("sent Timeout = %d, want the request timeout in seconds", sent.Timeout)
	}
	if short.Timeout != 0 {
		t.Error("the caller's request was modified")
	}
	if err := rs.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{Timeout: -1}); err == nil {
		t.Error("negative timeout: want an error")
	}
}

// checkDeadline compares the time left that the server saw with the
// deadline the client should have set; the call itself takes a little time.
func checkDeadline(t *testing.T, got, want time.Duration) {
	t.Helper()
	if want == noDeadline {
		if got != noDeadline {
			t.Errorf("call had a deadline %v away, want none", got)
		}
		return
	}
	if got == noDeadline {
		t.Fatalf("call had no deadline, want %v", want)
	}
	if got > want || got < want-2*time.Second {
		t.Errorf("call had %v left, want about %v", got, want)
	}
}

func readyStatus() *runtimeapi.RuntimeStatus {
	return &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
}
