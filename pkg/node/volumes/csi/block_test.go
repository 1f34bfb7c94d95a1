package csi

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
)

func blockRequest(podUID string) BlockRequest {
	return BlockRequest{
		Stage: StageRequest{Driver: testDriver, VolumeHandle: "vol-1", PublishContext: map[string]string{"lun": "3"},
			Capability: VolumeCapability{Block: true, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}}},
		PodUID: podUID, Spec: "pv-1", PodInfo: &PodInfo{Name: "web", Namespace: "ns1", UID: podUID},
	}
}

// A raw block volume is staged and published in upstream's volumeDevices layout, with
// block access, mapped (bind mount under <pv>/dev) and linked into the pod; set up twice
// it is asked again and mounted once; torn down it is unpublished, and unstaged with the
// last pod.
func TestBlockSetUpAndTearDown(t *testing.T) {
	d := startFakeDriver(t, stageCap()...)
	m := newStandaloneManager(t, d)
	ctx := context.Background()
	base := filepath.Join(m.rootDir, "plugins/kubernetes.io/csi/volumeDevices")
	t.Cleanup(func() { // a failed run must not leave its bind mounts behind
		for _, pod := range []string{"uid-1", "uid-2"} {
			_ = unmountAndRemoveFile(filepath.Join(base, "pv-1/dev", pod))
		}
	})
	for range 2 {
		link, err := m.SetUpBlock(ctx, blockRequest("uid-1"))
		if err != nil {
			t.Fatal(err)
		}
		if link != filepath.Join(m.rootDir, "pods/uid-1/volumeDevices/kubernetes.io~csi/pv-1") {
			t.Errorf("link %s", link)
		}
	}
	if _, err := m.SetUpBlock(ctx, blockRequest("uid-2")); err != nil {
		t.Fatal(err)
	}
	stage := received[*csipb.NodeStageVolumeRequest](d)
	publish := received[*csipb.NodePublishVolumeRequest](d)
	if len(stage) != 3 || stage[0].StagingTargetPath != filepath.Join(base, "staging/pv-1") || stage[0].VolumeCapability.GetBlock() == nil ||
		stage[0].PublishContext["lun"] != "3" {
		t.Fatalf("stage requests %v", stage)
	}
	if len(publish) != 3 || publish[0].TargetPath != filepath.Join(base, "publish/pv-1/uid-1") ||
		publish[0].StagingTargetPath != stage[0].StagingTargetPath || publish[0].VolumeCapability.GetBlock() == nil ||
		publish[0].VolumeContext["csi.storage.k8s.io/pod.name"] != "web" {
		t.Fatalf("publish requests %v", publish)
	}
	if target, err := os.Readlink(filepath.Join(m.rootDir, "pods/uid-1/volumeDevices/kubernetes.io~csi/pv-1")); err != nil || target != publish[0].TargetPath {
		t.Errorf("pod link to %q (%v)", target, err)
	}
	if mounted, err := isMountRoot(filepath.Join(base, "pv-1/dev/uid-1")); err != nil || !mounted {
		t.Errorf("global map bind mount: %v %v", mounted, err)
	}
	if data := readFile(t, filepath.Join(base, "pv-1/data/vol_data.json")); data == "" {
		t.Error("no vol_data.json")
	}
	mapped, err := m.ListBlockMapped()
	if err != nil || len(mapped) != 2 || mapped[0].Data.VolumeHandle != "vol-1" {
		t.Fatalf("ListBlockMapped = %+v, %v", mapped, err)
	}

	if err := m.TearDownBlock(ctx, "uid-1", "pv-1"); err != nil {
		t.Fatal(err)
	}
	if n := len(received[*csipb.NodeUnstageVolumeRequest](d)); n != 0 {
		t.Errorf("unstaged while another pod has the volume (%d calls)", n)
	}
	assertMissing(t, filepath.Join(m.rootDir, "pods/uid-1/volumeDevices/kubernetes.io~csi/pv-1"))
	assertMissing(t, filepath.Join(base, "pv-1/dev/uid-1"))
	for range 2 { // idempotent
		if err := m.TearDownBlock(ctx, "uid-2", "pv-1"); err != nil {
			t.Fatal(err)
		}
	}
	if unstage := received[*csipb.NodeUnstageVolumeRequest](d); len(unstage) != 1 || unstage[0].StagingTargetPath != filepath.Join(base, "staging/pv-1") {
		t.Errorf("unstage requests %v", unstage)
	}
	if unpublish := received[*csipb.NodeUnpublishVolumeRequest](d); len(unpublish) != 2 {
		t.Errorf("unpublish requests %v", unpublish)
	}
	for _, p := range []string{"staging/pv-1", "publish/pv-1", "pv-1"} {
		assertMissing(t, filepath.Join(base, p))
	}
}
