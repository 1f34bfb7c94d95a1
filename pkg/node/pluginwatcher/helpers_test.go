package pluginwatcher

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2/ktesting"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// testPeriod replaces the one-second reconcile period in most tests, to keep them fast.
const testPeriod = 10 * time.Millisecond

// fakePlugin is a plugin's registration server on a unix socket.
type fakePlugin struct {
	registerapi.UnimplementedRegistrationServer
	socket string
	info   *registerapi.PluginInfo
	server *grpc.Server

	mu       sync.Mutex
	statuses []*registerapi.RegistrationStatus
}

// startPlugin serves GetInfo and NotifyRegistrationStatus at socket until the test ends
// or stop is called.
func startPlugin(t *testing.T, socket, pluginType, name string) *fakePlugin {
	t.Helper()
	return startPluginWithEndpoint(t, socket, pluginType, name, "")
}

func startPluginWithEndpoint(t *testing.T, socket, pluginType, name, endpoint string) *fakePlugin {
	t.Helper()
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	p := &fakePlugin{
		socket: socket,
		info:   &registerapi.PluginInfo{Type: pluginType, Name: name, Endpoint: endpoint, SupportedVersions: []string{"v1"}},
		server: grpc.NewServer(),
	}
	registerapi.RegisterRegistrationServer(p.server, p)
	go func() { _ = p.server.Serve(l) }()
	t.Cleanup(p.stop)
	return p
}

// stop ends the server; closing its listener deletes the socket file.
func (p *fakePlugin) stop() { p.server.Stop() }

func (p *fakePlugin) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return p.info, nil
}

func (p *fakePlugin) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.statuses = append(p.statuses, s)
	return &registerapi.RegistrationStatusResponse{}, nil
}

type status struct {
	registered bool
	err        string
}

func (p *fakePlugin) received() []status {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []status
	for _, s := range p.statuses {
		out = append(out, status{s.PluginRegistered, s.Error})
	}
	return out
}

// fakeHandler records its calls as "<call> <name> <endpoint>", and any call that began
// while another one for the same endpoint was running.
type fakeHandler struct {
	validateErr      error
	registerFailures int           // how many RegisterPlugin calls fail first
	registerDelay    time.Duration // how long RegisterPlugin takes

	mu       sync.Mutex
	calls    []string
	times    []time.Time
	busy     map[string]bool
	overlaps []string
}

func (h *fakeHandler) enter(call, name, endpoint string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.busy == nil {
		h.busy = map[string]bool{}
	}
	if h.busy[endpoint] {
		h.overlaps = append(h.overlaps, call+" "+endpoint)
	}
	h.busy[endpoint] = true
	h.calls = append(h.calls, call+" "+name+" "+endpoint)
	h.times = append(h.times, time.Now())
}

func (h *fakeHandler) leave(endpoint string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.busy, endpoint)
}

func (h *fakeHandler) ValidatePlugin(_ context.Context, name, endpoint string, _ []string) error {
	h.enter("validate", name, endpoint)
	defer h.leave(endpoint)
	return h.validateErr
}

func (h *fakeHandler) RegisterPlugin(_ context.Context, name, endpoint string, _ []string, _ *time.Duration) error {
	h.enter("register", name, endpoint)
	defer h.leave(endpoint)
	time.Sleep(h.registerDelay)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.registerFailures > 0 {
		h.registerFailures--
		return errors.New("boom")
	}
	return nil
}

func (h *fakeHandler) DeRegisterPlugin(_ context.Context, name, endpoint string) {
	h.enter("deregister", name, endpoint)
	defer h.leave(endpoint)
}

func (h *fakeHandler) recorded() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

func (h *fakeHandler) hasCalls(want ...string) func() bool {
	return func() bool { return slices.Equal(h.recorded(), want) }
}

// runManager runs a manager on dir with the test period until the test ends, and
// checks then that everything it started has returned.
func runManager(t *testing.T, dir string, sourcesReady func() bool, handlers map[string]Handler) *Manager {
	t.Helper()
	m := New(dir)
	m.period = testPeriod
	return runStarted(t, m, sourcesReady, handlers)
}

func runStarted(t *testing.T, m *Manager, sourcesReady func() bool, handlers map[string]Handler) *Manager {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	for pluginType, h := range handlers {
		m.AddHandler(pluginType, h)
	}
	if err := m.Run(ctx, sourcesReady); err != nil {
		cancel()
		t.Fatalf("Run: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		waitStopped(t, m)
	})
	return m
}

func waitStopped(t *testing.T, m *Manager) {
	t.Helper()
	done := make(chan struct{})
	go func() { m.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("manager goroutines still running 5s after its context ended")
	}
}

// eventually fails the test if cond is not true within 3s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func registeredSockets(m *Manager) []string {
	var out []string
	for _, p := range m.actual.snapshot() {
		out = append(out, p.socket)
	}
	slices.Sort(out)
	return out
}

func desiredSockets(m *Manager) []string {
	var out []string
	for socket := range m.desired.snapshot() {
		out = append(out, socket)
	}
	slices.Sort(out)
	return out
}
