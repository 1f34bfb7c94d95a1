package dra

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
)

const (
	testDriver = "gpu.example.com"
	testNode   = "worker"
	testNS     = "default"
)

// fakeDriver is a DRA kubelet plugin: for each claim it prepares one device per
// request of the claim's allocation ("<claim>-<request>"), whose CDI ID is
// "example.com/gpu=<claim>-<request>". Errors can be injected per claim name.
type fakeDriver struct {
	drapb.UnimplementedDRAPluginServer
	drahealth.UnimplementedDRAResourceHealthServer

	mu        sync.Mutex
	requests  map[string][]string // claim name -> requests to answer with
	failClaim map[string]string   // claim name -> error
	skipClaim map[string]bool     // claim name -> left out of the answer
	prepared  map[string]int      // claim UID -> NodePrepareResources calls
	hang      bool                // NodePrepareResources waits for the caller to give up
	released  map[string]int      // claim UID -> NodeUnprepareResources calls

	health       chan *drahealth.NodeWatchResourcesResponse
	healthOpened chan struct{}
}

func newFakeDriver() *fakeDriver {
	return &fakeDriver{
		requests: map[string][]string{}, failClaim: map[string]string{}, skipClaim: map[string]bool{},
		prepared: map[string]int{}, released: map[string]int{},
		health: make(chan *drahealth.NodeWatchResourcesResponse, 10), healthOpened: make(chan struct{}, 10),
	}
}

func (d *fakeDriver) NodePrepareResources(ctx context.Context, req *drapb.NodePrepareResourcesRequest) (*drapb.NodePrepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	resp := &drapb.NodePrepareResourcesResponse{Claims: map[string]*drapb.NodePrepareResourceResponse{}}
	for _, c := range req.Claims {
		d.prepared[c.Uid]++
		if d.skipClaim[c.Name] {
			continue
		}
		if msg := d.failClaim[c.Name]; msg != "" {
			resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Error: msg}
			continue
		}
		result := &drapb.NodePrepareResourceResponse{}
		requests := d.requests[c.Name]
		if requests == nil {
			requests = []string{"req"}
		}
		for _, r := range requests {
			result.Devices = append(result.Devices, &drapb.Device{
				RequestNames: []string{r}, PoolName: "pool", DeviceName: c.Name + "-" + r,
				CdiDeviceIds: []string{"example.com/gpu=" + c.Name + "-" + r},
			})
		}
		resp.Claims[c.Uid] = result
	}
	return resp, nil
}

func (d *fakeDriver) NodeUnprepareResources(_ context.Context, req *drapb.NodeUnprepareResourcesRequest) (*drapb.NodeUnprepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &drapb.NodeUnprepareResourcesResponse{Claims: map[string]*drapb.NodeUnprepareResourceResponse{}}
	for _, c := range req.Claims {
		d.released[c.Uid]++
		resp.Claims[c.Uid] = &drapb.NodeUnprepareResourceResponse{}
	}
	return resp, nil
}

func (d *fakeDriver) NodeWatchResources(_ *drahealth.NodeWatchResourcesRequest, stream drahealth.DRAResourceHealth_NodeWatchResourcesServer) error {
	d.healthOpened <- struct{}{}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case resp := <-d.health:
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

func (d *fakeDriver) calls(uid types.UID) (prepared, released int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.prepared[string(uid)], d.released[string(uid)]
}

// serveOptions choose the services a fake driver's server offers.
type serveOptions struct {
	service       string // drapb.DRAPluginService or drapbv1beta1.DRAPluginService
	healthService string // "", or one of the DRAResourceHealth services
}

// socketDir is a short directory for unix sockets (t.TempDir paths can exceed the
// socket path limit).
func socketDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "dra")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// serve runs the driver's gRPC server on endpoint until stop is called (or the test
// ends).
func serve(t *testing.T, d *fakeDriver, endpoint string, opts serveOptions) (stop func()) {
	t.Helper()
	_ = os.Remove(endpoint)
	l, err := net.Listen("unix", endpoint)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	if opts.service == drapbv1beta1.DRAPluginService {
		drapbv1beta1.RegisterDRAPluginServer(srv, drapbv1beta1.V1ServerWrapper{DRAPluginServer: d})
	} else {
		drapb.RegisterDRAPluginServer(srv, d)
	}
	switch opts.healthService {
	case drahealth.DRAResourceHealthService:
		drahealth.RegisterDRAResourceHealthServer(srv, d)
	case drahealthv1alpha1.DRAResourceHealthService:
		drahealthv1alpha1.RegisterDRAResourceHealthServer(srv, drahealth.V1ServerWrapper{Server: d})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			srv.Stop()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// newTestManager builds a manager on a fresh state directory and stops it at the end.
func newTestManager(t *testing.T, client kubernetes.Interface, opts Options) *Manager {
	t.Helper()
	if opts.StateDir == "" {
		opts.StateDir = t.TempDir()
	}
	if client != nil {
		opts.Client = client
	}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

// startDriver serves a fake driver and registers it with the manager.
func startDriver(t *testing.T, m *Manager, versions []string) (*fakeDriver, string, func()) {
	t.Helper()
	d := newFakeDriver()
	endpoint := filepath.Join(socketDir(t), "dra.sock")
	opts := serveOptions{service: drapb.DRAPluginService}
	for _, v := range versions {
		switch v {
		case drapbv1beta1.DRAPluginService:
			opts.service = v
		case drahealth.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService:
			opts.healthService = v
		}
	}
	stop := serve(t, d, endpoint, opts)
	timeout := 5 * time.Second
	if err := m.PluginHandler().RegisterPlugin(context.Background(), testDriver, endpoint, versions, &timeout); err != nil {
		t.Fatal(err)
	}
	return d, endpoint, stop
}

// allocatedClaim is a claim allocated by testDriver (one result per request) and
// reserved for the pods.
func allocatedClaim(name string, requests []string, pods ...*v1.Pod) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: types.UID("uid-" + name)},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}
	for _, r := range requests {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: r, Driver: testDriver, Pool: "pool", Device: name + "-" + r,
		})
	}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

// podWithClaim is a pod whose claim entry "gpu" names claimName and whose container
// "ctr" uses the whole claim.
func podWithClaim(name, claimName string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claimName}},
			Containers:     []v1.Container{{Name: "ctr", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
		},
	}
}

func fakeClient(objects ...runtime.Object) *fake.Clientset {
	return fake.NewClientset(objects...)
}

// eventually polls cond until it holds or 5 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func noPods() []*v1.Pod { return nil }
