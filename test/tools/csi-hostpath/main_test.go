package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// lockedBuffer collects the driver's log; the gRPC handlers write from
// their own goroutines while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type env struct {
	base  string
	cfg   config
	logs  *lockedBuffer
	node  csi.NodeClient
	ident csi.IdentityClient
	ctrl  csi.ControllerClient
	reg   registerapi.RegistrationClient
	stop  context.CancelFunc
	done  chan error // run's result
}

// start runs the driver in-process with sockets and state in a temp dir.
func start(t *testing.T, mutate func(*config)) *env {
	t.Helper()
	base := t.TempDir()
	// Registered after TempDir, so it runs before the directory is removed:
	// whatever a failed test left mounted goes first.
	t.Cleanup(func() { unmountUnder(t, base) })

	cfg := config{
		driverName:      "hostpath.csi.nodelet.test",
		endpoint:        filepath.Join(base, "csi.sock"),
		registrationDir: filepath.Join(base, "registry"),
		nodeID:          "node-1",
		stateDir:        filepath.Join(base, "state"),
		stage:           true,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	e := &env{base: base, cfg: cfg, logs: &lockedBuffer{}, done: make(chan error, 1)}
	d := &driver{cfg: cfg, log: log.New(e.logs, "", 0)}
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	go func() { e.done <- d.run(ctx) }()
	waitFor(t, "registration socket", func() bool { _, err := os.Stat(cfg.regSocket()); return err == nil })

	dial := func(path string) *grpc.ClientConn {
		conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	conn := dial(cfg.endpoint)
	e.node, e.ident, e.ctrl = csi.NewNodeClient(conn), csi.NewIdentityClient(conn), csi.NewControllerClient(conn)
	e.reg = registerapi.NewRegistrationClient(dial(cfg.regSocket()))
	t.Cleanup(func() {
		cancel()
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
			t.Error("driver did not stop")
		}
	})
	return e
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// requireMount skips the test where bind mounts are not allowed.
func requireMount(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("bind mounts not permitted: %v", err)
		}
		t.Fatal(err)
	}
	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
}

// mountsUnder lists the mount points below dir, deepest first.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var mps []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(unescapeOctal(f[4]), dir+"/") {
			mps = append(mps, unescapeOctal(f[4]))
		}
	}
	sort.Slice(mps, func(i, j int) bool { return len(mps[i]) > len(mps[j]) })
	return mps
}

func unmountUnder(t *testing.T, dir string) {
	for _, mp := range mountsUnder(t, dir) {
		t.Logf("cleanup: unmounting leftover %s", mp)
		if err := unix.Unmount(mp, 0); err != nil {
			_ = unix.Unmount(mp, unix.MNT_DETACH)
		}
	}
}

func mountCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func mustMounted(t *testing.T, path string, want bool) {
	t.Helper()
	got, err := isMountPoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("%s mounted = %t, want %t", path, got, want)
	}
}

func mustNotExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s: want it gone, stat says %v", path, err)
	}
}

// ok(call(...))(t) returns call's response, failing t on an error. (Go
// passes a multi-value call only as a function's entire argument list.)
func ok[T any](resp T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
}

// csiLines returns the logged CSI calls whose method starts with prefix.
func (e *env) csiLines(prefix string) []string {
	var out []string
	for _, l := range strings.Split(e.logs.String(), "\n") {
		if strings.HasPrefix(l, "CSI "+prefix) {
			out = append(out, l)
		}
	}
	return out
}

func TestIdentityAndRegistration(t *testing.T) {
	e := start(t, nil)
	ctx := context.Background()

	info := ok(e.ident.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{}))(t)
	if info.Name != e.cfg.driverName || info.VendorVersion == "" {
		t.Errorf("GetPluginInfo = %v", info)
	}
	caps := ok(e.ident.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{}))(t)
	if len(caps.Capabilities) != 1 || caps.Capabilities[0].GetService().GetType() != csi.PluginCapability_Service_CONTROLLER_SERVICE {
		t.Errorf("GetPluginCapabilities = %v", caps)
	}
	if p := ok(e.ident.Probe(ctx, &csi.ProbeRequest{}))(t); !p.GetReady().GetValue() {
		t.Errorf("Probe = %v", p)
	}

	pi := ok(e.reg.GetInfo(ctx, &registerapi.InfoRequest{}))(t)
	if pi.Type != "CSIPlugin" || pi.Name != e.cfg.driverName || pi.Endpoint != e.cfg.endpoint ||
		!reflect.DeepEqual(pi.SupportedVersions, []string{"1.0.0"}) {
		t.Errorf("GetInfo = %v", pi)
	}
	ok(e.reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}))(t)
	select {
	case err := <-e.done:
		t.Fatalf("driver stopped after a successful registration: %v", err)
	case <-time.After(100 * time.Millisecond):
	}

	// A failed registration ends the driver with an error and removes both sockets.
	ok(e.reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{Error: "boom"}))(t)
	select {
	case err := <-e.done:
		if err == nil || !strings.Contains(err.Error(), "boom") {
			t.Errorf("run = %v, want the registration error", err)
		}
		e.done <- err // for start's cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("driver kept running after a failed registration")
	}
	mustNotExist(t, e.cfg.endpoint)
	mustNotExist(t, e.cfg.regSocket())
}

func TestShutdownRemovesSockets(t *testing.T) {
	e := start(t, nil)
	e.stop()
	if err := <-e.done; err != nil {
		t.Errorf("run = %v", err)
	}
	e.done <- nil
	mustNotExist(t, e.cfg.endpoint)
	mustNotExist(t, e.cfg.regSocket())
}

func TestNodeInfoAndCapabilities(t *testing.T) {
	e := start(t, func(c *config) {
		c.maxVolumes, c.topology = 3, map[string]string{"topology.nodelet.test/zone": "a"}
		c.expand, c.stats, c.mountGroup, c.attachRequired = true, true, true, true
	})
	ctx := context.Background()

	ni := ok(e.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{}))(t)
	if ni.NodeId != "node-1" || ni.MaxVolumesPerNode != 3 || ni.AccessibleTopology.GetSegments()["topology.nodelet.test/zone"] != "a" {
		t.Errorf("NodeGetInfo = %v", ni)
	}
	var got []csi.NodeServiceCapability_RPC_Type
	for _, c := range ok(e.node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{}))(t).Capabilities {
		got = append(got, c.GetRpc().GetType())
	}
	want := []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS, csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NodeGetCapabilities = %v, want %v", got, want)
	}
	if n := len(ok(e.ident.GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{}))(t).Capabilities); n != 2 {
		t.Errorf("want CONTROLLER_SERVICE and VOLUME_ACCESSIBILITY_CONSTRAINTS, got %d capabilities", n)
	}
	if n := len(ok(e.ctrl.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{}))(t).Capabilities); n != 2 {
		t.Errorf("want CREATE_DELETE_VOLUME and PUBLISH_UNPUBLISH_VOLUME, got %d capabilities", n)
	}
	cp := ok(e.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: "v", NodeId: "node-1", VolumeCapability: mountCap()}))(t)
	if cp.PublishContext["attached"] != "true" {
		t.Errorf("ControllerPublishVolume = %v", cp)
	}
	if got := ok(e.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: "v", VolumePath: e.base,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}}))(t); got.CapacityBytes != 1<<30 {
		t.Errorf("NodeExpandVolume = %v", got)
	}

	var topo topologyFlag = map[string]string{}
	if err := topo.Set("a=b"); err != nil || topo["a"] != "b" || topo.Set("novalue") == nil {
		t.Errorf("topology flag: %v %v", topo, err)
	}
}

func TestStagePublishLifecycle(t *testing.T) {
	requireMount(t)
	e := start(t, nil)
	ctx := context.Background()
	volDir := filepath.Join(e.cfg.stateDir, "vol1")
	staging := filepath.Join(e.base, "plugins/kubernetes.io/csi/hostpath/abc/globalmount")
	target := filepath.Join(e.base, "pods/uid1/volumes/kubernetes.io~csi/pv1/mount")

	cv := ok(e.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "vol1", CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}}))(t)
	if cv.Volume.VolumeId != "vol1" || cv.Volume.CapacityBytes != 1<<20 {
		t.Errorf("CreateVolume = %v", cv)
	}
	if fi, err := os.Stat(volDir); err != nil || !fi.IsDir() {
		t.Fatalf("volume dir: %v", err)
	}

	stage := &csi.NodeStageVolumeRequest{VolumeId: "vol1", StagingTargetPath: staging, VolumeCapability: mountCap(),
		PublishContext: map[string]string{"attached": "true"}, VolumeContext: map[string]string{"k": "v"}}
	for i := 0; i < 2; i++ { // the second call must be a no-op
		ok(e.node.NodeStageVolume(ctx, stage))(t)
	}
	mustMounted(t, staging, true)
	if n := len(mountsUnder(t, e.base)); n != 1 {
		t.Fatalf("%d mounts after staging twice, want 1", n)
	}
	var rec stageRecord
	if data, err := os.ReadFile(volDir + ".stage.json"); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.StagingTargetPath != staging || rec.PublishContext["attached"] != "true" || rec.VolumeContext["k"] != "v" {
		t.Errorf("stage record = %+v", rec)
	}
	if err := os.WriteFile(filepath.Join(staging, "hello"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}

	publish := &csi.NodePublishVolumeRequest{VolumeId: "vol1", StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: mountCap(), VolumeContext: map[string]string{"csi.storage.k8s.io/pod.name": "p1"}}
	for i := 0; i < 2; i++ {
		ok(e.node.NodePublishVolume(ctx, publish))(t)
	}
	mustMounted(t, target, true)
	if n := len(mountsUnder(t, e.base)); n != 2 {
		t.Fatalf("%d mounts after publishing twice, want 2", n)
	}
	if data, err := os.ReadFile(filepath.Join(target, "hello")); err != nil || string(data) != "hi" {
		t.Errorf("read through target: %q %v", data, err)
	}
	if err := os.WriteFile(filepath.Join(target, "from-pod"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(volDir, "from-pod")); err != nil {
		t.Errorf("write through target did not land in the volume: %v", err)
	}
	pubs := map[string]publishRecord{}
	if data, err := os.ReadFile(volDir + ".publish.json"); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(data, &pubs); err != nil {
		t.Fatal(err)
	}
	if pubs[target].VolumeContext["csi.storage.k8s.io/pod.name"] != "p1" || pubs[target].StagingTargetPath != staging {
		t.Errorf("publish record = %+v", pubs)
	}

	st := ok(e.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol1", VolumePath: target}))(t)
	if len(st.Usage) != 2 || st.Usage[0].Unit != csi.VolumeUsage_BYTES || st.Usage[0].Total <= 0 ||
		st.Usage[1].Unit != csi.VolumeUsage_INODES || st.Usage[1].Total <= 0 {
		t.Errorf("NodeGetVolumeStats = %v", st)
	}

	for i := 0; i < 2; i++ {
		ok(e.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol1", TargetPath: target}))(t)
	}
	mustNotExist(t, target)
	mustNotExist(t, volDir+".publish.json")
	for i := 0; i < 2; i++ {
		ok(e.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "vol1", StagingTargetPath: staging}))(t)
	}
	mustNotExist(t, staging)
	mustNotExist(t, volDir+".stage.json")
	if mps := mountsUnder(t, e.base); len(mps) != 0 {
		t.Errorf("mounts left: %v", mps)
	}
	if _, err := os.Stat(filepath.Join(volDir, "hello")); err != nil {
		t.Errorf("data lost on unstage: %v", err)
	}

	ok(e.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "vol1"}))(t)
	mustNotExist(t, volDir)

	var calls []string
	for _, l := range e.csiLines("Node") {
		calls = append(calls, strings.Fields(l)[1])
	}
	wantCalls := []string{"NodeStageVolume", "NodeStageVolume", "NodePublishVolume", "NodePublishVolume", "NodeGetVolumeStats",
		"NodeUnpublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume", "NodeUnstageVolume"}
	if !reflect.DeepEqual(calls, wantCalls) {
		t.Errorf("logged calls = %v, want %v", calls, wantCalls)
	}
	wantLine := "CSI NodePublishVolume volume=vol1 target=" + target + " staging=" + staging + " readonly=false"
	if l := e.csiLines("NodePublishVolume"); l[0] != wantLine {
		t.Errorf("log line = %q, want %q", l[0], wantLine)
	}
	if l := e.csiLines("NodeUnstageVolume"); l[0] != "CSI NodeUnstageVolume volume=vol1 target="+staging {
		t.Errorf("log line = %q", l[0])
	}
}

func TestReadonlyPublish(t *testing.T) {
	requireMount(t)
	e := start(t, nil)
	ctx := context.Background()
	staging, target := filepath.Join(e.base, "staging"), filepath.Join(e.base, "target")

	ok(e.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "ro", StagingTargetPath: staging, VolumeCapability: mountCap()}))(t)
	ok(e.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "ro", StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: mountCap(), Readonly: true}))(t)
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write to read-only target: %v, want EROFS", err)
	}
	if err := os.WriteFile(filepath.Join(staging, "x"), nil, 0o644); err != nil {
		t.Errorf("staging should stay writable: %v", err)
	}
	ok(e.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "ro", TargetPath: target}))(t)
	ok(e.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "ro", StagingTargetPath: staging}))(t)
	if mps := mountsUnder(t, e.base); len(mps) != 0 {
		t.Errorf("mounts left: %v", mps)
	}
}

func TestBlockPublish(t *testing.T) {
	requireMount(t)
	e := start(t, nil)
	ctx := context.Background()
	staging := filepath.Join(e.base, "volumeDevices/staging/pv1")
	target := filepath.Join(e.base, "volumeDevices/publish/pv1/uid1")

	ok(e.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "blk", StagingTargetPath: staging, VolumeCapability: blockCap()}))(t)
	ok(e.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "blk", StagingTargetPath: staging, TargetPath: target, VolumeCapability: blockCap()}))(t)
	mustMounted(t, target, true)
	// The target is a block device (the image's loop device), as a real driver's.
	if fi, err := os.Stat(target); err != nil || fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		t.Fatalf("block target: %v %v", fi, err)
	}
	// Write like a pod does to a device: in place, no truncation.
	f, err := os.OpenFile(target, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt([]byte("data"), 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	img, _ := os.ReadFile(filepath.Join(e.cfg.stateDir, "blk.img"))
	if !bytes.HasPrefix(img, []byte("data")) {
		t.Error("write through target did not reach the image")
	}
	st := ok(e.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "blk", VolumePath: target}))(t)
	if len(st.Usage) != 1 || st.Usage[0].Total != blockSize {
		t.Errorf("NodeGetVolumeStats = %v", st)
	}
	ok(e.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "blk", TargetPath: target}))(t)
	ok(e.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "blk", StagingTargetPath: staging}))(t)
	mustNotExist(t, target)
	mustNotExist(t, staging)
	if mps := mountsUnder(t, e.base); len(mps) != 0 {
		t.Errorf("mounts left: %v", mps)
	}
	if dev, err := attachedLoop(filepath.Join(e.cfg.stateDir, "blk.img")); err != nil || dev != "" {
		t.Errorf("loop device %q (%v) left after unstaging", dev, err)
	}
}

func TestPublishWithoutStaging(t *testing.T) {
	requireMount(t)
	ctx := context.Background()
	t.Run("stage=false", func(t *testing.T) {
		e := start(t, func(c *config) { c.stage = false })
		if caps := ok(e.node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{}))(t); len(caps.Capabilities) != 0 {
			t.Errorf("NodeGetCapabilities = %v", caps)
		}
		_, err := e.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: e.base + "/s", VolumeCapability: mountCap()})
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("NodeStageVolume = %v, want Unimplemented", err)
		}
		publishDirect(t, e, nil)
	})
	t.Run("ephemeral", func(t *testing.T) {
		// Inline volumes are never staged, even with STAGE_UNSTAGE_VOLUME.
		e := start(t, nil)
		publishDirect(t, e, map[string]string{ephemeralKey: "true"})
	})
}

func publishDirect(t *testing.T, e *env, volCtx map[string]string) {
	ctx := context.Background()
	target := filepath.Join(e.base, "target")
	ok(e.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, VolumeCapability: mountCap(), VolumeContext: volCtx}))(t)
	if err := os.WriteFile(filepath.Join(target, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.stateDir, "v", "f")); err != nil {
		t.Errorf("target is not the volume dir: %v", err)
	}
	ok(e.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target}))(t)
	mustNotExist(t, target)
}

func TestVolumeMountGroup(t *testing.T) {
	requireMount(t)
	e := start(t, func(c *config) { c.mountGroup = true })
	ctx := context.Background()
	staging := filepath.Join(e.base, "staging")
	vc := mountCap()
	vc.GetMount().VolumeMountGroup = "4321"
	ok(e.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "g", StagingTargetPath: staging, VolumeCapability: vc}))(t)
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(e.cfg.stateDir, "g"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Gid != 4321 || st.Mode&unix.S_ISGID == 0 {
		t.Errorf("volume dir gid=%d mode=%o, want gid 4321 and setgid", st.Gid, st.Mode)
	}
	ok(e.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "g", StagingTargetPath: staging}))(t)
}

func TestPublishDelay(t *testing.T) {
	requireMount(t)
	e := start(t, func(c *config) { c.stage, c.publishDelay = false, 300*time.Millisecond })
	ctx := context.Background()
	target := filepath.Join(e.base, "target")
	errc := make(chan error, 1)
	go func() {
		_, err := e.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, VolumeCapability: mountCap()})
		errc <- err
	}()
	// The call is logged on arrival, before the delay: that is a test's cue.
	waitFor(t, "publish log line", func() bool { return len(e.csiLines("NodePublishVolume")) == 1 })
	mustMounted(t, target, false)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	mustMounted(t, target, true)
	ok(e.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target}))(t)
}

func TestValidation(t *testing.T) {
	e := start(t, nil)
	ctx := context.Background()
	staging, target := filepath.Join(e.base, "staging"), filepath.Join(e.base, "target")
	for _, tc := range []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"stage without volume id", func() error {
			_, err := e.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{StagingTargetPath: staging, VolumeCapability: mountCap()})
			return err
		}, codes.InvalidArgument},
		{"stage with a path as volume id", func() error {
			_, err := e.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "../x", StagingTargetPath: staging, VolumeCapability: mountCap()})
			return err
		}, codes.InvalidArgument},
		{"stage without staging path", func() error {
			_, err := e.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "v", VolumeCapability: mountCap()})
			return err
		}, codes.InvalidArgument},
		{"stage without capability", func() error {
			_, err := e.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: staging})
			return err
		}, codes.InvalidArgument},
		{"publish without volume id", func() error {
			_, err := e.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCap()})
			return err
		}, codes.InvalidArgument},
		{"publish without target", func() error {
			_, err := e.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: staging, VolumeCapability: mountCap()})
			return err
		}, codes.InvalidArgument},
		{"publish without staging path", func() error {
			_, err := e.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, VolumeCapability: mountCap()})
			return err
		}, codes.FailedPrecondition},
		{"publish before stage", func() error {
			_, err := e.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: staging, TargetPath: target, VolumeCapability: mountCap()})
			return err
		}, codes.FailedPrecondition},
		{"block publish before stage", func() error {
			_, err := e.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "v", StagingTargetPath: staging, TargetPath: target, VolumeCapability: blockCap()})
			return err
		}, codes.FailedPrecondition},
		{"unpublish without target", func() error {
			_, err := e.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v"})
			return err
		}, codes.InvalidArgument},
		{"unpublish of a missing target", func() error {
			_, err := e.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target})
			return err
		}, codes.OK},
		{"unstage without volume id", func() error {
			_, err := e.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{StagingTargetPath: staging})
			return err
		}, codes.InvalidArgument},
		{"unstage of a missing staging path", func() error {
			_, err := e.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "v", StagingTargetPath: staging})
			return err
		}, codes.OK},
		{"stats without volume path", func() error {
			_, err := e.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v"})
			return err
		}, codes.InvalidArgument},
		{"stats of a missing path", func() error {
			_, err := e.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v", VolumePath: target})
			return err
		}, codes.NotFound},
		{"create without name", func() error {
			_, err := e.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{})
			return err
		}, codes.InvalidArgument},
		{"controller publish without --attach-required", func() error {
			_, err := e.ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: "v", NodeId: "n"})
			return err
		}, codes.Unimplemented},
	} {
		if got := status.Code(tc.call()); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	if !strings.Contains(e.logs.String(), "ERROR NodePublishVolume volume=v: ") {
		t.Errorf("failed calls are not logged:\n%s", e.logs.String())
	}
	if mps := mountsUnder(t, e.base); len(mps) != 0 {
		t.Errorf("mounts left: %v", mps)
	}
}
