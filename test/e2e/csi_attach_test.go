//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// csiAttacherBin is the external-attacher hack/csi-attacher.sh builds into the cache.
func csiAttacherBin(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(), "hack", "csi-attacher.sh"), "build")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/csi-attacher.sh build: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// startCSIAttacher runs the external-attacher against the driver's socket with the
// control plane's admin kubeconfig, as its sidecar runs in a driver's controller pod.
func startCSIAttacher(t *testing.T, d *csiDriver, socket string) *toolProcess {
	t.Helper()
	return startTool(t, "csi-attacher", csiAttacherBin(t), nil, "--csi-address="+socket,
		"--kubeconfig="+os.Getenv("KUBECONFIG"), "--leader-election=false", "--timeout=15s",
		"--retry-interval-start=200ms", "--retry-interval-max=2s", "--v=2")
}

// csiVolumeName is the name status.volumesInUse/volumesAttached give a CSI volume.
func csiVolumeName(driver, handle string) v1.UniqueVolumeName {
	return v1.UniqueVolumeName("kubernetes.io/csi/" + driver + "^" + handle)
}

// attachmentName is the attach/detach controller's VolumeAttachment name.
func attachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// TestClusterCSIAttachable runs an attachable CSI driver: the project's driver with
// PUBLISH_UNPUBLISH_VOLUME, upstream's external-attacher, and the controller manager's
// attach/detach controller. nodelet lists the volume in status.volumesInUse, waits for
// volumesAttached and the attached VolumeAttachment before staging (passing the
// attachment's publish context), keeps the volume in use across a kill -9 and restart,
// and lets it go only once it is unstaged: ControllerUnpublishVolume comes after
// NodeUnstageVolume.
func TestClusterCSIAttachable(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	ctx := context.Background()
	d := startCSIDriver(t, c, c.rootDir, "--attach-required")
	startCSIAttacher(t, d, filepath.Join(c.rootDir, "plugins", d.name, "csi.sock"))
	yes := true
	driverObj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: d.name}, Spec: storagev1.CSIDriverSpec{AttachRequired: &yes}}
	if _, err := c.admin.StorageV1().CSIDrivers().Create(ctx, driverObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the driver in the node's CSINode", func() error {
		cn, err := c.admin.StorageV1().CSINodes().Get(ctx, c.name, metav1.GetOptions{})
		if err == nil && len(cn.Spec.Drivers) == 0 {
			err = fmt.Errorf("no drivers")
		}
		return err
	})
	createStaticCSIVolume(t, c, d.name, "vol-a", "data")
	name := csiVolumeName(d.name, "vol-a")

	created := time.Now()
	c.createPod(t, c.claimPod("app", "data"))
	eventually(t, 90*time.Second, "the pod with the attachable volume Ready", func() error { return c.podReady("app") })
	t.Logf("pod Ready %v after it was created (attach included)", time.Since(created).Round(10*time.Millisecond))
	checkAttachedState(t, c, d, name)
	calls := d.calls()
	if i, j := slices.Index(calls, "ControllerPublishVolume"), slices.Index(calls, "NodeStageVolume"); i < 0 || j < i {
		t.Errorf("driver calls %v: want ControllerPublishVolume before NodeStageVolume", calls)
	}
	var rec struct{ PublishContext map[string]string }
	if b, err := os.ReadFile(filepath.Join(d.state, "vol-a.stage.json")); err != nil || json.Unmarshal(b, &rec) != nil ||
		rec.PublishContext["attached"] != "true" {
		t.Errorf("NodeStageVolume got publish context %v (%v), want the attachment's metadata", rec.PublishContext, err)
	}

	// kill -9: the restarted nodelet keeps the volume in use from its first report on.
	c.restart(t, true)
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		n, err := c.node(t)
		if err == nil && !slices.Contains(n.Status.VolumesInUse, name) {
			t.Fatalf("after the restart volumesInUse is %v: the mounted volume may be detached", n.Status.VolumesInUse)
		}
		time.Sleep(250 * time.Millisecond)
	}
	checkAttachedState(t, c, d, name)

	c.deletePodAndWait(t, "app")
	took := eventually(t, 60*time.Second, "the volume detached", func() error {
		_, err := c.admin.StorageV1().VolumeAttachments().Get(ctx, attachmentName("vol-a", d.name, c.name), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("VolumeAttachment still there")
		}
		return err
	})
	t.Logf("volume detached %v after the pod was gone", took.Round(10*time.Millisecond))
	calls = d.calls()
	unstage, unpublish := slices.Index(calls, "NodeUnstageVolume"), slices.Index(calls, "ControllerUnpublishVolume")
	if unstage < 0 || unpublish < unstage {
		t.Errorf("driver calls %v: want ControllerUnpublishVolume after NodeUnstageVolume", calls)
	}
	if n, err := c.node(t); err != nil || slices.Contains(n.Status.VolumesInUse, name) {
		t.Errorf("volumesInUse after the detach: %v (%v)", n.Status.VolumesInUse, err)
	}
	if left := mountsUnder(t, c.rootDir); len(left) > 0 {
		t.Errorf("mounts left under the root dir: %v", left)
	}
}

// checkAttachedState: the volume is in the node's volumesInUse and volumesAttached and its
// VolumeAttachment is attached; the driver was attached to it once.
func checkAttachedState(t *testing.T, c *clusterNode, d *csiDriver, name v1.UniqueVolumeName) {
	t.Helper()
	n, err := c.node(t)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(n.Status.VolumesInUse, name) {
		t.Errorf("volumesInUse %v lacks %s", n.Status.VolumesInUse, name)
	}
	if !slices.ContainsFunc(n.Status.VolumesAttached, func(a v1.AttachedVolume) bool { return a.Name == name }) {
		t.Errorf("volumesAttached %v lacks %s", n.Status.VolumesAttached, name)
	}
	if got := d.count("ControllerPublishVolume"); got < 1 {
		t.Errorf("ControllerPublishVolume called %d times", got)
	}
	if got := d.count("NodeStageVolume"); got < 1 {
		t.Errorf("NodeStageVolume called %d times", got)
	}
}
