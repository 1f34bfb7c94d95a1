package csi

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
)

const (
	// sha256("vol-1"), the staging directory of volume handle "vol-1".
	vol1SHA        = "d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49"
	seLinuxContext = "system_u:object_r:container_file_t:s0:c1,c2"
)

func stageCap() []csipb.NodeServiceCapability_RPC_Type {
	return []csipb.NodeServiceCapability_RPC_Type{csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}
}

func TestStagingPathLayout(t *testing.T) {
	m := New(Config{RootDir: "/var/lib/kubelet"})
	want := "/var/lib/kubelet/plugins/kubernetes.io/csi/d.example.com/" + vol1SHA + "/globalmount"
	if got := m.StagingPath(testDriver, "vol-1"); got != want {
		t.Errorf("StagingPath = %s, want %s", got, want)
	}
}

func TestStage(t *testing.T) {
	d := startFakeDriver(t, stageCap()...)
	m := newStandaloneManager(t, d)
	req := StageRequest{
		Driver: testDriver, VolumeHandle: "vol-1",
		Capability:          VolumeCapability{FSType: "ext4", MountFlags: []string{"noatime"}, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadOnlyMany, v1.ReadWriteOnce}},
		PublishContext:      map[string]string{"devicePath": "/dev/xvdb"},
		VolumeContext:       map[string]string{"attr": "1"},
		Secrets:             map[string]string{"key": "secret"},
		FSGroup:             new(int64(1234)),
		SELinuxMountContext: seLinuxContext,
	}
	for range 2 { // idempotent
		if err := m.Stage(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(m.rootDir, "plugins/kubernetes.io/csi", testDriver, vol1SHA, "globalmount")
	want := &csipb.NodeStageVolumeRequest{
		VolumeId:          "vol-1",
		PublishContext:    map[string]string{"devicePath": "/dev/xvdb"},
		StagingTargetPath: path,
		VolumeCapability: &csipb.VolumeCapability{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{
				FsType: "ext4", MountFlags: []string{"noatime", `context="` + seLinuxContext + `"`},
			}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
		},
		Secrets:       map[string]string{"key": "secret"},
		VolumeContext: map[string]string{"attr": "1"},
	}
	got := received[*csipb.NodeStageVolumeRequest](d)
	if len(got) != 2 || !proto.Equal(got[0], want) {
		t.Fatalf("NodeStageVolume requests %v, want twice %v", got, want)
	}
	wantData := `{"driverName":"d.example.com","seLinuxMountContext":"` + seLinuxContext + `","volumeHandle":"vol-1"}` + "\n"
	if got := readFile(t, filepath.Join(filepath.Dir(path), "vol_data.json")); got != wantData {
		t.Errorf("vol_data.json = %q, want %q", got, wantData)
	}
	if !reflect.DeepEqual(req.Capability.MountFlags, []string{"noatime"}) {
		t.Errorf("caller's mount flags changed to %v", req.Capability.MountFlags)
	}
}

func TestStageAccessModesAndMountGroup(t *testing.T) {
	d := startFakeDriver(t, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP, csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER)
	m := newStandaloneManager(t, d)
	for i, tc := range []struct {
		modes []v1.PersistentVolumeAccessMode
		want  csipb.VolumeCapability_AccessMode_Mode
	}{
		{modes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod}, want: csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER},
		{modes: nil, want: csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER},
		{modes: []v1.PersistentVolumeAccessMode{v1.ReadWriteMany}, want: csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	} {
		req := StageRequest{Driver: testDriver, VolumeHandle: "vol-1", FSGroup: new(int64(1234)), Capability: VolumeCapability{AccessModes: tc.modes}}
		if err := m.Stage(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		vc := received[*csipb.NodeStageVolumeRequest](d)[i].GetVolumeCapability()
		if vc.GetAccessMode().GetMode() != tc.want || vc.GetMount().GetVolumeMountGroup() != "1234" {
			t.Errorf("modes %v: capability %v, want mode %v and mount group 1234", tc.modes, vc, tc.want)
		}
	}
}

func TestAccessModeWithoutMultiWriter(t *testing.T) {
	for mode, want := range map[v1.PersistentVolumeAccessMode]csipb.VolumeCapability_AccessMode_Mode{
		v1.ReadWriteOnce:    csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		v1.ReadWriteOncePod: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		v1.ReadOnlyMany:     csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		v1.ReadWriteMany:    csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
		"Bogus":             csipb.VolumeCapability_AccessMode_UNKNOWN,
	} {
		if got := accessMode([]v1.PersistentVolumeAccessMode{mode}, false); got != want {
			t.Errorf("%s: %v, want %v", mode, got, want)
		}
	}
}

func TestStageWithoutStageCapability(t *testing.T) {
	d := startFakeDriver(t)
	m := newStandaloneManager(t, d)
	if err := m.Stage(context.Background(), StageRequest{Driver: testDriver, VolumeHandle: "vol-1"}); err != nil {
		t.Fatal(err)
	}
	path := m.StagingPath(testDriver, "vol-1")
	assertExists(t, path)
	assertMissing(t, filepath.Join(filepath.Dir(path), "vol_data.json"))
	if got := received[*csipb.NodeStageVolumeRequest](d); len(got) != 0 {
		t.Errorf("NodeStageVolume called: %v", got)
	}
	if err := m.Unstage(context.Background(), testDriver, "vol-1"); err != nil {
		t.Fatal(err)
	}
	assertMissing(t, filepath.Dir(path))
	if got := received[*csipb.NodeUnstageVolumeRequest](d); len(got) != 0 {
		t.Errorf("NodeUnstageVolume called: %v", got)
	}
}

func TestStageFailure(t *testing.T) {
	for _, tc := range []struct {
		err       error
		uncertain bool
	}{
		{err: status.Error(codes.InvalidArgument, "bad"), uncertain: false},
		{err: status.Error(codes.Internal, "bad"), uncertain: false},
		{err: status.Error(codes.DeadlineExceeded, "slow"), uncertain: true},
		{err: status.Error(codes.Aborted, "busy"), uncertain: true},
	} {
		d := startFakeDriver(t, stageCap()...)
		d.setErr("NodeStageVolume", tc.err)
		m := newStandaloneManager(t, d)
		err := m.Stage(context.Background(), StageRequest{Driver: testDriver, VolumeHandle: "vol-1"})
		if err == nil || IsUncertain(err) != tc.uncertain || status.Code(err) != status.Code(tc.err) {
			t.Errorf("%v: Stage error %v, uncertain %v, want uncertain %v", tc.err, err, IsUncertain(err), tc.uncertain)
		}
		dir := filepath.Dir(m.StagingPath(testDriver, "vol-1"))
		if tc.uncertain {
			assertExists(t, filepath.Join(dir, "vol_data.json"))
		} else {
			assertMissing(t, dir)
		}
	}
}

func TestUnstage(t *testing.T) {
	ctx := context.Background()
	d := startFakeDriver(t, stageCap()...)
	m := newStandaloneManager(t, d)
	if err := m.Stage(ctx, StageRequest{Driver: testDriver, VolumeHandle: "vol-1"}); err != nil {
		t.Fatal(err)
	}
	path := m.StagingPath(testDriver, "vol-1")
	for range 2 { // idempotent
		if err := m.Unstage(ctx, testDriver, "vol-1"); err != nil {
			t.Fatal(err)
		}
	}
	want := &csipb.NodeUnstageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: path}
	if got := received[*csipb.NodeUnstageVolumeRequest](d); len(got) != 1 || !proto.Equal(got[0], want) {
		t.Errorf("NodeUnstageVolume requests %v, want one %v", got, want)
	}
	assertMissing(t, filepath.Dir(path))
	assertExists(t, filepath.Join(m.rootDir, "plugins/kubernetes.io/csi", testDriver))
}

func TestUnstageNotFoundIsSuccess(t *testing.T) {
	ctx := context.Background()
	d := startFakeDriver(t, stageCap()...)
	m := newStandaloneManager(t, d)
	// Staged without the driver's marker file: a NOT_FOUND driver leaves nothing.
	if err := m.Stage(ctx, StageRequest{Driver: testDriver, VolumeHandle: "vol-1"}); err != nil {
		t.Fatal(err)
	}
	d.setErr("NodeUnstageVolume", status.Error(codes.NotFound, "no such volume"))
	path := m.StagingPath(testDriver, "vol-1")
	if err := m.Unstage(ctx, testDriver, "vol-1"); err == nil {
		t.Fatal("Unstage removed a staging dir the driver left non-empty")
	}
	assertExists(t, filepath.Join(filepath.Dir(path), "vol_data.json"))

	d.setErr("NodeUnstageVolume", status.Error(codes.NotFound, "no such volume"))
	if err := removeStagedMarker(path); err != nil {
		t.Fatal(err)
	}
	if err := m.Unstage(ctx, testDriver, "vol-1"); err != nil {
		t.Fatalf("Unstage with NOT_FOUND: %v", err)
	}
	assertMissing(t, filepath.Dir(path))

	d.setErr("NodeUnstageVolume", status.Error(codes.Internal, "boom"))
	if err := m.Stage(ctx, StageRequest{Driver: testDriver, VolumeHandle: "vol-1"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Unstage(ctx, testDriver, "vol-1"); status.Code(err) != codes.Internal {
		t.Fatalf("Unstage with a failing driver: %v", err)
	}
	assertExists(t, filepath.Join(filepath.Dir(path), "vol_data.json"))
}

func removeStagedMarker(path string) error {
	return removeIfExists(filepath.Join(path, "staged"))
}

func TestNodeOperationsNeedRegisteredDriver(t *testing.T) {
	ctx := context.Background()
	m := New(Config{RootDir: t.TempDir(), NodeName: testNode})
	if err := m.Stage(ctx, StageRequest{Driver: testDriver, VolumeHandle: "vol-1"}); !errors.Is(err, ErrDriverNotRegistered) {
		t.Errorf("Stage: %v", err)
	}
	_, err := m.Publish(ctx, PublishRequest{Driver: testDriver, VolumeHandle: "vol-1", PodUID: "uid-1", SpecName: "pv-1"})
	if !errors.Is(err, ErrDriverNotRegistered) {
		t.Errorf("Publish: %v", err)
	}
	if err := m.Stage(ctx, StageRequest{Driver: testDriver, VolumeHandle: "vol-1", Capability: VolumeCapability{Block: true}}); err == nil {
		t.Error("staging a block volume succeeded")
	}
}
