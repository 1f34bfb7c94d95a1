package cri

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	testingclock "k8s.io/utils/clock/testing"
)

func TestRuntimeConfig(t *testing.T) {
	f := newFakeCRI()
	f.set("RuntimeConfig", &runtimeapi.RuntimeConfigResponse{
		Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS},
	})
	rs, _ := newTestClients(t, f)
	resp, err := rs.RuntimeConfig(context.Background())
	if err != nil || resp.GetLinux().GetCgroupDriver() != runtimeapi.CgroupDriver_CGROUPFS {
		t.Fatalf("RuntimeConfig = %v, %v", resp, err)
	}
	if d, _ := f.deadline("RuntimeConfig"); d <= 0 || d > testRequestTimeout {
		t.Errorf("deadline %v, want the request timeout", d)
	}
}

// A runtime without the optional calls (containerd 1.6) answers Unimplemented: callers
// get ErrNotSupported with the gRPC code kept, and the log gets no error line.
func TestOptionalCallsUnimplementedAreNotSupported(t *testing.T) {
	logs := &logCapture{}
	f := newFakeCRI() // RuntimeConfig and the metrics calls answer Unimplemented
	rs, _ := newTestClients(t, f, WithClock(testingclock.NewFakePassiveClock(time.Now())), WithLogger(logs.logger()))
	ctx := context.Background()
	_, errConfig := rs.RuntimeConfig(ctx)
	_, errDescriptors := rs.ListMetricDescriptors(ctx)
	_, errMetrics := rs.ListPodSandboxMetrics(ctx)
	for name, err := range map[string]error{"RuntimeConfig": errConfig, "ListMetricDescriptors": errDescriptors, "ListPodSandboxMetrics": errMetrics} {
		if !errors.Is(err, ErrNotSupported) || !IsNotSupported(err) {
			t.Errorf("%s: %v does not wrap ErrNotSupported", name, err)
		}
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("%s: the gRPC code is lost: %v", name, status.Code(err))
		}
		if !strings.HasPrefix(err.Error(), name+": not supported by the container runtime") {
			t.Errorf("%s: message %q", name, err)
		}
	}
	if len(logs.lines) != 0 {
		t.Errorf("an unsupported call was logged: %q", logs.lines)
	}

	// A real failure is still an error, and logged as one.
	f.fail("RuntimeConfig", status.Error(codes.Unavailable, "starting"))
	_, err := rs.RuntimeConfig(ctx)
	if err == nil || IsNotSupported(err) {
		t.Errorf("Unavailable: got %v, want a plain failure", err)
	}
	if n := logs.count("RuntimeConfig from runtime service failed"); n != 1 {
		t.Errorf("%d error lines for a failure, want 1", n)
	}
}

func TestIsNotSupported(t *testing.T) {
	for _, err := range []error{nil, io.EOF, status.Error(codes.NotFound, "x"), errors.New("Unimplemented")} {
		if IsNotSupported(err) {
			t.Errorf("IsNotSupported(%v) = true", err)
		}
	}
	if !IsNotSupported(status.Error(codes.Unimplemented, "x")) {
		t.Error("a bare Unimplemented (e.g. from the cri-api fake) is not recognised")
	}
}

func newFakeRuntime(linux *runtimeapi.LinuxRuntimeConfiguration, errs ...error) *critest.FakeRuntimeService {
	r := critest.NewFakeRuntimeService()
	r.FakeLinuxConfiguration = linux
	for _, err := range errs {
		r.InjectError("RuntimeConfig", err)
	}
	return r
}

func TestRuntimeCgroupDriver(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "starting")
	cases := []struct {
		name      string
		runtime   *critest.FakeRuntimeService
		want      string
		wantErr   error // matched with errors.Is; nil: no error
		wantCalls int
	}{
		{"systemd", newFakeRuntime(&runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_SYSTEMD}), "systemd", nil, 1},
		{"cgroupfs", newFakeRuntime(&runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS}), "cgroupfs", nil, 1},
		{"no Linux config is no answer, not systemd", newFakeRuntime(nil), "", ErrNoCgroupDriver, 1},
		{"unsupported is not retried", newFakeRuntime(nil, status.Error(codes.Unimplemented, "no")), "", ErrNotSupported, 1},
		{"a starting runtime is asked again", newFakeRuntime(&runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_SYSTEMD}, unavailable, unavailable), "systemd", nil, 3},
		{"three failures give up", newFakeRuntime(nil, unavailable, unavailable, unavailable, unavailable), "", unavailable, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := runtimeCgroupDriver(context.Background(), c.runtime, time.Millisecond)
			if got != c.want {
				t.Errorf("driver %q, want %q", got, c.want)
			}
			switch {
			case c.wantErr == nil && err != nil:
				t.Errorf("error %v", err)
			case c.wantErr != nil && !errors.Is(err, c.wantErr) && !(errors.Is(c.wantErr, ErrNotSupported) && IsNotSupported(err)):
				t.Errorf("error %v, want %v", err, c.wantErr)
			}
			if n := len(c.runtime.Called); n != c.wantCalls {
				t.Errorf("%d RuntimeConfig calls, want %d", n, c.wantCalls)
			}
		})
	}
}

func TestRuntimeCgroupDriverStopsWithContext(t *testing.T) {
	r := newFakeRuntime(nil, status.Error(codes.Unavailable, "starting"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := runtimeCgroupDriver(ctx, r, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want the context's error instead of an hour's wait", err)
	}
}

func TestResolveCgroupDriver(t *testing.T) {
	ctx := context.Background()
	systemd := newFakeRuntime(&runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_SYSTEMD})
	if got, fromRuntime, err := ResolveCgroupDriver(ctx, systemd, "cgroupfs"); err != nil || got != "systemd" || !fromRuntime {
		t.Errorf("runtime says systemd, config cgroupfs: got %q, %v; the runtime wins", got, err)
	}
	old := newFakeRuntime(nil, status.Error(codes.Unimplemented, "no"))
	if got, fromRuntime, err := ResolveCgroupDriver(ctx, old, "cgroupfs"); err != nil || got != "cgroupfs" || fromRuntime {
		t.Errorf("runtime without RuntimeConfig: got %q, %v; want the configured driver", got, err)
	}
	silent := newFakeRuntime(nil)
	if got, fromRuntime, err := ResolveCgroupDriver(ctx, silent, "systemd"); err != nil || got != "systemd" || fromRuntime {
		t.Errorf("runtime without a Linux config: got %q, %v; want the configured driver", got, err)
	}
}

func TestGetContainerEventsStreamErrors(t *testing.T) {
	logs := &logCapture{}
	f := newFakeCRI()
	f.events = []*runtimeapi.ContainerEventResponse{{ContainerId: "c1"}}
	f.eventsErr = status.Error(codes.Unavailable, "runtime shutting down")
	rs, _ := newTestClients(t, f, WithLogger(logs.logger()))
	ch := make(chan *runtimeapi.ContainerEventResponse, 10)
	err := rs.GetContainerEvents(context.Background(), ch, nil)
	if status.Code(err) != codes.Unavailable || IsNotSupported(err) {
		t.Errorf("a broken stream: got %v, want the runtime's Unavailable", err)
	}
	if len(ch) != 1 {
		t.Errorf("%d events before the break, want 1", len(ch))
	}

	f.eventsErr = nil
	err = rs.GetContainerEvents(context.Background(), ch, nil)
	if !errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "closed by the runtime") {
		t.Errorf("a closed stream: got %v", err)
	}
	// The caller reconnects and reports the break itself: nothing at V(0).
	if len(logs.lines) != 0 {
		t.Errorf("stream ends were logged: %q", logs.lines)
	}
}

func TestGetContainerEventsCancelledReturnsContextError(t *testing.T) {
	logs := &logCapture{}
	f := newFakeCRI()
	f.events = []*runtimeapi.ContainerEventResponse{{ContainerId: "c1"}, {ContainerId: "c2"}}
	rs, _ := newTestClients(t, f, WithLogger(logs.logger()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := rs.GetContainerEvents(ctx, make(chan *runtimeapi.ContainerEventResponse), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if len(logs.lines) != 0 {
		t.Errorf("a cancelled watch was logged: %q", logs.lines)
	}
}

// The runtime goes away (containerd restarts) while the stream is open: the call ends at
// once with an error that is neither the caller's nor "not supported".
func TestGetContainerEventsRuntimeGoesAway(t *testing.T) {
	f := newFakeCRI()
	f.events = []*runtimeapi.ContainerEventResponse{{ContainerId: "c1"}}
	f.eventsHold = make(chan struct{})
	rs, _ := newTestClients(t, f)
	ch := make(chan *runtimeapi.ContainerEventResponse, 10)
	done := make(chan error, 1)
	go func() { done <- rs.GetContainerEvents(context.Background(), ch, nil) }()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	f.mu.Lock()
	srv := f.server
	f.mu.Unlock()
	go srv.Stop()
	select {
	case err := <-done:
		if err == nil || IsNotSupported(err) || errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want the broken stream's error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("GetContainerEvents still waiting after the runtime went away")
	}
}
