package csi

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

const (
	testDriver = "d.example.com"
	testNode   = "node-1"
)

// fakeDriver is a CSI driver serving the identity and node services on a unix socket.
// Stage and publish create the paths they are given (and a file inside, as a mount
// would show), unstage and unpublish remove them; no real mounts. Every request is
// recorded.
type fakeDriver struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer

	endpoint string

	mu         sync.Mutex
	nodeID     string
	maxVolumes int64
	topology   map[string]string
	caps       []csipb.NodeServiceCapability_RPC_Type
	// errs makes a method fail, by name.
	errs map[string]error
	// keepTarget makes unpublish leave an empty target, as some drivers do.
	keepTarget bool
	// usage is what NodeGetVolumeStats reports.
	usage []*csipb.VolumeUsage
	// requests are the requests received, in order.
	requests []proto.Message
}

func startFakeDriver(t *testing.T, caps ...csipb.NodeServiceCapability_RPC_Type) *fakeDriver {
	t.Helper()
	// Socket paths are limited to about 100 bytes; t.TempDir() can be longer.
	dir, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &fakeDriver{endpoint: filepath.Join(dir, "csi.sock"), nodeID: "driver-node-1", caps: caps, errs: map[string]error{}}
	ln, err := net.Listen("unix", d.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csipb.RegisterIdentityServer(srv, d)
	csipb.RegisterNodeServer(srv, d)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return d
}

func (d *fakeDriver) setErr(method string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errs[method] = err
}

// record notes a request and returns the error configured for its method.
func (d *fakeDriver) record(method string, req proto.Message) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.requests = append(d.requests, req)
	return d.errs[method]
}

func (d *fakeDriver) setUsage(usage []*csipb.VolumeUsage) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.usage = usage
}

// received returns the requests of type T received so far.
func received[T proto.Message](d *fakeDriver) []T {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []T
	for _, r := range d.requests {
		if r, ok := r.(T); ok {
			out = append(out, r)
		}
	}
	return out
}

func (d *fakeDriver) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: testDriver, VendorVersion: "1.0.0"}, nil
}

func (d *fakeDriver) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{}, nil
}

func (d *fakeDriver) NodeGetInfo(_ context.Context, req *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	if err := d.record("NodeGetInfo", req); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &csipb.NodeGetInfoResponse{NodeId: d.nodeID, MaxVolumesPerNode: d.maxVolumes}
	if d.topology != nil {
		resp.AccessibleTopology = &csipb.Topology{Segments: d.topology}
	}
	return resp, nil
}

func (d *fakeDriver) NodeGetCapabilities(_ context.Context, req *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	if err := d.record("NodeGetCapabilities", req); err != nil {
		return nil, err
	}
	resp := &csipb.NodeGetCapabilitiesResponse{}
	for _, c := range d.caps {
		resp.Capabilities = append(resp.Capabilities, &csipb.NodeServiceCapability{
			Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: c}},
		})
	}
	return resp, nil
}

func (d *fakeDriver) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	if err := d.record("NodeStageVolume", req); err != nil {
		return nil, err
	}
	return &csipb.NodeStageVolumeResponse{}, os.WriteFile(filepath.Join(req.StagingTargetPath, "staged"), nil, 0o644)
}

func (d *fakeDriver) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	if err := d.record("NodeUnstageVolume", req); err != nil {
		return nil, err
	}
	return &csipb.NodeUnstageVolumeResponse{}, os.RemoveAll(filepath.Join(req.StagingTargetPath, "staged"))
}

func (d *fakeDriver) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	if err := d.record("NodePublishVolume", req); err != nil {
		return nil, err
	}
	if req.GetVolumeCapability().GetBlock() != nil { // the "device" is a file
		return &csipb.NodePublishVolumeResponse{}, os.WriteFile(req.TargetPath, []byte("device"), 0o644)
	}
	if err := os.MkdirAll(req.TargetPath, 0o750); err != nil {
		return nil, err
	}
	return &csipb.NodePublishVolumeResponse{}, os.WriteFile(filepath.Join(req.TargetPath, "published"), nil, 0o644)
}

func (d *fakeDriver) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	if err := d.record("NodeUnpublishVolume", req); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(req.TargetPath); err == nil && !fi.IsDir() { // a block "device"
		return &csipb.NodeUnpublishVolumeResponse{}, os.Remove(req.TargetPath)
	}
	if err := os.RemoveAll(filepath.Join(req.TargetPath, "published")); err != nil {
		return nil, err
	}
	d.mu.Lock()
	keep := d.keepTarget
	d.mu.Unlock()
	if keep {
		return &csipb.NodeUnpublishVolumeResponse{}, nil
	}
	return &csipb.NodeUnpublishVolumeResponse{}, os.Remove(req.TargetPath)
}

func (d *fakeDriver) NodeGetVolumeStats(_ context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	if err := d.record("NodeGetVolumeStats", req); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return &csipb.NodeGetVolumeStatsResponse{Usage: d.usage}, nil
}

func (d *fakeDriver) NodeExpandVolume(_ context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	if err := d.record("NodeExpandVolume", req); err != nil {
		return nil, err
	}
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}, nil
}

// newStandaloneManager returns a manager without API client in a fresh root dir,
// with the driver registered.
func newStandaloneManager(t *testing.T, d *fakeDriver) *Manager {
	t.Helper()
	m := New(Config{RootDir: t.TempDir(), NodeName: testNode})
	if err := m.RegisterPlugin(context.Background(), testDriver, d.endpoint, []string{"1.0.0"}, nil); err != nil {
		t.Fatalf("RegisterPlugin: %v", err)
	}
	return m
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func assertMissing(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("%s exists (err %v), want it removed", path, err)
	}
}

func assertExists(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("%s: %v, want it to exist", path, err)
	}
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}
