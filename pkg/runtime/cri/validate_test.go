package cri

import (
	"context"
	"errors"
	"strings"
	"testing"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func goodContainerStatus(id string) *runtimeapi.ContainerStatus {
	return &runtimeapi.ContainerStatus{
		Id: id, Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, CreatedAt: 1,
		Image: &runtimeapi.ImageSpec{Image: "busybox"}, ImageRef: "sha256:abc",
	}
}

func goodSandboxStatus(id string) *runtimeapi.PodSandboxStatus {
	return &runtimeapi.PodSandboxStatus{
		Id: id, CreatedAt: 1,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "default", Uid: "u1"},
	}
}

// TestResponseValidation feeds each check a runtime answer that breaks the
// CRI contract and expects the matching typed error.
func TestResponseValidation(t *testing.T) {
	type call func(context.Context, internalapi.RuntimeService, internalapi.ImageManagerService) error
	containerStatus := func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
		_, err := rs.ContainerStatus(ctx, "c1", false)
		return err
	}
	sandboxStatus := func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
		_, err := rs.PodSandboxStatus(ctx, "sb1", false)
		return err
	}
	runtimeStatus := func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
		_, err := rs.Status(ctx, false)
		return err
	}
	imageStatus := func(ctx context.Context, _ internalapi.RuntimeService, is internalapi.ImageManagerService) error {
		_, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: "busybox"}, false)
		return err
	}
	noImage := goodContainerStatus("c1")
	noImage.Image = nil
	noImageRef := goodContainerStatus("c1")
	noImageRef.ImageRef = ""
	noUID := goodSandboxStatus("sb1")
	noUID.Metadata.Uid = ""

	tests := []struct {
		name       string
		method     string
		reply      any
		call       call
		wantCause  error
		wantDetail string
	}{
		{"RunPodSandbox without ID", "RunPodSandbox", &runtimeapi.RunPodSandboxResponse{},
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				_, err := rs.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns"}}, "")
				return err
			}, ErrMissingPodSandboxID, "ns/p"},
		{"CreateContainer without ID", "CreateContainer", &runtimeapi.CreateContainerResponse{},
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				_, err := rs.CreateContainer(ctx, "sb", &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "app"}}, nil)
				return err
			}, ErrMissingContainerID, "app"},
		{"Version with empty fields", "Version", &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "x"},
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				_, err := rs.Version(ctx, "v1")
				return err
			}, ErrIncompleteVersion, "RuntimeVersion, RuntimeApiVersion"},
		{"Status without status", "Status", &runtimeapi.StatusResponse{}, runtimeStatus, ErrMissingRuntimeConditions, "nil"},
		{"Status without NetworkReady", "Status", &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{
			Conditions: []*runtimeapi.RuntimeCondition{{Type: runtimeapi.RuntimeReady, Status: true}, {Type: "Other"}},
		}}, runtimeStatus, ErrMissingRuntimeConditions, runtimeapi.NetworkReady},
		{"ImageStatus without image ID", "ImageStatus", &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Size: 10}}, imageStatus, ErrIncompleteImage, "busybox"},
		{"ImageStatus with zero size", "ImageStatus", &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: "sha256:abc"}}, imageStatus, ErrIncompleteImage, "size 0"},
		{"PullImage without image ref", "PullImage", &runtimeapi.PullImageResponse{},
			func(ctx context.Context, _ internalapi.RuntimeService, is internalapi.ImageManagerService) error {
				_, err := is.PullImage(ctx, &runtimeapi.ImageSpec{Image: "busybox"}, nil, nil)
				return err
			}, ErrMissingImageRef, "busybox"},
		{"Exec without URL", "Exec", &runtimeapi.ExecResponse{},
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				_, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: "c1"})
				return err
			}, ErrMissingURL, ""},
		{"Attach without URL", "Attach", &runtimeapi.AttachResponse{},
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				_, err := rs.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: "c1"})
				return err
			}, ErrMissingURL, ""},
		{"PortForward without URL", "PortForward", &runtimeapi.PortForwardResponse{},
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				_, err := rs.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "sb"})
				return err
			}, ErrMissingURL, ""},
		{"ContainerStatus nil", "ContainerStatus", &runtimeapi.ContainerStatusResponse{}, containerStatus, ErrContainerStatusNil, "c1"},
		{"ContainerStatus for another container", "ContainerStatus",
			&runtimeapi.ContainerStatusResponse{Status: goodContainerStatus("c2")}, containerStatus, ErrStatusIDMismatch, `"c2"`},
		{"ContainerStatus without ID", "ContainerStatus",
			&runtimeapi.ContainerStatusResponse{Status: goodContainerStatus("")}, containerStatus, ErrIncompleteStatus, "ID"},
		{"ContainerStatus without image", "ContainerStatus",
			&runtimeapi.ContainerStatusResponse{Status: noImage}, containerStatus, ErrIncompleteStatus, "image"},
		{"ContainerStatus without image ref", "ContainerStatus",
			&runtimeapi.ContainerStatusResponse{Status: noImageRef}, containerStatus, ErrIncompleteStatus, "imageRef"},
		{"PodSandboxStatus nil", "PodSandboxStatus", &runtimeapi.PodSandboxStatusResponse{}, sandboxStatus, ErrPodSandboxStatusNil, "sb1"},
		{"PodSandboxStatus for another sandbox", "PodSandboxStatus",
			&runtimeapi.PodSandboxStatusResponse{Status: goodSandboxStatus("sb2")}, sandboxStatus, ErrStatusIDMismatch, `"sb2"`},
		{"PodSandboxStatus without uid", "PodSandboxStatus",
			&runtimeapi.PodSandboxStatusResponse{Status: noUID}, sandboxStatus, ErrIncompleteStatus, "uid"},
		{"RestorePod without sandbox ID", "RestorePod", &runtimeapi.RestorePodResponse{},
			func(ctx context.Context, rs internalapi.RuntimeService, _ internalapi.ImageManagerService) error {
				_, err := rs.RestorePod(ctx, &runtimeapi.RestorePodRequest{})
				return err
			}, ErrMissingPodSandboxID, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCRI()
			rs, is := newTestClients(t, f)
			f.set(tc.method, tc.reply) // after connecting: Version is checked then
			err := tc.call(context.Background(), rs, is)
			if !errors.Is(err, tc.wantCause) {
				t.Fatalf("error %v, want one wrapping %v", err, tc.wantCause)
			}
			var invalid *InvalidResponseError
			if !errors.As(err, &invalid) || invalid.Method != tc.method {
				t.Fatalf("error %v is not an InvalidResponseError for %s", err, tc.method)
			}
			if !strings.Contains(err.Error(), tc.wantDetail) {
				t.Errorf("error %q does not mention %q", err, tc.wantDetail)
			}
		})
	}
}

func TestValidResponsesPass(t *testing.T) {
	f := newFakeCRI()
	f.set("Status", &runtimeapi.StatusResponse{Status: readyStatus()})
	// containerd answers a prefix of an ID with the full ID.
	f.set("ContainerStatus", &runtimeapi.ContainerStatusResponse{Status: goodContainerStatus("c1full")})
	f.set("PodSandboxStatus", &runtimeapi.PodSandboxStatusResponse{Status: goodSandboxStatus("sb1")})
	f.set("ImageStatus", &runtimeapi.ImageStatusResponse{}) // image absent: no error
	f.set("Exec", &runtimeapi.ExecResponse{Url: "http://x"})
	rs, is := newTestClients(t, f)
	ctx := context.Background()
	if _, err := rs.Status(ctx, false); err != nil {
		t.Errorf("Status: %v", err)
	}
	if _, err := rs.ContainerStatus(ctx, "c1", false); err != nil {
		t.Errorf("ContainerStatus: %v", err)
	}
	if _, err := rs.PodSandboxStatus(ctx, "sb1", false); err != nil {
		t.Errorf("PodSandboxStatus: %v", err)
	}
	if resp, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: "absent"}, false); err != nil || resp.Image != nil {
		t.Errorf("ImageStatus of an absent image: %v, %v", resp, err)
	}
	if resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{}); err != nil || resp.Url != "http://x" {
		t.Errorf("Exec: %v, %v", resp, err)
	}
}
