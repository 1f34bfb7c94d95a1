package podresources

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubelet/pkg/apis/podresources/v1alpha1"
)

var always = v1.ContainerRestartPolicyAlways

// webPod is active: a plain init container, a sidecar, two containers and an ephemeral one.
func webPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec: v1.PodSpec{
			InitContainers:      []v1.Container{{Name: "setup"}, {Name: "proxy", RestartPolicy: &always}},
			Containers:          []v1.Container{{Name: "app"}, {Name: "log"}},
			EphemeralContainers: []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debug"}}},
		},
	}
}

// donePod is terminal: only GetPods knows it.
func donePod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "done", Namespace: "batch", UID: "uid-done"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "job"}}},
	}
}

func numa(id int64) *podresourcesv1.TopologyInfo {
	return &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: id}}}
}

var (
	gpu0   = &podresourcesv1.ContainerDevices{ResourceName: "example.com/gpu", DeviceIds: []string{"gpu0"}, Topology: numa(0)}
	gpu1   = &podresourcesv1.ContainerDevices{ResourceName: "example.com/gpu", DeviceIds: []string{"gpu1"}, Topology: numa(1)}
	nic1   = &podresourcesv1.ContainerDevices{ResourceName: "example.com/nic", DeviceIds: []string{"nic1"}}
	mem1G  = &podresourcesv1.ContainerMemory{MemoryType: "memory", Size: 1 << 30, Topology: numa(0)}
	mem2G  = &podresourcesv1.ContainerMemory{MemoryType: "memory", Size: 2 << 30, Topology: numa(0)}
	mem64G = &podresourcesv1.ContainerMemory{MemoryType: "memory", Size: 64 << 30, Topology: numa(0)}
	claim  = &podresourcesv1.DynamicResource{
		ClaimName: "gpu-claim", ClaimNamespace: "default",
		ClaimResources: []*podresourcesv1.ClaimResource{{
			DriverName: "gpu.example.com", PoolName: "node1", DeviceName: "gpu-0",
			CdiDevices: []*podresourcesv1.CDIDevice{{Name: "example.com/gpu=gpu0"}},
		}},
	}
)

// fullProviders assigns resources to web's app and proxy and to done's job.
func fullProviders() (Providers, *fakeDevices) {
	devices := &fakeDevices{
		byContainer: map[string][]*podresourcesv1.ContainerDevices{
			"uid-web/app": {gpu0}, "uid-web/proxy": {nic1}, "uid-done/job": {gpu1},
		},
		allocatable: []*podresourcesv1.ContainerDevices{gpu0, gpu1, nic1},
	}
	return Providers{
		Pods:    &fakePods{active: []*v1.Pod{webPod()}, terminal: []*v1.Pod{donePod()}},
		Devices: devices,
		CPUs: &fakeCPUs{
			byContainer: map[string][]int64{"uid-web/app": {2, 3}},
			byPod:       map[string][]int64{"uid-web": {4, 5}},
			allocatable: []int64{0, 1, 2, 3, 4, 5, 6, 7},
		},
		Memory: &fakeMemory{
			byContainer: map[string][]*podresourcesv1.ContainerMemory{"uid-web/app": {mem1G}},
			byPod:       map[string][]*podresourcesv1.ContainerMemory{"uid-web": {mem2G}},
			allocatable: []*podresourcesv1.ContainerMemory{mem64G},
		},
		DynamicResources: &fakeDRA{byContainer: map[string][]*podresourcesv1.DynamicResource{"uid-web/app": {claim}}},
	}, devices
}

// webResources is web as v1 describes it: the sidecar, then the containers; no plain init
// container, no ephemeral container.
func webResources() *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{
		Name: "web", Namespace: "default",
		Containers: []*podresourcesv1.ContainerResources{
			{Name: "proxy", Devices: []*podresourcesv1.ContainerDevices{nic1}},
			{
				Name: "app", Devices: []*podresourcesv1.ContainerDevices{gpu0}, CpuIds: []int64{2, 3},
				Memory: []*podresourcesv1.ContainerMemory{mem1G}, DynamicResources: []*podresourcesv1.DynamicResource{claim},
			},
			{Name: "log"},
		},
	}
}

// served is a running Serve with clients of both versions.
type served struct {
	path     string
	metrics  *Metrics
	v1       podresourcesv1.PodResourcesListerClient
	v1alpha1 v1alpha1.PodResourcesListerClient
	cancel   context.CancelFunc
	done     chan error
}

// serve runs Serve on a socket under a fresh root dir, as the kubelet lays it out.
func serve(t *testing.T, cfg Config) *served {
	t.Helper()
	return serveAt(t, SocketPath(t.TempDir()), cfg)
}

func serveAt(t *testing.T, path string, cfg Config) *served {
	t.Helper()
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{path: path, metrics: cfg.Metrics, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- Serve(ctx, path, cfg) }()
	waitListening(t, path)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() {
		conn.Close()
		s.stop(t)
	})
	s.v1 = podresourcesv1.NewPodResourcesListerClient(conn)
	s.v1alpha1 = v1alpha1.NewPodResourcesListerClient(conn)
	return s
}

// waitListening returns once path accepts connections: a gRPC client that dials too
// early backs off for a second before it tries again.
func waitListening(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s: %v", path, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// stop ends Serve and checks it returned nil in time; a second call does nothing.
func (s *served) stop(t *testing.T) {
	t.Helper()
	s.cancel()
	if s.done == nil {
		return
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("Serve returned %v after its context ended, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("Serve did not return after its context ended")
	}
	s.done = nil
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func assertProto(t *testing.T, what string, got, want proto.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Errorf("%s:\n got  %v\n want %v", what, got, want)
	}
}

func TestV1ListShowsActivePodsWithAllResources(t *testing.T) {
	providers, devices := fullProviders()
	s := serve(t, Config{Providers: providers, Options: DefaultOptions()})

	got, err := s.v1.List(callCtx(t), &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	assertProto(t, "List", got, &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{webResources()}})
	if n := devices.updates.Load(); n != 1 {
		t.Errorf("List freed terminated pods' devices %d times, want once", n)
	}
	assertCount(t, s.metrics.requestsTotal, apiV1, 1)
	assertCount(t, s.metrics.requestsList, apiV1, 1)
}

func TestV1ListWithoutUseActivePodsShowsTerminalPods(t *testing.T) {
	providers, _ := fullProviders()
	s := serve(t, Config{Providers: providers, Options: Options{UseActivePods: false}})

	got, err := s.v1.List(callCtx(t), &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	done := &podresourcesv1.PodResources{Name: "done", Namespace: "batch", Containers: []*podresourcesv1.ContainerResources{
		{Name: "job", Devices: []*podresourcesv1.ContainerDevices{gpu1}},
	}}
	assertProto(t, "List", got, &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{webResources(), done}})
}

func TestV1PodLevelResourceManagersAddPodResources(t *testing.T) {
	providers, _ := fullProviders()
	s := serve(t, Config{Providers: providers, Options: Options{UseActivePods: true, PodLevelResourceManagers: true}})

	want := webResources()
	want.CpuIds = []int64{4, 5}
	want.Memory = []*podresourcesv1.ContainerMemory{mem2G}
	list, err := s.v1.List(callCtx(t), &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	assertProto(t, "List", list, &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{want}})
	get, err := s.v1.Get(callCtx(t), &podresourcesv1.GetPodResourcesRequest{PodName: "web", PodNamespace: "default"})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	assertProto(t, "Get", get, &podresourcesv1.GetPodResourcesResponse{PodResources: want})
}

func TestV1GetReturnsOnePod(t *testing.T) {
	providers, devices := fullProviders()
	s := serve(t, Config{Providers: providers, Options: DefaultOptions()})

	got, err := s.v1.Get(callCtx(t), &podresourcesv1.GetPodResourcesRequest{PodName: "web", PodNamespace: "default"})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	assertProto(t, "Get", got, &podresourcesv1.GetPodResourcesResponse{PodResources: webResources()})
	if n := devices.updates.Load(); n != 0 {
		t.Errorf("Get freed terminated pods' devices %d times; upstream's Get does not", n)
	}
	assertCount(t, s.metrics.requestsGet, apiV1, 1)
	assertCount(t, s.metrics.errorsGet, apiV1, 0)
}

func TestV1GetMissingOrTerminalPodIsNotFound(t *testing.T) {
	providers, _ := fullProviders()
	s := serve(t, Config{Providers: providers, Options: DefaultOptions()})

	for _, req := range []*podresourcesv1.GetPodResourcesRequest{
		{PodName: "nope", PodNamespace: "default"},
		{PodName: "done", PodNamespace: "batch"}, // terminal: the pods provider does not find it
	} {
		_, err := s.v1.Get(callCtx(t), req)
		want := "pod " + req.PodName + " in namespace " + req.PodNamespace + " not found"
		if st, _ := status.FromError(err); st.Code() != codes.Unknown || st.Message() != want {
			t.Errorf("Get(%s/%s) = %v, want code Unknown and %q", req.PodNamespace, req.PodName, err, want)
		}
	}
	assertCount(t, s.metrics.requestsGet, apiV1, 2)
	assertCount(t, s.metrics.errorsGet, apiV1, 2)
}

func TestV1GetAllocatableResources(t *testing.T) {
	providers, _ := fullProviders()
	s := serve(t, Config{Providers: providers, Options: DefaultOptions()})

	got, err := s.v1.GetAllocatableResources(callCtx(t), &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatalf("GetAllocatableResources: %v", err)
	}
	assertProto(t, "GetAllocatableResources", got, &podresourcesv1.AllocatableResourcesResponse{
		Devices: []*podresourcesv1.ContainerDevices{gpu0, gpu1, nic1},
		CpuIds:  []int64{0, 1, 2, 3, 4, 5, 6, 7},
		Memory:  []*podresourcesv1.ContainerMemory{mem64G},
	})
	assertCount(t, s.metrics.requestsGetAllocatable, apiV1, 1)
}

func TestNilProvidersReportNothing(t *testing.T) {
	t.Run("only pods", func(t *testing.T) {
		s := serve(t, Config{Providers: Providers{Pods: &fakePods{active: []*v1.Pod{webPod()}}}, Options: Options{UseActivePods: true, PodLevelResourceManagers: true}})
		bare := &podresourcesv1.PodResources{Name: "web", Namespace: "default", Containers: []*podresourcesv1.ContainerResources{
			{Name: "proxy"}, {Name: "app"}, {Name: "log"},
		}}
		list, err := s.v1.List(callCtx(t), &podresourcesv1.ListPodResourcesRequest{})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		assertProto(t, "List", list, &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{bare}})
		get, err := s.v1.Get(callCtx(t), &podresourcesv1.GetPodResourcesRequest{PodName: "web", PodNamespace: "default"})
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		assertProto(t, "Get", get, &podresourcesv1.GetPodResourcesResponse{PodResources: bare})
		alpha, err := s.v1alpha1.List(callCtx(t), &v1alpha1.ListPodResourcesRequest{})
		if err != nil {
			t.Fatalf("v1alpha1 List: %v", err)
		}
		assertProto(t, "v1alpha1 List", alpha, &v1alpha1.ListPodResourcesResponse{PodResources: []*v1alpha1.PodResources{
			{Name: "web", Namespace: "default", Containers: []*v1alpha1.ContainerResources{{Name: "app"}, {Name: "log"}}},
		}})
	})
	t.Run("none", func(t *testing.T) {
		s := serve(t, Config{Options: DefaultOptions()})
		list, err := s.v1.List(callCtx(t), &podresourcesv1.ListPodResourcesRequest{})
		if err != nil || len(list.PodResources) != 0 {
			t.Errorf("List = %v, %v; want no pods", list, err)
		}
		alloc, err := s.v1.GetAllocatableResources(callCtx(t), &podresourcesv1.AllocatableResourcesRequest{})
		if err != nil {
			t.Fatalf("GetAllocatableResources: %v", err)
		}
		assertProto(t, "GetAllocatableResources", alloc, &podresourcesv1.AllocatableResourcesResponse{})
		if _, err := s.v1.Get(callCtx(t), &podresourcesv1.GetPodResourcesRequest{PodName: "web", PodNamespace: "default"}); status.Convert(err).Message() != "pod web in namespace default not found" {
			t.Errorf("Get without a pods provider = %v, want not found", err)
		}
	})
}

func TestV1alpha1ListShowsDevicesOfAllPods(t *testing.T) {
	providers, devices := fullProviders()
	s := serve(t, Config{Providers: providers, Options: DefaultOptions()})

	got, err := s.v1alpha1.List(callCtx(t), &v1alpha1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	// All pods, terminal ones too; regular containers only; devices without topology.
	assertProto(t, "v1alpha1 List", got, &v1alpha1.ListPodResourcesResponse{PodResources: []*v1alpha1.PodResources{
		{Name: "web", Namespace: "default", Containers: []*v1alpha1.ContainerResources{
			{Name: "app", Devices: []*v1alpha1.ContainerDevices{{ResourceName: "example.com/gpu", DeviceIds: []string{"gpu0"}}}},
			{Name: "log"},
		}},
		{Name: "done", Namespace: "batch", Containers: []*v1alpha1.ContainerResources{
			{Name: "job", Devices: []*v1alpha1.ContainerDevices{{ResourceName: "example.com/gpu", DeviceIds: []string{"gpu1"}}}},
		}},
	}})
	if n := devices.updates.Load(); n != 1 {
		t.Errorf("List freed terminated pods' devices %d times, want once", n)
	}
	assertCount(t, s.metrics.requestsTotal, apiV1alpha1, 1)
	assertCount(t, s.metrics.requestsList, apiV1alpha1, 0)
}

func TestRateLimitRejectsWithResourceExhausted(t *testing.T) {
	limiter := &countingLimiter{}
	limiter.left.Store(3)
	providers, _ := fullProviders()
	s := serve(t, Config{Providers: providers, Options: DefaultOptions(), Limiter: limiter})

	for i := range 3 {
		if _, err := s.v1.GetAllocatableResources(callCtx(t), &podresourcesv1.AllocatableResourcesRequest{}); err != nil {
			t.Fatalf("request %d within the limit: %v", i, err)
		}
	}
	calls := map[string]func() error{
		"v1 List":      func() error { _, err := s.v1.List(callCtx(t), &podresourcesv1.ListPodResourcesRequest{}); return err },
		"v1 Get":       func() error { _, err := s.v1.Get(callCtx(t), &podresourcesv1.GetPodResourcesRequest{}); return err },
		"v1alpha List": func() error { _, err := s.v1alpha1.List(callCtx(t), &v1alpha1.ListPodResourcesRequest{}); return err },
	}
	for name, call := range calls {
		err := call()
		if st := status.Convert(err); st.Code() != codes.ResourceExhausted || st.Message() != "rejected by rate limit" {
			t.Errorf("%s over the limit = %v, want ResourceExhausted: rejected by rate limit", name, err)
		}
	}
	// Rejected requests never reach a handler, so they are not counted.
	assertCount(t, s.metrics.requestsTotal, apiV1, 3)
}

func TestDefaultRateLimitTripsWhenHammered(t *testing.T) {
	s := serve(t, Config{Options: DefaultOptions()})
	if _, err := s.v1.List(callCtx(t), &podresourcesv1.ListPodResourcesRequest{}); err != nil {
		t.Fatalf("first request: %v", err)
	}
	// 200 requests at once against a 10-deep bucket refilled at 100/s: far more than the
	// bucket and its refill can take while they are in flight.
	var wg sync.WaitGroup
	var mu sync.Mutex
	rejected := 0
	for range 200 {
		wg.Go(func() {
			_, err := s.v1.List(callCtx(t), &podresourcesv1.ListPodResourcesRequest{})
			if errors.Is(err, ErrLimitExceeded) || status.Code(err) == codes.ResourceExhausted {
				mu.Lock()
				rejected++
				mu.Unlock()
			} else if err != nil {
				t.Errorf("List: %v", err)
			}
		})
	}
	wg.Wait()
	if rejected == 0 {
		t.Errorf("200 concurrent requests were all served; the default rate limit never tripped")
	}
}

func TestServeReplacesStaleSocket(t *testing.T) {
	path := SocketPath(t.TempDir())
	// A socket a previous run left behind: bound, then closed without unlinking.
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}

	s := serveAt(t, path, Config{Options: DefaultOptions()})
	if _, err := s.v1.List(callCtx(t), &podresourcesv1.ListPodResourcesRequest{}); err != nil {
		t.Fatalf("List over the replaced socket: %v", err)
	}
	// A second run replaces the socket the first one left.
	s.stop(t)
	s2 := serveAt(t, path, Config{Options: DefaultOptions()})
	if _, err := s2.v1.List(callCtx(t), &podresourcesv1.ListPodResourcesRequest{}); err != nil {
		t.Fatalf("List after a restart: %v", err)
	}
}

func TestListenCreatesDirectory0750(t *testing.T) {
	path := SocketPath(filepath.Join(t.TempDir(), "root"))
	l, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	info, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm&^0o750 != 0 {
		t.Errorf("socket directory mode %v, want at most 0750", perm)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket at %s: %v, %v", path, fi, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("socket directory holds %d entries, want only the socket (no temporary name left)", len(entries))
	}
}

func TestServeFailsWhenSocketCannotBeCreated(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The socket's directory would have to be under a regular file.
	err := Serve(context.Background(), filepath.Join(file, DirName, SocketName), Config{})
	if err == nil {
		t.Fatal("Serve under a regular file returned nil, want an error")
	}
}

func TestSocketPath(t *testing.T) {
	if got, want := SocketPath("/var/lib/kubelet"), "/var/lib/kubelet/pod-resources/kubelet.sock"; got != want {
		t.Errorf("SocketPath = %q, want %q", got, want)
	}
}

func TestMetricsRegisterWithUpstreamNames(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			t.Fatalf("register: %v", err)
		}
	}
	for _, c := range []*prometheus.CounterVec{m.requestsTotal, m.requestsList, m.requestsGetAllocatable, m.requestsGet, m.errorsList, m.errorsGetAllocatable, m.errorsGet} {
		c.WithLabelValues(apiV1)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		got[f.GetName()] = true
		if l := f.GetMetric()[0].GetLabel(); len(l) != 1 || l[0].GetName() != "server_api_version" {
			t.Errorf("%s labels %v, want server_api_version only", f.GetName(), l)
		}
	}
	for _, name := range []string{
		"kubelet_pod_resources_endpoint_requests_total", "kubelet_pod_resources_endpoint_requests_list",
		"kubelet_pod_resources_endpoint_requests_get_allocatable", "kubelet_pod_resources_endpoint_errors_list",
		"kubelet_pod_resources_endpoint_errors_get_allocatable", "kubelet_pod_resources_endpoint_requests_get",
		"kubelet_pod_resources_endpoint_errors_get",
	} {
		if !got[name] {
			t.Errorf("family %s missing", name)
		}
	}
}

func TestDefaultLimiterIsUpstreamsBucket(t *testing.T) {
	l, ok := rateLimiter(context.Background(), nil).(*rate.Limiter)
	if !ok {
		t.Fatalf("default limiter is %T, want *rate.Limiter", l)
	}
	if l.Limit() != DefaultQPS || l.Burst() != DefaultBurstTokens || DefaultQPS != 100 || DefaultBurstTokens != 10 {
		t.Errorf("default limiter %v/s burst %d, want upstream's 100/s burst 10", l.Limit(), l.Burst())
	}
}

func assertCount(t *testing.T, c *prometheus.CounterVec, version string, want float64) {
	t.Helper()
	if got := testutil.ToFloat64(c.WithLabelValues(version)); got != want {
		t.Errorf("counter{server_api_version=%q} = %v, want %v", version, got, want)
	}
}
