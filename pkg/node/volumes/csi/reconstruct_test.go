package csi

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

func TestListPublishedAndStaged(t *testing.T) {
	ctx := context.Background()
	d := startFakeDriver(t, stageCap()...)
	m := newStandaloneManager(t, d)
	if err := m.Stage(ctx, StageRequest{Driver: testDriver, VolumeHandle: "vol-1"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ uid, spec string }{{"uid-1", "pv-1"}, {"uid-2", "pv-1"}} {
		req := persistentRequest()
		req.PodUID, req.SpecName = p.uid, p.spec
		if _, err := m.Publish(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	// Leftovers without vol_data.json: a target and an unstaged globalmount.
	orphanTarget := m.TargetPath("uid-3", "orphan")
	orphanStaging := m.StagingPath("other.example.com", "vol-2")
	for _, dir := range []string{orphanTarget, orphanStaging, filepath.Join(m.pluginDir(), "volumeDevices", "staging", "pv-9")} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
	}

	published, err := m.ListPublished()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range published {
		got = append(got, v.PodUID+"/"+v.SpecName+" "+v.Data.VolumeHandle+" "+v.Data.DriverName+" "+strings.TrimPrefix(v.TargetPath, m.rootDir)+" "+errText(v.DataErr))
	}
	slices.Sort(got)
	want := []string{
		"uid-1/pv-1 vol-1 d.example.com /pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount ok",
		"uid-2/pv-1 vol-1 d.example.com /pods/uid-2/volumes/kubernetes.io~csi/pv-1/mount ok",
		"uid-3/orphan   /pods/uid-3/volumes/kubernetes.io~csi/orphan/mount missing",
	}
	if !slices.Equal(got, want) {
		t.Errorf("published:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	staged, err := m.ListStaged()
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, v := range staged {
		got = append(got, v.Driver+" "+v.Data.VolumeHandle+" "+strings.TrimPrefix(v.StagingPath, m.rootDir)+" "+errText(v.DataErr))
	}
	slices.Sort(got)
	want = []string{
		"d.example.com vol-1 /plugins/kubernetes.io/csi/d.example.com/" + vol1SHA + "/globalmount ok",
		"other.example.com  " + strings.TrimPrefix(orphanStaging, m.rootDir) + " missing",
	}
	if !slices.Equal(got, want) {
		t.Errorf("staged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestListOnEmptyRoot(t *testing.T) {
	m := New(Config{RootDir: filepath.Join(t.TempDir(), "none")})
	published, err := m.ListPublished()
	if err != nil || len(published) != 0 {
		t.Errorf("ListPublished = %v, %v", published, err)
	}
	staged, err := m.ListStaged()
	if err != nil || len(staged) != 0 {
		t.Errorf("ListStaged = %v, %v", staged, err)
	}
}

func errText(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, fs.ErrNotExist):
		return "missing"
	}
	return err.Error()
}

func TestVolumeStats(t *testing.T) {
	ctx := context.Background()
	d := startFakeDriver(t)
	m := newStandaloneManager(t, d)
	if _, err := m.VolumeStats(ctx, testDriver, "vol-1", "/target"); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("VolumeStats without capability: %v", err)
	}

	d = startFakeDriver(t, csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS)
	d.usage = []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: 100, Available: 60, Used: 40},
		{Unit: csipb.VolumeUsage_INODES, Total: 10, Available: 7, Used: 3},
	}
	m = newStandaloneManager(t, d)
	got, err := m.VolumeStats(ctx, testDriver, "vol-1", "/target")
	want := VolumeStats{CapacityBytes: 100, AvailableBytes: 60, UsedBytes: 40, Inodes: 10, InodesFree: 7, InodesUsed: 3}
	if err != nil || got != want {
		t.Fatalf("VolumeStats = %+v, %v; want %+v", got, err, want)
	}
	if req := received[*csipb.NodeGetVolumeStatsRequest](d); len(req) != 1 || req[0].VolumeId != "vol-1" || req[0].VolumePath != "/target" {
		t.Errorf("NodeGetVolumeStats requests %v", req)
	}
	d.setUsage(nil)
	if _, err := m.VolumeStats(ctx, testDriver, "vol-1", "/target"); err == nil {
		t.Error("VolumeStats without usage succeeded")
	}
}

func TestExpand(t *testing.T) {
	ctx := context.Background()
	req := ExpandRequest{Driver: testDriver, VolumeHandle: "vol-1", VolumePath: "/target", StagingPath: "/staging", RequiredBytes: 1 << 30,
		Capability: VolumeCapability{FSType: "xfs"}, Secrets: map[string]string{"k": "v"}}
	d := startFakeDriver(t)
	m := newStandaloneManager(t, d)
	if _, err := m.Expand(ctx, req); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Expand without capability: %v", err)
	}

	d = startFakeDriver(t, csipb.NodeServiceCapability_RPC_EXPAND_VOLUME)
	m = newStandaloneManager(t, d)
	size, err := m.Expand(ctx, req)
	if err != nil || size != 1<<30 {
		t.Fatalf("Expand = %d, %v", size, err)
	}
	got := received[*csipb.NodeExpandVolumeRequest](d)[0]
	if got.VolumeId != "vol-1" || got.VolumePath != "/target" || got.StagingTargetPath != "/staging" ||
		got.GetCapacityRange().GetRequiredBytes() != 1<<30 || got.GetVolumeCapability().GetMount().GetFsType() != "xfs" ||
		got.GetVolumeCapability().GetAccessMode().GetMode() != csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER || got.Secrets["k"] != "v" {
		t.Errorf("NodeExpandVolume request %v", got)
	}

	req.Capability = VolumeCapability{Block: true}
	if _, err := m.Expand(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := received[*csipb.NodeExpandVolumeRequest](d)[1]; got.GetVolumeCapability().GetBlock() == nil {
		t.Errorf("block volume expanded with capability %v", got.GetVolumeCapability())
	}
}
