package deviceplugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	testingclock "k8s.io/utils/clock/testing"
)

// fakePlugin is a device plugin serving the v1beta1 DevicePlugin service on a unix socket
// of the plugin directory, as a real plugin does.
type fakePlugin struct {
	pluginapi.UnimplementedDevicePluginServer

	resource string
	socket   string
	opts     *pluginapi.DevicePluginOptions
	server   *grpc.Server
	updates  chan []*pluginapi.Device
	done     chan struct{}

	mu        sync.Mutex
	devices   []*pluginapi.Device
	allocated [][]string // device IDs of each Allocate call
	preStarts [][]string // device IDs of each PreStartContainer call
	preferred []*pluginapi.ContainerPreferredAllocationRequest
	// allocResp builds the answer to Allocate; the default sets GPU=<ids>.
	allocResp func(ids []string) *pluginapi.ContainerAllocateResponse
	// prefer answers GetPreferredAllocation, or preferErr fails it.
	prefer    []string
	preferErr error
	// allocErr fails the next Allocate.
	allocErr error
}

func device(id, health string, numa ...int64) *pluginapi.Device {
	d := &pluginapi.Device{ID: id, Health: health}
	for _, n := range numa {
		if d.Topology == nil {
			d.Topology = &pluginapi.TopologyInfo{}
		}
		d.Topology.Nodes = append(d.Topology.Nodes, &pluginapi.NUMANode{ID: n})
	}
	return d
}

func healthy(ids ...string) []*pluginapi.Device {
	var out []*pluginapi.Device
	for _, id := range ids {
		out = append(out, device(id, pluginapi.Healthy))
	}
	return out
}

// startFakePlugin serves a plugin of resource on dir/endpoint.
func startFakePlugin(t *testing.T, dir, endpoint, resource string, opts *pluginapi.DevicePluginOptions, devices []*pluginapi.Device) *fakePlugin {
	t.Helper()
	if opts == nil {
		opts = &pluginapi.DevicePluginOptions{}
	}
	p := &fakePlugin{resource: resource, socket: filepath.Join(dir, endpoint), opts: opts, devices: devices}
	p.serve(t)
	t.Cleanup(p.stop)
	return p
}

func (p *fakePlugin) serve(t *testing.T) {
	t.Helper()
	_ = os.Remove(p.socket)
	ln, err := net.Listen("unix", p.socket)
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	p.mu.Lock()
	p.server = server
	p.updates = make(chan []*pluginapi.Device)
	p.done = make(chan struct{})
	p.mu.Unlock()
	go func() { _ = server.Serve(ln) }()
}

// stop stops serving, which ends the kubelet's ListAndWatch stream.
func (p *fakePlugin) stop() {
	p.mu.Lock()
	server, done := p.server, p.done
	p.server = nil
	p.mu.Unlock()
	if server == nil {
		return
	}
	close(done)
	server.Stop()
}

// restart serves the plugin again on the same socket, as a restarted plugin would.
func (p *fakePlugin) restart(t *testing.T) {
	p.stop()
	p.serve(t)
}

// register calls the kubelet's Registration service, as a plugin does.
func (p *fakePlugin) register(ctx context.Context, kubeletSocket, version string) error {
	conn, err := grpc.NewClient("passthrough:///localhost",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", kubeletSocket)
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: version, Endpoint: filepath.Base(p.socket), ResourceName: p.resource, Options: p.opts,
	})
	return err
}

// setDevices sends a new device list on ListAndWatch.
func (p *fakePlugin) setDevices(devices []*pluginapi.Device) {
	p.mu.Lock()
	p.devices = devices
	updates := p.updates
	p.mu.Unlock()
	updates <- devices
}

func (p *fakePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.opts, nil
}

func (p *fakePlugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	p.mu.Lock()
	devices, updates, done := p.devices, p.updates, p.done
	p.mu.Unlock()
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
		return err
	}
	for {
		select {
		case <-done:
			return nil
		case devices := <-updates:
			if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
				return err
			}
		}
	}
}

func (p *fakePlugin) GetPreferredAllocation(_ context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.preferred = append(p.preferred, r.ContainerRequests...)
	if p.preferErr != nil {
		return nil, p.preferErr
	}
	return &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{{DeviceIDs: p.prefer}}}, nil
}

func (p *fakePlugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.allocErr; err != nil {
		p.allocErr = nil
		return nil, err
	}
	resp := &pluginapi.AllocateResponse{}
	for _, req := range r.ContainerRequests {
		p.allocated = append(p.allocated, req.DevicesIds)
		answer := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{"DEVICES": joinIDs(req.DevicesIds)}}
		if p.allocResp != nil {
			answer = p.allocResp(req.DevicesIds)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, answer)
	}
	return resp, nil
}

func (p *fakePlugin) PreStartContainer(_ context.Context, r *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.preStarts = append(p.preStarts, r.DevicesIds)
	return &pluginapi.PreStartContainerResponse{}, nil
}

func (p *fakePlugin) allocateCalls() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]string(nil), p.allocated...)
}

func (p *fakePlugin) preStartCalls() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]string(nil), p.preStarts...)
}

func joinIDs(ids []string) string {
	out := ""
	for i, id := range ids {
		if i > 0 {
			out += ","
		}
		out += id
	}
	return out
}

// shortTempDir is a temporary directory with a path short enough for unix sockets
// (t.TempDir's, with the test's name, may exceed their 108 bytes).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// testEnv is a started manager on its own directory, with a fake clock and a settable
// list of active pods.
type testEnv struct {
	t     *testing.T
	ctx   context.Context
	dir   string
	clock *testingclock.FakePassiveClock
	m     *Manager

	mu     sync.Mutex
	active []*v1.Pod
	ready  bool
}

func newTestEnv(t *testing.T) *testEnv {
	return newTestEnvIn(t, shortTempDir(t), nil)
}

// newTestEnvIn starts a manager on dir; running are the containers found running at
// start, and sources are not ready until setReady when there are any.
func newTestEnvIn(t *testing.T, dir string, running []ContainerKey) *testEnv {
	t.Helper()
	logger, ctx := ktesting.NewTestContext(t)
	ctx = klog.NewContext(ctx, logger)
	env := &testEnv{t: t, ctx: ctx, dir: dir, clock: testingclock.NewFakePassiveClock(time.Now()), ready: len(running) == 0}
	m, err := New(Options{Dir: dir, Clock: env.clock})
	if err != nil {
		t.Fatal(err)
	}
	env.m = m
	err = m.Start(ctx, StartOptions{ActivePods: env.activePods, SourcesReady: env.sourcesReady, RunningContainers: running})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(ctx) })
	return env
}

func (e *testEnv) activePods() []*v1.Pod {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*v1.Pod(nil), e.active...)
}

func (e *testEnv) sourcesReady() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ready
}

func (e *testEnv) setReady() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ready = true
}

func (e *testEnv) setActive(pods ...*v1.Pod) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.active = pods
}

// plugin starts a fake plugin in the manager's directory and registers it, waiting
// until the manager has its first device list.
func (e *testEnv) plugin(endpoint, resource string, opts *pluginapi.DevicePluginOptions, devices []*pluginapi.Device) *fakePlugin {
	e.t.Helper()
	p := startFakePlugin(e.t, e.dir, endpoint, resource, opts, devices)
	e.register(p, len(devices))
	return p
}

func (e *testEnv) register(p *fakePlugin, devices int) {
	e.t.Helper()
	if err := p.register(e.ctx, e.m.SocketPath(), pluginapi.Version); err != nil {
		e.t.Fatalf("Register: %v", err)
	}
	e.waitCapacity(p.resource, int64(devices))
}

// waitCapacity waits until the resource's capacity is n, while its plugin is running.
func (e *testEnv) waitCapacity(resourceName string, n int64) {
	e.t.Helper()
	eventually(e.t, func() bool {
		e.m.mu.Lock()
		defer e.m.mu.Unlock()
		ep := e.m.endpoints[resourceName]
		total := e.m.healthyDevices[resourceName].Len() + e.m.unhealthyDevices[resourceName].Len()
		_, listed := e.m.allDevices[resourceName]
		return ep != nil && !ep.isStopped() && listed && int64(total) == n
	}, "capacity of %s to be %d", resourceName, n)
}

// waitStopped waits until the resource's plugin is seen disconnected.
func (e *testEnv) waitStopped(resourceName string) {
	e.t.Helper()
	eventually(e.t, func() bool {
		e.m.mu.Lock()
		defer e.m.mu.Unlock()
		_, connected := e.m.endpointStore[resourceName]
		return !connected
	}, "plugin of %s to disconnect", resourceName)
}

func eventually(t *testing.T, cond func() bool, what string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for "+what, args...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// container requests n of each resource (as limits and requests, as extended resources
// are given).
func container(name string, resources map[string]int64) v1.Container {
	list := v1.ResourceList{}
	for r, n := range resources {
		list[v1.ResourceName(r)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return v1.Container{Name: name, Resources: v1.ResourceRequirements{Limits: list, Requests: list}}
}

func testPod(uid string, initContainers []v1.Container, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "ns", UID: types.UID(uid)},
		Spec:       v1.PodSpec{InitContainers: initContainers, Containers: containers},
	}
}

// admit allocates for every container of the pod in admission's order.
func (e *testEnv) admit(pod *v1.Pod) error {
	for _, c := range append(append([]v1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if err := e.m.Allocate(e.ctx, pod, &c); err != nil {
			return err
		}
	}
	return nil
}
