package deviceplugin

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/pkg/node/deviceplugin/checkpoint"
	"github.com/nodelet/nodelet/pkg/resourcename"
)

func TestIsExtendedResourceName(t *testing.T) {
	for name, want := range map[string]bool{
		"example.com/gpu":                        true,
		"nvidia.com/gpu":                         true,
		"a.b/c-d_e.f":                            true,
		"gpu":                                    false, // unprefixed: implicitly kubernetes.io
		"kubernetes.io/gpu":                      false,
		"foo.kubernetes.io/gpu":                  false,
		"requests.example.com/gpu":               false,
		"example.com/":                           false,
		"example.com/-gpu":                       false,
		"example_com/gpu":                        false,
		"example.com/" + strings.Repeat("a", 64): false,
	} {
		if got := resourcename.IsExtended(v1.ResourceName(name)); got != want {
			t.Errorf("IsExtended(%q) = %v, want %v", name, got, want)
		}
	}
}

// Register refuses an unsupported version, an invalid resource name and a plugin it
// cannot reach, with upstream's messages, and counts every call by resource name.
func TestRegisterValidation(t *testing.T) {
	env := newTestEnv(t)
	p := startFakePlugin(t, env.dir, "bad.sock", "example.com/bad", nil, healthy("d1"))
	before := testutil.ToFloat64(RegistrationTotal.WithLabelValues("example.com/bad"))

	err := p.register(env.ctx, env.m.SocketPath(), "v1alpha1")
	if want := `requested API version "v1alpha1" is not supported by kubelet. Supported version is ["v1beta1"]`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Register with v1alpha1 = %v, want %q", err, want)
	}

	p.resource = "gpu"
	err = p.register(env.ctx, env.m.SocketPath(), pluginapi.Version)
	if want := `the ResourceName "gpu" is invalid`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Register of gpu = %v, want %q", err, want)
	}

	saved := dialTimeout
	dialTimeout = 200 * time.Millisecond
	t.Cleanup(func() { dialTimeout = saved })
	p.resource = "example.com/bad"
	p.socket = filepath.Join(env.dir, "nobody.sock")
	err = p.register(env.ctx, env.m.SocketPath(), pluginapi.Version)
	if want := "failed to dial device plugin"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Register of an unserved socket = %v, want %q", err, want)
	}

	if got := testutil.ToFloat64(RegistrationTotal.WithLabelValues("example.com/bad")) - before; got != 2 {
		t.Errorf("registrations counted for example.com/bad = %v, want 2", got)
	}
	if capacity, _, _ := env.m.GetCapacity(); len(capacity) != 0 {
		t.Errorf("capacity after refused registrations = %v, want none", capacity)
	}
}

// The capacity counts every device and allocatable the healthy ones, following the
// plugin's ListAndWatch updates; each update is signalled for the node status.
func TestCapacityFollowsDeviceHealth(t *testing.T) {
	env := newTestEnv(t)
	p := env.plugin("gpu.sock", "example.com/gpu", nil, []*pluginapi.Device{
		device("d1", pluginapi.Healthy), device("d2", pluginapi.Healthy), device("d3", pluginapi.Unhealthy),
	})
	<-env.m.CapacityChanged()
	assertCapacity(t, env.m, "example.com/gpu", 3, 2)
	if got := env.m.GetAllocatableDevices()["example.com/gpu"]; len(got) != 2 || got["d3"] != nil {
		t.Errorf("allocatable devices = %v, want d1 and d2", got)
	}

	p.setDevices([]*pluginapi.Device{device("d1", pluginapi.Unhealthy), device("d2", pluginapi.Healthy)})
	eventually(t, func() bool {
		_, allocatable, _ := env.m.GetCapacity()
		return allocatable.Name("example.com/gpu", resource.DecimalSI).Value() == 1
	}, "allocatable to drop to 1")
	<-env.m.CapacityChanged()
	assertCapacity(t, env.m, "example.com/gpu", 2, 1)
	if env.m.ShouldResetExtendedResourceCapacity() {
		t.Error("ShouldResetExtendedResourceCapacity with a checkpoint = true")
	}
}

func assertCapacity(t *testing.T, m *Manager, name string, capacity, allocatable int64) {
	t.Helper()
	c, a, deleted := m.GetCapacity()
	if got := c.Name(v1.ResourceName(name), resource.DecimalSI).Value(); got != capacity {
		t.Errorf("capacity of %s = %d, want %d", name, got, capacity)
	}
	if got := a.Name(v1.ResourceName(name), resource.DecimalSI).Value(); got != allocatable {
		t.Errorf("allocatable of %s = %d, want %d", name, got, allocatable)
	}
	if len(deleted) != 0 {
		t.Errorf("deleted resources = %v, want none", deleted)
	}
}

// When the plugin stops, its devices stay in the capacity with nothing allocatable for
// the grace period; then the resource is reported deleted once and forgotten.
func TestStoppedPluginGracePeriod(t *testing.T) {
	env := newTestEnv(t)
	p := env.plugin("gpu.sock", "example.com/gpu", nil, healthy("d1", "d2"))
	p.stop()
	env.waitStopped("example.com/gpu")
	assertCapacity(t, env.m, "example.com/gpu", 2, 0)

	env.clock.SetTime(env.clock.Now().Add(DefaultStopGracePeriod))
	assertCapacity(t, env.m, "example.com/gpu", 2, 0)

	env.clock.SetTime(env.clock.Now().Add(time.Second))
	capacity, allocatable, deleted := env.m.GetCapacity()
	if len(deleted) != 1 || deleted[0] != "example.com/gpu" {
		t.Errorf("deleted = %v, want [example.com/gpu]", deleted)
	}
	if _, ok := capacity["example.com/gpu"]; ok {
		t.Errorf("capacity still has the resource: %v", capacity)
	}
	if _, ok := allocatable["example.com/gpu"]; ok {
		t.Errorf("allocatable still has the resource: %v", allocatable)
	}
	if _, _, deleted := env.m.GetCapacity(); len(deleted) != 0 {
		t.Errorf("deleted again = %v, want none", deleted)
	}
	// The checkpoint no longer registers the resource.
	if _, registered, err := checkpoint.Read(env.dir); err != nil || len(registered) != 0 {
		t.Errorf("checkpoint registers %v (err %v), want nothing", registered, err)
	}
}

// A plugin that restarts registers again on the same socket: its devices are back and
// allocatable, and allocation goes to the new connection.
func TestReRegistrationAfterPluginRestart(t *testing.T) {
	env := newTestEnv(t)
	p := env.plugin("gpu.sock", "example.com/gpu", nil, healthy("d1", "d2"))
	p.restart(t)
	env.waitStopped("example.com/gpu")
	assertCapacity(t, env.m, "example.com/gpu", 2, 0)

	p.mu.Lock()
	p.devices = healthy("d1", "d2", "d3")
	p.mu.Unlock()
	env.register(p, 3)
	assertCapacity(t, env.m, "example.com/gpu", 3, 3)
	pod := testPod("u1", nil, container("c", map[string]int64{"example.com/gpu": 1}))
	env.setActive(pod)
	if err := env.admit(pod); err != nil {
		t.Fatalf("Allocate after re-registration: %v", err)
	}
	if calls := p.allocateCalls(); len(calls) != 1 {
		t.Errorf("Allocate calls = %v, want one", calls)
	}
}

// Two plugins may serve the same resource on different sockets; the resource stays
// registered until the last one stops.
func TestSecondPluginOfResource(t *testing.T) {
	env := newTestEnv(t)
	first := env.plugin("a.sock", "example.com/gpu", nil, healthy("d1"))
	second := env.plugin("b.sock", "example.com/gpu", nil, healthy("d1", "d2"))
	err := second.register(env.ctx, env.m.SocketPath(), pluginapi.Version)
	if want := "device plugin already connected: " + second.socket; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("second registration of the same socket = %v, want %q", err, want)
	}
	second.stop()
	eventually(t, func() bool {
		env.m.mu.Lock()
		defer env.m.mu.Unlock()
		return len(env.m.endpointStore["example.com/gpu"]) == 1
	}, "the second plugin to disconnect")
	if env.m.endpoints["example.com/gpu"].isStopped() {
		t.Error("the resource's endpoint is stopped while the first plugin runs")
	}
	first.stop()
	env.waitStopped("example.com/gpu")
}

// Starting the manager removes the sockets left in the directory, and only them, and
// serves a new kubelet.sock.
func TestStartRecreatesKubeletSocket(t *testing.T) {
	dir := shortTempDir(t)
	stale := map[string]bool{}
	for _, name := range []string{KubeletSocketName, "old-plugin.sock"} {
		ln, err := net.Listen("unix", filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		stale[name] = true
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.Write(dir, nil, nil); err != nil {
		t.Fatal(err)
	}

	env := newTestEnvIn(t, dir, nil)
	for _, kept := range []string{"notes.txt", "sub", checkpoint.FileName} {
		if _, err := os.Stat(filepath.Join(dir, kept)); err != nil {
			t.Errorf("%s was removed: %v", kept, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "old-plugin.sock")); !os.IsNotExist(err) {
		t.Errorf("stale plugin socket still there: %v", err)
	}
	// The new kubelet.sock serves registrations.
	env.plugin("gpu.sock", "example.com/gpu", nil, healthy("d1"))

	env.m.Stop(env.ctx)
	if _, err := os.Stat(env.m.SocketPath()); !os.IsNotExist(err) {
		t.Errorf("kubelet.sock after Stop: %v", err)
	}
	restarted := newTestEnvIn(t, dir, nil)
	if fi, err := os.Stat(restarted.m.SocketPath()); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("kubelet.sock after a new start: %v, %v", fi, err)
	}
	if err := restarted.m.Check(nil); err != nil {
		t.Errorf("health check: %v", err)
	}
}

// A directory with no file at all means the node was recreated.
func TestShouldResetExtendedResourceCapacity(t *testing.T) {
	dir := shortTempDir(t)
	m, err := New(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !m.ShouldResetExtendedResourceCapacity() {
		t.Error("empty directory: ShouldResetExtendedResourceCapacity = false")
	}
	if err := checkpoint.Write(dir, nil, nil); err != nil {
		t.Fatal(err)
	}
	if m.ShouldResetExtendedResourceCapacity() {
		t.Error("with a checkpoint: ShouldResetExtendedResourceCapacity = true")
	}
}
