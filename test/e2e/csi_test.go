//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	csiHostpathOnce sync.Once
	csiHostpathBin  string
	csiHostpathErr  error
)

// csiHostpathBinary builds test/tools/csi-hostpath once per test run.
func csiHostpathBinary(t *testing.T) string {
	t.Helper()
	csiHostpathOnce.Do(func() {
		dir, err := os.MkdirTemp("", "csi-hostpath")
		if err != nil {
			csiHostpathErr = err
			return
		}
		csiHostpathBin = filepath.Join(dir, "csi-hostpath")
		build := exec.Command("go", "build", "-o", csiHostpathBin, "./test/tools/csi-hostpath")
		build.Dir = repoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			csiHostpathErr = fmt.Errorf("building csi-hostpath: %v\n%s", err, out)
		}
	})
	if csiHostpathErr != nil {
		t.Fatal(csiHostpathErr)
	}
	return csiHostpathBin
}

// csiDriver is the project's hostpath CSI driver serving one node: it registers through
// <root-dir>/plugins_registry (as node-driver-registrar would) and stages and publishes
// volumes as bind mounts of <state>/<volume>.
type csiDriver struct {
	*toolProcess
	name, state string
}

func startCSIDriver(t *testing.T, c *clusterNode, rootDir string, extra ...string) *csiDriver {
	t.Helper()
	// Short: the registration socket path must fit a unix socket address (108 bytes).
	name := c.namespace + ".csi.test"
	state := t.TempDir()
	socketDir := filepath.Join(rootDir, "plugins", name)
	if err := os.MkdirAll(socketDir, 0o750); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--driver-name=" + name, "--endpoint=" + filepath.Join(socketDir, "csi.sock"),
		"--registration-dir=" + filepath.Join(rootDir, "plugins_registry"), "--node-id=" + c.name, "--state-dir=" + state,
		"--max-volumes-per-node=10", "--topology=topology.hostpath.csi/node=" + c.name}, extra...)
	p := startTool(t, "csi-hostpath", csiHostpathBinary(t), nil, args...)
	d := &csiDriver{toolProcess: p, name: name, state: state}
	t.Cleanup(func() {
		_ = c.admin.StorageV1().CSIDrivers().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return d
}

// calls lists the driver's volume calls in order ("NodeStageVolume", ...), leaving out
// the capability and info queries.
func (d *csiDriver) calls() []string {
	var out []string
	for _, line := range strings.Split(d.out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "CSI" && f[1] != "NodeGetCapabilities" && f[1] != "NodeGetInfo" {
			out = append(out, f[1])
		}
	}
	return out
}

// filteredCalls are calls() without the given methods.
func (d *csiDriver) filteredCalls(without ...string) []string {
	var out []string
	for _, c := range d.calls() {
		if !slices.Contains(without, c) {
			out = append(out, c)
		}
	}
	return out
}

func (d *csiDriver) count(method string) int {
	n := 0
	for _, c := range d.calls() {
		if c == method {
			n++
		}
	}
	return n
}

// createStaticCSIVolume creates a PV of the driver with the handle, pre-bound to a claim
// of the test's namespace, and that claim; both of the storage class, if one is given.
func createStaticCSIVolume(t *testing.T, c *clusterNode, driver, handle, claim string, class ...string) {
	t.Helper()
	ctx := context.Background()
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: c.namespace + "-" + handle},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &v1.ObjectReference{Namespace: c.namespace, Name: claim},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: handle, VolumeAttributes: map[string]string{"origin": "static"}}},
		}}
	className := ""
	if len(class) > 0 {
		className, pv.Spec.StorageClassName = class[0], class[0]
	}
	if _, err := c.admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.admin.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: c.namespace},
		Spec: v1.PersistentVolumeClaimSpec{AccessModes: pv.Spec.AccessModes, VolumeName: pv.Name, StorageClassName: &className,
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := c.admin.CoreV1().PersistentVolumeClaims(c.namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitClaimBound(t, c, claim)
}

// waitClaimBound waits for the PV controller to bind the claim.
func waitClaimBound(t *testing.T, c *clusterNode, claim string) {
	t.Helper()
	eventually(t, 60*time.Second, "the claim bound", func() error {
		got, err := c.admin.CoreV1().PersistentVolumeClaims(c.namespace).Get(context.Background(), claim, metav1.GetOptions{})
		if err == nil && got.Status.Phase != v1.ClaimBound {
			err = fmt.Errorf("phase %s", got.Status.Phase)
		}
		return err
	})
}

// claimPod mounts the claim at /data and writes what it finds there and what it is given.
func (c *clusterNode) claimPod(name, claim string) *v1.Pod {
	pod := c.testPod(name)
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
		PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	return pod
}

// TestClusterCSI runs the project's hostpath CSI driver against nodelet: it registers
// through the plugin watcher and nodelet writes its CSINode entry (node ID, topology key,
// allocatable count), the node's nodeid annotation and topology label; a pod with a
// static PV of the driver gets the volume staged then published (pod info on mount as its
// CSIDriver asks), writes to it, and on deletion the volume is unpublished then unstaged
// with no mount left; a new pod finds the data, also after a kill -9 and restart of
// nodelet (mounted once, no restart); an inline ephemeral volume is published without
// staging; and when the driver goes its CSINode entry goes.
func TestClusterCSI(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	ctx := context.Background()
	d := startCSIDriver(t, c, c.rootDir)
	took := eventually(t, 20*time.Second, "the driver in the node's CSINode", func() error {
		cn, err := c.admin.StorageV1().CSINodes().Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, drv := range cn.Spec.Drivers {
			if drv.Name == d.name {
				if drv.NodeID != c.name || fmt.Sprint(drv.TopologyKeys) != "[topology.hostpath.csi/node]" ||
					drv.Allocatable == nil || drv.Allocatable.Count == nil || *drv.Allocatable.Count != 10 {
					return fmt.Errorf("driver entry %+v", drv)
				}
				return nil
			}
		}
		return fmt.Errorf("drivers %+v", cn.Spec.Drivers)
	})
	t.Logf("driver in CSINode %v after it started", took.Round(10*time.Millisecond))
	n, err := c.node(t)
	if err != nil {
		t.Fatal(err)
	}
	var ids map[string]string
	if err := json.Unmarshal([]byte(n.Annotations["csi.volume.kubernetes.io/nodeid"]), &ids); err != nil || ids[d.name] != c.name {
		t.Errorf("nodeid annotation %q (%v)", n.Annotations["csi.volume.kubernetes.io/nodeid"], err)
	}
	if n.Labels["topology.hostpath.csi/node"] != c.name {
		t.Errorf("node labels %v lack the driver's topology", n.Labels)
	}

	no, yes := false, true
	driverObj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: d.name}, Spec: storagev1.CSIDriverSpec{
		AttachRequired: &no, PodInfoOnMount: &yes,
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral}}}
	if _, err := c.admin.StorageV1().CSIDrivers().Create(ctx, driverObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createStaticCSIVolume(t, c, d.name, "vol-1", "data")
	c.createPod(t, c.claimPod("writer", "data"))
	eventually(t, 60*time.Second, "the pod with the CSI volume Ready", func() error { return c.podReady("writer") })
	c.execIn(t, "writer", "sh", "-c", "echo one > /data/hello")
	if b, err := os.ReadFile(filepath.Join(d.state, "vol-1", "hello")); err != nil || string(b) != "one\n" {
		t.Errorf("the driver's volume holds %q (%v), want what the pod wrote", b, err)
	}
	time.Sleep(2 * time.Second) // let further syncs of the pod happen
	if got := strings.Join(d.calls(), ","); got != "NodeStageVolume,NodePublishVolume" {
		t.Errorf("driver calls %s: want NodeStageVolume then NodePublishVolume, once", got)
	}
	checkPodInfoOnMount(t, d, c.namespace, "writer")

	c.deletePodAndWait(t, "writer")
	if got := strings.Join(d.calls(), ","); got != "NodeStageVolume,NodePublishVolume,NodeUnpublishVolume,NodeUnstageVolume" {
		t.Errorf("driver calls %s: want the volume unpublished then unstaged, once", got)
	}
	if left := mountsUnder(t, c.rootDir); len(left) > 0 {
		t.Errorf("mounts left under the root dir: %v", left)
	}

	c.createPod(t, c.claimPod("reader", "data"))
	eventually(t, 60*time.Second, "a new pod with the volume Ready", func() error { return c.podReady("reader") })
	if out := c.execIn(t, "reader", "cat", "/data/hello"); out != "one\n" {
		t.Errorf("the new pod reads %q, want the data kept", out)
	}

	// kill -9 and restart: the running pod keeps its volume, mounted once.
	before := c.containerIDs(t, "reader")
	c.restart(t, true)
	eventually(t, 30*time.Second, "node Ready after the restart", func() error { return c.nodeReady(t) })
	time.Sleep(3 * time.Second)
	if after := c.containerIDs(t, "reader"); !sameIDs(after, before) {
		t.Errorf("the reader's containers changed across the restart: %v -> %v", before, after)
	}
	if mounts := mountsUnder(t, c.rootDir); len(mounts) != 2 {
		t.Errorf("mounts under the root dir after the restart: %v, want the staging and the publish mount", mounts)
	}
	if out := c.execIn(t, "reader", "cat", "/data/hello"); out != "one\n" {
		t.Errorf("after the restart the reader reads %q", out)
	}

	inline := c.testPod("inline")
	inline.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{
		Driver: d.name, VolumeAttributes: map[string]string{"size": "small"}}}}}
	inline.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	stages := d.count("NodeStageVolume")
	c.createPod(t, inline)
	eventually(t, 60*time.Second, "the pod with an inline CSI volume Ready", func() error { return c.podReady("inline") })
	c.execIn(t, "inline", "sh", "-c", "echo x > /scratch/f")
	if d.count("NodeStageVolume") != stages {
		t.Errorf("an inline volume was staged")
	}

	d.stop(15) // SIGTERM: the driver removes its registration socket
	eventually(t, 30*time.Second, "the driver gone from CSINode", func() error {
		cn, err := c.admin.StorageV1().CSINodes().Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(cn.Spec.Drivers) > 0 {
			return fmt.Errorf("drivers %+v", cn.Spec.Drivers)
		}
		return nil
	})
}

// checkPodInfoOnMount: the driver was given the pod's name, namespace and UID in the
// volume context at publish, as the CSIDriver's podInfoOnMount asks.
func checkPodInfoOnMount(t *testing.T, d *csiDriver, namespace, pod string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.state, "vol-1.publish.json"))
	if err != nil {
		t.Fatalf("the driver's publish record: %v", err)
	}
	s := string(b)
	for _, want := range []string{`"csi.storage.k8s.io/pod.name":"` + pod + `"`, `"csi.storage.k8s.io/pod.namespace":"` + namespace + `"`, `"origin":"static"`} {
		if !strings.Contains(strings.ReplaceAll(s, " ", ""), want) {
			t.Errorf("publish record lacks %s:\n%s", want, s)
		}
	}
}

// TestClusterSwitchCSI moves a node running a pod with a CSI volume between upstream's
// kubelet and nodelet: each finds the volume the other published (vol_data.json in
// upstream's layout), neither restarts the pod nor mounts the volume a second time, and
// the last one unpublishes and unstages it when the pod is deleted.
func TestClusterSwitchCSI(t *testing.T) {
	c, sw, root := newClusterSwitch(t)
	sw.start(upstream)
	eventually(t, 60*time.Second, "node Ready under upstream's kubelet", func() error { return c.nodeReady(t) })
	d := startCSIDriver(t, c, root)
	no := false
	driverObj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: d.name}, Spec: storagev1.CSIDriverSpec{AttachRequired: &no}}
	if _, err := c.admin.StorageV1().CSIDrivers().Create(context.Background(), driverObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createStaticCSIVolume(t, c, d.name, "vol-1", "data")
	c.createPod(t, c.claimPod("writer", "data"))
	eventually(t, 90*time.Second, "the CSI pod Ready under upstream's kubelet", func() error { return c.podReady("writer") })
	c.execIn(t, "writer", "sh", "-c", "echo one > /data/hello")
	before := sw.waitRunning(1, 60*time.Second)
	for _, next := range []string{nodeletK, upstream} {
		sw.switchTo(next, before)
		if mounts := mountsUnder(t, root); len(mounts) != 2 {
			t.Errorf("under %s the mounts under the root dir are %v, want the staging and the publish mount", next, mounts)
		}
		if out := c.execIn(t, "writer", "cat", "/data/hello"); out != "one\n" {
			t.Errorf("under %s the pod reads %q", next, out)
		}
	}
	c.deletePodAndWait(t, "writer")
	eventually(t, 30*time.Second, "the volume unpublished and unstaged", func() error {
		if mounts := mountsUnder(t, root); len(mounts) > 0 {
			return fmt.Errorf("mounts %v", mounts)
		}
		return nil
	})
	t.Logf("driver calls: %s", strings.Join(d.calls(), ","))
}
