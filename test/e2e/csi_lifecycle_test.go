//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// createCSIDriverObject makes the driver's CSIDriver: no attach, persistent volumes.
func createCSIDriverObject(t *testing.T, c *clusterNode, d *csiDriver) {
	t.Helper()
	no := false
	obj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: d.name}, Spec: storagev1.CSIDriverSpec{AttachRequired: &no}}
	if _, err := c.admin.StorageV1().CSIDrivers().Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createPreboundCSIVolume makes a PV of the driver pre-bound to a claim that does not
// exist yet (the ephemeral volume controller makes it): the PV controller binds them.
func createPreboundCSIVolume(t *testing.T, c *clusterNode, driver, handle, claim string) {
	t.Helper()
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: c.namespace + "-" + handle},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &v1.ObjectReference{Namespace: c.namespace, Name: claim},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: handle}},
		}}
	if _, err := c.admin.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.admin.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
}

// TestClusterCSIGenericEphemeral: a generic ephemeral volume whose claim (made by the
// controller manager's ephemeral volume controller, owned by the pod) binds to a CSI PV
// the test pre-bound is staged and published like any claim, and torn down with the pod.
func TestClusterCSIGenericEphemeral(t *testing.T) {
	c := startClusterNode(t, clusterOptions{config: "volumeStatsAggPeriod: 2s\n"})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	d := startCSIDriver(t, c, c.rootDir, "--stats")
	createCSIDriverObject(t, c, d)
	createPreboundCSIVolume(t, c, d.name, "vol-eph", "eph-scratch")
	empty := ""
	pod := c.testPod("eph")
	pod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
		VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, StorageClassName: &empty,
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}}}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	c.createPod(t, pod)
	eventually(t, 90*time.Second, "the pod with a generic ephemeral CSI volume Ready", func() error { return c.podReady("eph") })
	c.execIn(t, "eph", "sh", "-c", "echo e > /scratch/f")
	if got := strings.Join(d.filteredCalls("NodeGetVolumeStats"), ","); got != "NodeStageVolume,NodePublishVolume" {
		t.Errorf("driver calls %s: want the claim's volume staged then published", got)
	}
	checkCSIVolumeStats(t, c, "eph", "scratch", "eph-scratch")
	c.deletePodAndWait(t, "eph")
	if got := strings.Join(d.filteredCalls("NodeGetVolumeStats"), ","); got != "NodeStageVolume,NodePublishVolume,NodeUnpublishVolume,NodeUnstageVolume" {
		t.Errorf("driver calls %s: want the volume unpublished then unstaged", got)
	}
	if left := mountsUnder(t, c.rootDir); len(left) > 0 {
		t.Errorf("mounts left under the root dir: %v", left)
	}
}

// TestClusterCSIKilledMidPublish: nodelet is killed (-9) while the driver is inside a slow
// NodePublishVolume, which the driver finishes anyway. The restarted nodelet publishes
// again (the driver's answer is idempotent) and the pod starts with one staging and one
// publish mount: nothing leaked, nothing mounted twice; deleting the pod leaves no mount.
func TestClusterCSIKilledMidPublish(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	d := startCSIDriver(t, c, c.rootDir, "--publish-delay=3s")
	createCSIDriverObject(t, c, d)
	createStaticCSIVolume(t, c, d.name, "vol-slow", "slow")
	c.createPod(t, c.claimPod("app", "slow"))
	eventually(t, 60*time.Second, "NodePublishVolume under way", func() error {
		if d.count("NodePublishVolume") == 0 {
			return fmt.Errorf("calls %v", d.calls())
		}
		return nil
	})
	c.restartAfter(t, true, 4*time.Second) // the driver finishes the publish meanwhile
	eventually(t, 90*time.Second, "the pod Ready after the restart", func() error { return c.podReady("app") })
	if mounts := mountsUnder(t, c.rootDir); len(mounts) != 2 {
		t.Errorf("mounts under the root dir: %v, want the staging and the publish mount once each", mounts)
	}
	c.execIn(t, "app", "sh", "-c", "echo ok > /data/f")
	t.Logf("driver calls: %v", d.calls())
	c.deletePodAndWait(t, "app")
	if left := mountsUnder(t, c.rootDir); len(left) > 0 {
		t.Errorf("mounts left under the root dir: %v", left)
	}
	if n := d.count("NodeUnstageVolume"); n != 1 {
		t.Errorf("NodeUnstageVolume called %d times, want once", n)
	}
}

// TestClusterCSIExpansion grows a mounted CSI volume online. No external-resizer is on
// the module proxy, so the test does its controller-side part: the claim's request and
// the PV's capacity grow to 2Gi and the claim is marked NodeResizePending with the
// FileSystemResizePending condition. nodelet, at the pod's next sync, calls
// NodeExpandVolume with the publish and staging paths, then records the new capacity on
// the claim, clears its resize status and condition, and sends upstream's
// FileSystemResizeSuccessful event; the pod keeps running.
func TestClusterCSIExpansion(t *testing.T) {
	c := startClusterNode(t, clusterOptions{config: "syncFrequency: 5s\n"})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	ctx := context.Background()
	d := startCSIDriver(t, c, c.rootDir, "--expand")
	createCSIDriverObject(t, c, d)
	class := expandableClass(t, c)
	createStaticCSIVolume(t, c, d.name, "vol-grow", "grow", class)
	c.createPod(t, c.claimPod("app", "grow"))
	eventually(t, 60*time.Second, "the pod Ready", func() error { return c.podReady("app") })
	before := c.containerIDs(t, "app")

	resizeLikeController(t, c, "grow", c.namespace+"-vol-grow", resource.MustParse("2Gi"))
	took := eventually(t, 60*time.Second, "the claim's new capacity", func() error {
		pvc, err := c.admin.CoreV1().PersistentVolumeClaims(c.namespace).Get(ctx, "grow", metav1.GetOptions{})
		if err != nil {
			return err
		}
		got := pvc.Status.Capacity[v1.ResourceStorage]
		if got.String() != "2Gi" || len(pvc.Status.AllocatedResourceStatuses) > 0 {
			return fmt.Errorf("capacity %s, resize statuses %v", got.String(), pvc.Status.AllocatedResourceStatuses)
		}
		for _, cond := range pvc.Status.Conditions {
			if cond.Type == v1.PersistentVolumeClaimFileSystemResizePending || cond.Type == v1.PersistentVolumeClaimNodeResizeError {
				return fmt.Errorf("condition %+v", cond)
			}
		}
		return nil
	})
	t.Logf("claim expanded %v after the controller's part (sync period 5s)", took.Round(10*time.Millisecond))
	if n := d.count("NodeExpandVolume"); n != 1 {
		t.Errorf("NodeExpandVolume called %d times, want once: %v", n, d.calls())
	}
	if !strings.Contains(d.out.String(), "CSI NodeExpandVolume volume=vol-grow target="+c.rootDir+"/pods/") {
		t.Errorf("NodeExpandVolume not given the pod's target path:\n%s", d.out.String())
	}
	eventually(t, 20*time.Second, "the FileSystemResizeSuccessful event", func() error {
		list, err := c.admin.CoreV1().Events(c.namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=FileSystemResizeSuccessful,involvedObject.name=app"})
		if err == nil && len(list.Items) == 0 {
			err = fmt.Errorf("no event")
		}
		if err == nil && !strings.HasPrefix(list.Items[0].Message, "MountVolume.NodeExpandVolume succeeded for volume \""+c.namespace+"-vol-grow\"") {
			err = fmt.Errorf("event %q", list.Items[0].Message)
		}
		return err
	})
	if after := c.containerIDs(t, "app"); !sameIDs(after, before) {
		t.Errorf("the pod's containers changed: %v -> %v", before, after)
	}
}

// expandableClass is a StorageClass that allows expansion: the API server lets a
// claim's request grow only with one.
func expandableClass(t *testing.T, c *clusterNode) string {
	t.Helper()
	yes := true
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: c.namespace + "-expandable"},
		Provisioner: "kubernetes.io/no-provisioner", AllowVolumeExpansion: &yes}
	if _, err := c.admin.StorageV1().StorageClasses().Create(context.Background(), sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.admin.StorageV1().StorageClasses().Delete(context.Background(), sc.Name, metav1.DeleteOptions{})
	})
	return sc.Name
}

// resizeLikeController does what the resize controller and external-resizer do before
// the node's part: the claim asks for size, the volume has it, the claim waits for the
// node (NodeResizePending, FileSystemResizePending).
func resizeLikeController(t *testing.T, c *clusterNode, claim, pvName string, size resource.Quantity) {
	t.Helper()
	ctx := context.Background()
	pvcs := c.admin.CoreV1().PersistentVolumeClaims(c.namespace)
	pvc, err := pvcs.Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvc.Spec.Resources.Requests[v1.ResourceStorage] = size
	if pvc, err = pvcs.Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pv, err := c.admin.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.Capacity[v1.ResourceStorage] = size
	if _, err := c.admin.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: size}
	pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizePending}
	pvc.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimFileSystemResizePending,
		Status: v1.ConditionTrue, LastTransitionTime: metav1.Now(), Message: "Waiting for user to (re-)start a pod to finish file system resize of volume on node."}}
	if _, err := pvcs.UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestClusterCSIBlock: a raw block CSI volume (volumeMode: Block) is staged and
// published (the driver puts its image behind a loop device, as a real driver publishes
// a device), linked into the pod's volumeDevices directory and handed to the runtime as a
// device: the container sees a block device at its devicePath and what it writes there
// is read by the next pod; deleting the pods leaves no mount, link or loop device.
func TestClusterCSIBlock(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	d := startCSIDriver(t, c, c.rootDir)
	createCSIDriverObject(t, c, d)
	createBlockCSIVolume(t, c, d.name, "vol-blk", "raw")
	writer := c.createPod(t, c.blockPod("writer", "raw", "echo block-data | dd of=/dev/xvda conv=notrunc"))
	eventually(t, 60*time.Second, "the block pod Ready", func() error { return c.podReady("writer") })
	if out := c.execIn(t, "writer", "sh", "-c", "[ -b /dev/xvda ] && echo block; head -c 10 /dev/xvda"); out != "block\nblock-data" {
		t.Errorf("the container sees %q, want a block device holding what it wrote", out)
	}
	if link := filepath.Join(c.rootDir, "pods", string(writer.UID), "volumeDevices", "kubernetes.io~csi", c.namespace+"-vol-blk"); !isSymlink(link) {
		t.Errorf("no device link at %s", link)
	}
	if got := strings.Join(d.calls(), ","); got != "NodeStageVolume,NodePublishVolume" {
		t.Errorf("driver calls %s", got)
	}
	c.deletePodAndWait(t, "writer")
	if got := strings.Join(d.calls(), ","); got != "NodeStageVolume,NodePublishVolume,NodeUnpublishVolume,NodeUnstageVolume" {
		t.Errorf("driver calls %s: want the volume unpublished then unstaged", got)
	}
	if left := mountsUnder(t, c.rootDir); len(left) > 0 {
		t.Errorf("mounts left under the root dir: %v", left)
	}
	c.createPod(t, c.blockPod("reader", "raw", "true"))
	eventually(t, 60*time.Second, "the reader Ready", func() error { return c.podReady("reader") })
	if out := c.execIn(t, "reader", "head", "-c", "10", "/dev/xvda"); out != "block-data" {
		t.Errorf("the next pod reads %q, want the data kept", out)
	}
	c.deletePodAndWait(t, "reader")
	out, err := exec.Command("losetup", "--associated", filepath.Join(d.state, "vol-blk.img")).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("loop device left after the last pod: %q (%v)", out, err)
	}
}

// createBlockCSIVolume makes a raw block PV of the driver pre-bound to a block claim.
func createBlockCSIVolume(t *testing.T, c *clusterNode, driver, handle, claim string) {
	t.Helper()
	ctx := context.Background()
	block, empty := v1.PersistentVolumeBlock, ""
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: c.namespace + "-" + handle},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain, VolumeMode: &block,
			ClaimRef:               &v1.ObjectReference{Namespace: c.namespace, Name: claim},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}},
		}}
	if _, err := c.admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.admin.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: c.namespace},
		Spec: v1.PersistentVolumeClaimSpec{AccessModes: pv.Spec.AccessModes, VolumeName: pv.Name, StorageClassName: &empty, VolumeMode: &block,
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")}}}}
	if _, err := c.admin.CoreV1().PersistentVolumeClaims(c.namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitClaimBound(t, c, claim)
}

// blockPod runs script, then waits, with the claim as the block device /dev/xvda.
func (c *clusterNode) blockPod(name, claim, script string) *v1.Pod {
	pod := c.testPod(name)
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	ctr := &pod.Spec.Containers[0]
	ctr.Command = []string{"sh", "-c", script + "; trap 'exit 0' TERM; while true; do sleep 1; done"}
	ctr.VolumeDevices = []v1.VolumeDevice{{Name: "data", DevicePath: "/dev/xvda"}}
	return pod
}

func isSymlink(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}

// TestClusterCSITokensAndRepublish: a CSIDriver with tokenRequests gets a service-account
// token bound to the pod, for its audience, in the publish's volume context; with
// requiresRepublish the volume is published again at the pod's syncs (not staged again),
// so the driver sees fresh tokens, and the pod runs on untouched.
func TestClusterCSITokensAndRepublish(t *testing.T) {
	c := startClusterNode(t, clusterOptions{config: "syncFrequency: 3s\n"})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	ctx := context.Background()
	d := startCSIDriver(t, c, c.rootDir)
	no, yes := false, true
	obj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: d.name}, Spec: storagev1.CSIDriverSpec{
		AttachRequired: &no, RequiresRepublish: &yes, TokenRequests: []storagev1.TokenRequest{{Audience: "vault"}}}}
	if _, err := c.admin.StorageV1().CSIDrivers().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createStaticCSIVolume(t, c, d.name, "vol-tok", "tok")
	c.createPod(t, c.claimPod("app", "tok"))
	eventually(t, 60*time.Second, "the pod Ready", func() error { return c.podReady("app") })
	before := c.containerIDs(t, "app")
	var recs map[string]struct{ VolumeContext map[string]string }
	b, err := os.ReadFile(filepath.Join(d.state, "vol-tok.publish.json"))
	if err == nil {
		err = json.Unmarshal(b, &recs)
	}
	if err != nil || len(recs) != 1 {
		t.Fatalf("publish records %s (%v)", b, err)
	}
	for _, rec := range recs {
		var tokens map[string]struct {
			Token string `json:"token"`
		}
		raw := rec.VolumeContext["csi.storage.k8s.io/serviceAccount.tokens"]
		if err := json.Unmarshal([]byte(raw), &tokens); err != nil || tokens["vault"].Token == "" {
			t.Errorf("volume context tokens %q (%v), want a token for audience vault", raw, err)
		}
	}
	took := eventually(t, 30*time.Second, "the volume republished", func() error {
		if n := d.count("NodePublishVolume"); n < 2 {
			return fmt.Errorf("%d publishes", n)
		}
		return nil
	})
	t.Logf("republished %v after the pod was Ready (syncFrequency 3s)", took.Round(10*time.Millisecond))
	if n := d.count("NodeStageVolume"); n != 1 {
		t.Errorf("NodeStageVolume called %d times, want once", n)
	}
	if after := c.containerIDs(t, "app"); !sameIDs(after, before) {
		t.Errorf("the pod's containers changed: %v -> %v", before, after)
	}
	if mounts := mountsUnder(t, c.rootDir); len(mounts) != 2 {
		t.Errorf("mounts %v, want the staging and the publish mount once each", mounts)
	}
}

// checkCSIVolumeStats: the driver's NodeGetVolumeStats figures reach the node's
// /stats/summary (the pod's volume, with its claim) and kubelet_volume_stats_* on
// /metrics, read through the API server's node proxy.
func checkCSIVolumeStats(t *testing.T, c *clusterNode, pod, volume, claim string) {
	t.Helper()
	proxy := func(path string) ([]byte, error) {
		return c.admin.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", c.name, "proxy", path).DoRaw(context.Background())
	}
	eventually(t, 30*time.Second, "the CSI volume in /stats/summary", func() error {
		raw, err := proxy("stats/summary")
		if err != nil {
			return err
		}
		var summary statsapi.Summary
		if err := json.Unmarshal(raw, &summary); err != nil {
			return err
		}
		for _, p := range summary.Pods {
			if p.PodRef.Name != pod {
				continue
			}
			for _, v := range p.VolumeStats {
				if v.Name == volume && v.PVCRef != nil && v.PVCRef.Name == claim && v.CapacityBytes != nil && *v.CapacityBytes > 0 {
					return nil
				}
			}
			return fmt.Errorf("pod volumes %+v", p.VolumeStats)
		}
		return fmt.Errorf("pod %s not in the summary", pod)
	})
	raw, err := proxy("metrics")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`kubelet_volume_stats_capacity_bytes{namespace=%q,persistentvolumeclaim=%q}`, c.namespace, claim)
	if !strings.Contains(string(raw), want) {
		t.Errorf("/metrics lacks %s", want)
	}
}

// TestClusterCSIOrphanCleanedAfterRestart: a pod force-deleted from the API while nodelet
// is down leaves its containers and its published, staged CSI volume behind; the
// restarted nodelet stops the orphan and unpublishes then unstages the volume, leaving no
// mount.
func TestClusterCSIOrphanCleanedAfterRestart(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	ctx := context.Background()
	d := startCSIDriver(t, c, c.rootDir)
	createCSIDriverObject(t, c, d)
	createStaticCSIVolume(t, c, d.name, "vol-orphan", "orphan")
	c.createPod(t, c.claimPod("app", "orphan"))
	eventually(t, 60*time.Second, "the pod Ready", func() error { return c.podReady("app") })

	c.signal(syscall.SIGKILL)
	<-c.done
	zero := int64(0)
	if err := c.admin.CoreV1().Pods(c.namespace).Delete(ctx, "app", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the pod gone from the API", func() error { return c.podGone("app") })
	c.nodelet = launchNodelet(t, c.healthzPort, c.rootDir, c.cmd.Args[1:])
	took := eventually(t, 90*time.Second, "the orphan's volume unstaged", func() error {
		if d.count("NodeUnstageVolume") == 0 {
			return fmt.Errorf("calls %v", d.calls())
		}
		return nil
	})
	t.Logf("orphan's volume unstaged %v after the restart", took.Round(10*time.Millisecond))
	if got := strings.Join(d.filteredCalls("NodeGetVolumeStats"), ","); got != "NodeStageVolume,NodePublishVolume,NodeUnpublishVolume,NodeUnstageVolume" {
		t.Errorf("driver calls %s: want the orphan unpublished then unstaged, nothing published again", got)
	}
	if left := mountsUnder(t, c.rootDir); len(left) > 0 {
		t.Errorf("mounts left under the root dir: %v", left)
	}
	if ids := c.containerIDs(t, "app"); len(ids) > 0 {
		t.Errorf("orphan containers still running: %v", ids)
	}
}
