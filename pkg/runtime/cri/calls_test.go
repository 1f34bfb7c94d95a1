package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crierrors "k8s.io/cri-api/pkg/errors"
	utilexec "k8s.io/utils/exec"
)

func TestExecSyncNonZeroExit(t *testing.T) {
	f := newFakeCRI()
	f.set("ExecSync", &runtimeapi.ExecSyncResponse{ExitCode: 3, Stdout: []byte("out"), Stderr: []byte("boom")})
	rs, _ := newTestClients(t, f)
	stdout, stderr, err := rs.ExecSync(context.Background(), "c1", []string{"sh", "-c", "exit 3"}, time.Second)
	var exitErr *ExecExitError
	if !errors.As(err, &exitErr) {
		t.Fatalf("error %v is not an *ExecExitError", err)
	}
	if exitErr.ExitStatus() != 3 {
		t.Errorf("exit code %d, want 3", exitErr.ExitStatus())
	}
	if want := "command 'sh -c exit 3' exited with 3: boom"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	var probeErr utilexec.ExitError // what kubelet-style probe code checks for
	if !errors.As(err, &probeErr) || probeErr.ExitStatus() != 3 {
		t.Errorf("error is not usable as utilexec.ExitError")
	}
	if string(stdout) != "out" || string(stderr) != "boom" {
		t.Errorf("output %q / %q", stdout, stderr)
	}
	if req := f.request("ExecSync").(*runtimeapi.ExecSyncRequest); req.Timeout != 1 || req.ContainerId != "c1" {
		t.Errorf("request %v", req)
	}
}

func TestExecSyncSuccess(t *testing.T) {
	f := newFakeCRI()
	f.set("ExecSync", &runtimeapi.ExecSyncResponse{Stdout: []byte("hello")})
	rs, _ := newTestClients(t, f)
	stdout, _, err := rs.ExecSync(context.Background(), "c1", []string{"echo", "hello"}, time.Second)
	if err != nil || string(stdout) != "hello" {
		t.Fatalf("ExecSync = %q, %v", stdout, err)
	}
}

func TestExecSyncRuntimeTimeout(t *testing.T) {
	f := newFakeCRI()
	f.fail("ExecSync", status.Error(codes.DeadlineExceeded, "timeout 2s exceeded"))
	rs, _ := newTestClients(t, f)
	_, _, err := rs.ExecSync(context.Background(), "c1", []string{"sleep", "9"}, 2*time.Second)
	if !errors.Is(err, ErrCommandTimedOut) {
		t.Fatalf("error %v does not wrap ErrCommandTimedOut", err)
	}
	if !strings.Contains(err.Error(), `"sleep 9" timed out after 2s`) {
		t.Errorf("message %q", err)
	}
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("the gRPC status is lost: %v", status.Code(err))
	}
}

func TestPullImageErrors(t *testing.T) {
	f := newFakeCRI()
	_, is := newTestClients(t, f)
	ctx := context.Background()
	img := &runtimeapi.ImageSpec{Image: "nope"}

	f.fail("PullImage", status.Error(codes.Unknown, "failed to resolve reference: not found"))
	_, err := is.PullImage(ctx, img, nil, nil)
	if err == nil || err.Error() != "failed to resolve reference: not found" {
		t.Errorf("Unknown status: got %v, want the runtime's message alone", err)
	}

	f.fail("PullImage", status.Error(codes.NotFound, "gone"))
	_, err = is.PullImage(ctx, img, nil, nil)
	if status.Code(err) != codes.NotFound {
		t.Errorf("other codes must be kept: got %v", err)
	}
}

func TestIsNotFound(t *testing.T) {
	f := newFakeCRI()
	f.fail("ContainerStatus", status.Error(codes.NotFound, "no such container"))
	rs, _ := newTestClients(t, f)
	_, err := rs.ContainerStatus(context.Background(), "gone", false)
	if !IsNotFound(err) {
		t.Errorf("IsNotFound(%v) = false", err)
	}
	if !IsNotFound(fmt.Errorf("wrapped: %w", err)) {
		t.Error("IsNotFound of a wrapped NotFound = false")
	}
	for _, other := range []error{nil, errors.New("x"), status.Error(codes.Unavailable, "x"), crierrors.ErrRegistryUnavailable} {
		if IsNotFound(other) {
			t.Errorf("IsNotFound(%v) = true", other)
		}
	}
}

func TestGetContainerEventsStreams(t *testing.T) {
	f := newFakeCRI()
	f.events = []*runtimeapi.ContainerEventResponse{
		{ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT},
		{ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT},
	}
	rs, _ := newTestClients(t, f)
	ch := make(chan *runtimeapi.ContainerEventResponse, 10)
	connected := false
	err := rs.GetContainerEvents(context.Background(), ch, func(runtimeapi.RuntimeService_GetContainerEventsClient) { connected = true })
	if !errors.Is(err, io.EOF) {
		t.Errorf("end of stream: got %v, want io.EOF", err)
	}
	if !connected {
		t.Error("connection callback was not called")
	}
	if len(ch) != 2 {
		t.Fatalf("got %d events, want 2", len(ch))
	}
	if e := <-ch; e.ContainerEventType != runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT {
		t.Errorf("first event %v", e)
	}
	if d, _ := f.deadline("GetContainerEvents"); d != noDeadline {
		t.Errorf("the stream had a deadline %v away, want none", d)
	}
}

func TestGetContainerEventsUnimplemented(t *testing.T) {
	f := newFakeCRI() // no events: the server answers Unimplemented, like containerd 1.6
	rs, _ := newTestClients(t, f)
	err := rs.GetContainerEvents(context.Background(), make(chan *runtimeapi.ContainerEventResponse), nil)
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("got %v, want a wrapped Unimplemented", err)
	}
	if !errors.Is(err, ErrNotSupported) || !IsNotSupported(err) {
		t.Errorf("%v does not wrap ErrNotSupported", err)
	}
	if !strings.HasPrefix(err.Error(), "GetContainerEvents: not supported") {
		t.Errorf("message %q does not say what is missing", err)
	}
}

// The runtime enforces the caller's deadline too (grpc-timeout, truncated to its unit), so
// the stream can end with DeadlineExceeded a moment before ctx is done: that is still the
// caller's deadline. The same code long before a deadline is the runtime's own error.
func TestGetContainerEventsDeadlineFromTheRuntime(t *testing.T) {
	f := newFakeCRI()
	f.events = []*runtimeapi.ContainerEventResponse{}
	f.eventsErr = status.Error(codes.DeadlineExceeded, "stream terminated by RST_STREAM with error code: CANCEL")
	rs, _ := newTestClients(t, f)
	for _, c := range []struct {
		timeout time.Duration
		want    func(error) bool
	}{
		{500 * time.Millisecond, func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
		{time.Minute, func(err error) bool {
			return status.Code(err) == codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded)
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		err := rs.GetContainerEvents(ctx, make(chan *runtimeapi.ContainerEventResponse, 1), nil)
		cancel()
		if !c.want(err) {
			t.Errorf("deadline in %v: the stream ended with %v", c.timeout, err)
		}
	}
}

func TestGetContainerEventsStopsWithContext(t *testing.T) {
	f := newFakeCRI()
	f.events = []*runtimeapi.ContainerEventResponse{{ContainerId: "c1"}, {ContainerId: "c2"}}
	rs, _ := newTestClients(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan *runtimeapi.ContainerEventResponse) // nobody reads
	done := make(chan error, 1)
	go func() { done <- rs.GetContainerEvents(ctx, ch, nil) }()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Error("want an error after cancel")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("GetContainerEvents blocked on a full channel after its context was cancelled")
	}
}
