package pluginwatcher

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2/ktesting"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const draType = registerapi.DRAPlugin

func TestRegistersSocketPresentAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "a.sock")
	p := startPlugin(t, sock, draType, "a")
	h := &fakeHandler{}
	m := runManager(t, dir, nil, map[string]Handler{draType: h})

	eventually(t, "registration", h.hasCalls("validate a "+sock, "register a "+sock))
	eventually(t, "registration status", func() bool { return len(p.received()) == 1 })
	if got := p.received(); got[0] != (status{registered: true}) {
		t.Errorf("status = %+v, want registered", got[0])
	}
	if got := registeredSockets(m); !slices.Equal(got, []string{sock}) {
		t.Errorf("actual state = %v, want %v", got, sock)
	}
}

// With upstream's one-second period, a new socket registers within about a period.
func TestRegistersNewSocketWithinAPeriod(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := &fakeHandler{}
	runStarted(t, New(dir), nil, map[string]Handler{draType: h})

	time.Sleep(100 * time.Millisecond) // the reconciler is now mid-period
	sock := filepath.Join(dir, "late.sock")
	created := time.Now()
	startPlugin(t, sock, draType, "late")
	eventually(t, "registration", h.hasCalls("validate late "+sock, "register late "+sock))
	if took := time.Since(created); took > 1500*time.Millisecond {
		t.Errorf("registration took %v, want about a period (1s) at most", took)
	}
}

func TestReportsFailedRegistrationToPlugin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		pluginType string
		handler    *fakeHandler
		wantErr    string // %s is the socket
		wantCalls  []string
	}{{
		name:       "unknown type",
		pluginType: "Unknown",
		handler:    &fakeHandler{},
		wantErr:    "RegisterPlugin error -- no handler registered for plugin type: Unknown at socket %s",
	}, {
		name:       "validation error",
		pluginType: draType,
		handler:    &fakeHandler{validateErr: errors.New("bad version")},
		wantErr:    "RegisterPlugin error -- plugin validation failed with err: bad version",
		wantCalls:  []string{"validate p %s"},
	}, {
		name:       "registration error",
		pluginType: draType,
		handler:    &fakeHandler{registerFailures: 100},
		wantErr:    "RegisterPlugin error -- plugin registration failed with err: boom",
		wantCalls:  []string{"validate p %s", "register p %s"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			sock := filepath.Join(dir, "p.sock")
			p := startPlugin(t, sock, tc.pluginType, "p")
			m := runManager(t, dir, nil, map[string]Handler{draType: tc.handler})

			eventually(t, "registration status", func() bool { return len(p.received()) > 0 })
			want := status{registered: false, err: strings.ReplaceAll(tc.wantErr, "%s", sock)}
			if got := p.received()[0]; got != want {
				t.Errorf("status = %+v, want %+v", got, want)
			}
			var wantCalls []string
			for _, c := range tc.wantCalls {
				wantCalls = append(wantCalls, strings.ReplaceAll(c, "%s", sock))
			}
			if got := tc.handler.recorded(); !slices.Equal(got[:min(len(got), len(wantCalls))], wantCalls) {
				t.Errorf("handler calls = %q, want %q first", got, wantCalls)
			}
			if got := registeredSockets(m); len(got) != 0 {
				t.Errorf("actual state = %v, want empty", got)
			}
		})
	}
}

func TestRetriesFailedRegistrationAfterBackoff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "a.sock")
	p := startPlugin(t, sock, draType, "a")
	h := &fakeHandler{registerFailures: 1}
	m := runManager(t, dir, nil, map[string]Handler{draType: h})

	eventually(t, "second registration", h.hasCalls(
		"validate a "+sock, "register a "+sock, "validate a "+sock, "register a "+sock))
	eventually(t, "registration statuses", func() bool { return len(p.received()) == 2 })
	want := []status{{false, "RegisterPlugin error -- plugin registration failed with err: boom"}, {true, ""}}
	if got := p.received(); !slices.Equal(got, want) {
		t.Errorf("statuses = %+v, want %+v", got, want)
	}
	h.mu.Lock()
	gap := h.times[2].Sub(h.times[1])
	h.mu.Unlock()
	if gap < initialRetryDelay {
		t.Errorf("retried after %v, want the %v backoff first", gap, initialRetryDelay)
	}
	if got := registeredSockets(m); !slices.Equal(got, []string{sock}) {
		t.Errorf("actual state = %v, want %v", got, sock)
	}
}

func TestUsesEndpointFromPluginInfo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "reg.sock")
	p := startPluginWithEndpoint(t, sock, registerapi.CSIPlugin, "csi", "/var/lib/kubelet/plugins/csi/csi.sock")
	h := &fakeHandler{}
	runManager(t, dir, nil, map[string]Handler{registerapi.CSIPlugin: h})

	const endpoint = "/var/lib/kubelet/plugins/csi/csi.sock"
	eventually(t, "registration", h.hasCalls("validate csi "+endpoint, "register csi "+endpoint))
	p.stop()
	eventually(t, "deregistration", h.hasCalls(
		"validate csi "+endpoint, "register csi "+endpoint, "deregister csi "+endpoint))
}

func TestDeregistersRemovedSocket(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "a.sock")
	p := startPlugin(t, sock, draType, "a")
	h := &fakeHandler{}
	m := runManager(t, dir, nil, map[string]Handler{draType: h})

	eventually(t, "registration", h.hasCalls("validate a "+sock, "register a "+sock))
	p.stop()
	eventually(t, "deregistration", h.hasCalls("validate a "+sock, "register a "+sock, "deregister a "+sock))
	if got := registeredSockets(m); len(got) != 0 {
		t.Errorf("actual state = %v, want empty", got)
	}
	if got := desiredSockets(m); len(got) != 0 {
		t.Errorf("desired state = %v, want empty", got)
	}
}

func TestReregistersRecreatedSocket(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "a.sock")
	first := startPlugin(t, sock, draType, "v1")
	h := &fakeHandler{}
	m := runManager(t, dir, nil, map[string]Handler{draType: h})
	eventually(t, "registration", h.hasCalls("validate v1 "+sock, "register v1 "+sock))

	first.stop()
	startPlugin(t, sock, draType, "v2")
	calls := []string{"validate v1 " + sock, "register v1 " + sock, "deregister v1 " + sock, "validate v2 " + sock, "register v2 " + sock}
	eventually(t, "re-registration", h.hasCalls(calls...))

	// A creation noticed while the old one is still registered (removal and creation
	// between two passes) renews the socket's generation only.
	m.desired.add(sock)
	calls = append(calls, "deregister v2 "+sock, "validate v2 "+sock, "register v2 "+sock)
	eventually(t, "re-registration of the new generation", h.hasCalls(calls...))
}

func TestIgnoresNonSocketsAndDotFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "file.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	hiddenAtStart := startPlugin(t, filepath.Join(dir, ".hidden.sock"), draType, "hidden")
	a := filepath.Join(dir, "a.sock")
	startPlugin(t, a, draType, "a")
	h := &fakeHandler{}
	m := runManager(t, dir, nil, map[string]Handler{draType: h})

	if err := os.WriteFile(filepath.Join(dir, "late.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	hiddenLater := startPlugin(t, filepath.Join(dir, ".late.sock"), draType, "hidden-late")
	b := filepath.Join(dir, "b.sock")
	startPlugin(t, b, draType, "b")

	eventually(t, "both sockets registered", func() bool { return slices.Equal(registeredSockets(m), []string{a, b}) })
	time.Sleep(5 * testPeriod)
	if got := desiredSockets(m); !slices.Equal(got, []string{a, b}) {
		t.Errorf("desired state = %v, want only %v", got, []string{a, b})
	}
	for _, call := range h.recorded() {
		if strings.Contains(call, "hidden") || strings.Contains(call, "file.sock") || strings.Contains(call, "late.sock") {
			t.Errorf("unexpected handler call %q", call)
		}
	}
	if len(hiddenAtStart.received())+len(hiddenLater.received()) != 0 {
		t.Error("a dot-file socket was asked to register")
	}
}

func TestWatchesSubdirectories(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o750); err != nil {
		t.Fatal(err)
	}
	atStart := filepath.Join(dir, "sub", "a.sock")
	startPlugin(t, atStart, draType, "a")
	h := &fakeHandler{}
	m := runManager(t, dir, nil, map[string]Handler{draType: h})

	// A directory created later is watched, and walked for what was created in it
	// before the watch.
	deeper := filepath.Join(dir, "new", "deeper")
	if err := os.MkdirAll(deeper, 0o750); err != nil {
		t.Fatal(err)
	}
	inNew := filepath.Join(deeper, "b.sock")
	b := startPlugin(t, inNew, draType, "b")
	eventually(t, "both sockets registered", func() bool {
		return slices.Equal(registeredSockets(m), []string{inNew, atStart})
	})
	inWatched := filepath.Join(dir, "new", "c.sock")
	startPlugin(t, inWatched, draType, "c")
	eventually(t, "socket in the new directory registered", func() bool {
		return slices.Contains(registeredSockets(m), inWatched)
	})

	// The start-up walk watched sub as well.
	inSub := filepath.Join(dir, "sub", "d.sock")
	startPlugin(t, inSub, draType, "d")
	eventually(t, "socket in the existing sub-directory registered", func() bool {
		return slices.Contains(registeredSockets(m), inSub)
	})

	b.stop()
	eventually(t, "deregistration", func() bool { return slices.Contains(h.recorded(), "deregister b "+inNew) })
}

func TestRegistersNothingBeforeSourcesReady(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "a.sock")
	p := startPlugin(t, sock, draType, "a")
	h := &fakeHandler{}
	var ready atomic.Bool
	m := runManager(t, dir, ready.Load, map[string]Handler{draType: h})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collector())

	// The watcher runs at once; the reconciler waits.
	eventually(t, "socket in the desired state", func() bool { return len(desiredSockets(m)) == 1 })
	time.Sleep(20 * testPeriod)
	if got := h.recorded(); len(got) != 0 {
		t.Fatalf("handler called before the sources were ready: %q", got)
	}
	if got := len(p.received()); got != 0 {
		t.Fatalf("plugin got %d statuses before the sources were ready", got)
	}
	wantMetrics := map[string]float64{"desired_state_of_world " + sock: 1}
	if got := gatherTotalPlugins(t, reg); !maps.Equal(got, wantMetrics) {
		t.Errorf("metrics = %v, want %v", got, wantMetrics)
	}

	ready.Store(true)
	eventually(t, "registration", h.hasCalls("validate a "+sock, "register a "+sock))
	wantMetrics["actual_state_of_world "+sock] = 1
	if got := gatherTotalPlugins(t, reg); !maps.Equal(got, wantMetrics) {
		t.Errorf("metrics = %v, want %v", got, wantMetrics)
	}
}

// A socket removed while its plugin is registering is deregistered only once the
// registration is over: handlers never see two calls for one socket at once.
func TestOperationsOnOneSocketNeverOverlap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "a.sock")
	startPlugin(t, sock, draType, "a")
	h := &fakeHandler{registerDelay: 300 * time.Millisecond}
	runManager(t, dir, nil, map[string]Handler{draType: h})

	eventually(t, "registration start", h.hasCalls("validate a "+sock, "register a "+sock))
	// Removing the file keeps the server (and the registration's connection) alive.
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	eventually(t, "deregistration", h.hasCalls("validate a "+sock, "register a "+sock, "deregister a "+sock))
	time.Sleep(5 * testPeriod)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.overlaps) != 0 {
		t.Errorf("overlapping handler calls: %q", h.overlaps)
	}
	if len(h.calls) != 3 {
		t.Errorf("handler calls = %q, want 3", h.calls)
	}
}

func TestOperationsSerializePerSocket(t *testing.T) {
	t.Parallel()
	logger, _ := ktesting.NewTestContext(t)
	var running = newOperations(new(sync.WaitGroup))
	release := make(chan struct{})
	blocked := func() error { <-release; return nil }

	if !running.start(logger, "a", blocked) {
		t.Fatal("first operation on a refused")
	}
	if running.start(logger, "a", blocked) {
		t.Error("second operation on a started while the first runs")
	}
	if !running.start(logger, "b", blocked) {
		t.Error("operation on b refused while a runs")
	}
	close(release)
	running.running.Wait()
	if !running.start(logger, "a", func() error { return errors.New("fail") }) {
		t.Fatal("operation on a refused after the first one succeeded")
	}
	running.running.Wait()
	if running.start(logger, "a", blocked) {
		t.Error("operation on a started right after a failure")
	}

	// A panicking handler fails its operation instead of the process.
	running.start(logger, "c", func() error { panic("bad handler") })
	running.running.Wait()
	if running.start(logger, "c", blocked) {
		t.Error("operation on c started right after a panic")
	}
}

func TestRunCreatesRegistryDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "root", RegistryDirName)
	runManager(t, dir, nil, nil)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm()&^0o750 != 0 || fi.Mode().Perm()&0o700 != 0o700 {
		t.Errorf("registry dir mode = %v, want a 0750 directory", fi.Mode())
	}
}

func TestRunFailsWhenRegistryCannotBeCreated(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m := New(filepath.Join(file, RegistryDirName))
	_, ctx := ktesting.NewTestContext(t)
	err := m.Run(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "error (re-)creating root") {
		t.Errorf("Run error = %v, want the directory creation's", err)
	}
}

// Not parallel: it counts the process's goroutines.
func TestCancelStopsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	dir := t.TempDir()
	sock := filepath.Join(dir, "a.sock")
	p := startPlugin(t, sock, draType, "a")
	h := &fakeHandler{}
	m := New(dir)
	m.period = testPeriod
	m.AddHandler(draType, h)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	if err := m.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "registration to complete", func() bool {
		m.ops.mu.Lock()
		defer m.ops.mu.Unlock()
		return len(registeredSockets(m)) == 1 && len(m.ops.bySocket) == 0
	})

	cancel()
	waitStopped(t, m)
	p.stop()
	eventually(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })

	// Nothing watches or reconciles any more.
	late := startPlugin(t, filepath.Join(dir, "late.sock"), draType, "late")
	time.Sleep(5 * testPeriod)
	if got := h.recorded(); len(got) != 2 || len(late.received()) != 0 {
		t.Errorf("handler calls after cancel: %q", got)
	}
}

// gatherTotalPlugins returns plugin_manager_total_plugins by "<state> <socket_path>".
func gatherTotalPlugins(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "plugin_manager_total_plugins" {
			continue
		}
		for _, metric := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range metric.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[labels["state"]+" "+labels["socket_path"]] = metric.GetGauge().GetValue()
		}
	}
	return out
}
