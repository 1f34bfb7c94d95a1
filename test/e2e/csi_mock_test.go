//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// csiMock is upstream's e2e mock CSI driver (test/e2e/storage/drivers/csi-test, built
// by hack/controlplane.sh build as csi-mock) serving one node. It registers through
// <root-dir>/plugins_registry, mounts nothing (it creates and removes the publish
// target directory) and logs every call as a klog line "gRPCCall: <JSON>".
type csiMock struct {
	*toolProcess
	name string
}

func startCSIMock(t *testing.T, c *clusterNode) *csiMock {
	t.Helper()
	// Short: the registration socket path must fit a unix socket address (108 bytes).
	name := c.namespace + ".mock"
	socketDir := filepath.Join(c.rootDir, "plugins", name)
	if err := os.MkdirAll(socketDir, 0o750); err != nil {
		t.Fatal(err)
	}
	p := startUpstreamTool(t, "csi-mock", nil, "--driver-name="+name, "--endpoint="+filepath.Join(socketDir, "csi.sock"),
		"--registration-dir="+filepath.Join(c.rootDir, "plugins_registry"))
	t.Cleanup(func() {
		_ = c.admin.StorageV1().CSIDrivers().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return &csiMock{toolProcess: p, name: name}
}

// mockCall is one call as the mock's interceptor logs it (driver.go logGRPC): Method
// is the full gRPC method ("/csi.v1.Node/NodeStageVolume"), Request the request
// message as encoding/json renders it (proto field names), Error "" on success.
type mockCall struct {
	Method  string
	Request struct {
		VolumeID          string            `json:"volume_id"`
		StagingTargetPath string            `json:"staging_target_path"`
		TargetPath        string            `json:"target_path"`
		VolumePath        string            `json:"volume_path"` // NodeGetVolumeStats, NodeExpandVolume
		Readonly          bool              `json:"readonly"`
		VolumeContext     map[string]string `json:"volume_context"`
		VolumeCapability  *struct {
			AccessType struct {
				Mount *json.RawMessage
				Block *json.RawMessage
			}
			AccessMode *struct {
				Mode int32 `json:"mode"`
			} `json:"access_mode"`
		} `json:"volume_capability"`
	}
	Error string
}

// name is the method without its service: "NodeStageVolume".
func (c mockCall) name() string { return c.Method[strings.LastIndex(c.Method, "/")+1:] }

// calls parses the mock's gRPCCall lines so far, in order.
func (m *csiMock) calls(t *testing.T) []mockCall {
	t.Helper()
	lines := strings.Split(m.out.String(), "\n")
	lines = lines[:len(lines)-1] // the last line may still be being written
	var out []mockCall
	for _, line := range lines {
		_, js, ok := strings.Cut(line, "gRPCCall: ")
		if !ok {
			continue
		}
		var c mockCall
		if err := json.Unmarshal([]byte(js), &c); err != nil {
			t.Fatalf("the mock's log line %q: %v", line, err)
		}
		out = append(out, c)
	}
	return out
}

// mockQueries are the calls that ask the driver about itself or a volume's usage and
// change nothing: volumeCalls leaves them out.
var mockQueries = []string{"GetPluginInfo", "GetPluginCapabilities", "Probe", "ControllerGetCapabilities",
	"NodeGetCapabilities", "NodeGetInfo", "NodeGetVolumeStats"}

// volumeCalls are the calls that change something (stage, publish, ...), in order.
func (m *csiMock) volumeCalls(t *testing.T) []mockCall {
	t.Helper()
	var out []mockCall
	for _, c := range m.calls(t) {
		if !slices.Contains(mockQueries, c.name()) {
			out = append(out, c)
		}
	}
	return out
}

func mockCallNames(calls []mockCall) string {
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = c.name()
	}
	return strings.Join(names, ",")
}

// expectMockCalls checks the methods of calls in order, and that each request named the
// volume and upstream's paths, and was answered without error.
func expectMockCalls(t *testing.T, when string, calls []mockCall, staging, target string, methods ...string) {
	t.Helper()
	if got := mockCallNames(calls); got != strings.Join(methods, ",") {
		t.Fatalf("%s: the mock's volume calls are %s, want %s", when, got, strings.Join(methods, ","))
	}
	for _, c := range calls {
		checkMockRequest(t, when, c, staging, target)
	}
}

// checkMockRequest checks one stage, publish, unpublish or unstage request: volume
// "1", the staging path upstream derives from the volume handle, the pod's target
// path, a mount capability with the PV's ReadWriteOnce as SINGLE_NODE_WRITER (the
// mock has no SINGLE_NODE_MULTI_WRITER), the PV's attributes, and no error.
func checkMockRequest(t *testing.T, when string, c mockCall, staging, target string) {
	t.Helper()
	r := c.Request
	if c.Error != "" {
		t.Errorf("%s: %s failed: %s", when, c.name(), c.Error)
	}
	if r.VolumeID != "1" {
		t.Errorf("%s: %s for volume %q, want \"1\"", when, c.name(), r.VolumeID)
	}
	wantStaging, wantTarget, withCapability := "", "", false
	switch c.name() {
	case "NodeStageVolume":
		wantStaging, withCapability = staging, true
	case "NodePublishVolume":
		wantStaging, wantTarget, withCapability = staging, target, true
		if r.Readonly {
			t.Errorf("%s: NodePublishVolume asks for a read-only publish", when)
		}
	case "NodeUnpublishVolume":
		wantTarget = target
	case "NodeUnstageVolume":
		wantStaging = staging
	default:
		t.Errorf("%s: unexpected call %s", when, c.Method)
		return
	}
	if r.StagingTargetPath != wantStaging || r.TargetPath != wantTarget {
		t.Errorf("%s: %s with staging path %q and target path %q, want %q and %q", when, c.name(),
			r.StagingTargetPath, r.TargetPath, wantStaging, wantTarget)
	}
	if !withCapability {
		return
	}
	vc := r.VolumeCapability
	switch {
	case vc == nil:
		t.Errorf("%s: %s without volume capability", when, c.name())
	case vc.AccessType.Mount == nil || vc.AccessType.Block != nil:
		t.Errorf("%s: %s without a mount access type", when, c.name())
	case vc.AccessMode == nil || vc.AccessMode.Mode != int32(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER):
		t.Errorf("%s: %s with access mode %+v, want SINGLE_NODE_WRITER", when, c.name(), vc.AccessMode)
	}
	if r.VolumeContext["origin"] != "static" {
		t.Errorf("%s: %s with volume context %v, want the PV's attributes", when, c.name(), r.VolumeContext)
	}
}

// TestClusterCSIMockDriver runs upstream's e2e mock CSI driver as the node's driver and
// checks, from the calls it logs, what upstream's kubelet does with a static PV of a
// driver without attach: NodeStageVolume then NodePublishVolume at the pod's start, on
// upstream's staging path (plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount)
// and target path (pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount), with the PV's
// access mode; after a kill -9 and restart of nodelet the same stage and publish again
// (upstream cannot reconstruct a volume whose target is not a mount point, and sets it
// up again), answered without error, and nothing else for the running pod: no
// unpublish, no unstage, no new container; on the pod's deletion NodeUnpublishVolume
// then NodeUnstageVolume, after which the target's and the staging path's directories
// are gone.
func TestClusterCSIMockDriver(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	ctx := context.Background()
	m := startCSIMock(t, c)
	eventually(t, 20*time.Second, "the mock in the node's CSINode", func() error {
		cn, err := c.admin.StorageV1().CSINodes().Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, drv := range cn.Spec.Drivers {
			if drv.Name == m.name {
				if drv.NodeID != m.name { // the mock's NodeGetInfo answers its driver name
					return fmt.Errorf("driver entry %+v", drv)
				}
				return nil
			}
		}
		return fmt.Errorf("drivers %+v", cn.Spec.Drivers)
	})
	no := false
	obj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: m.name}, Spec: storagev1.CSIDriverSpec{AttachRequired: &no}}
	if _, err := c.admin.StorageV1().CSIDrivers().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The mock starts with volumes "1", "2" and "3": a static PV needs no provisioner.
	createStaticCSIVolume(t, c, m.name, "1", "mock")
	pvName := c.namespace + "-1"
	c.createPod(t, c.claimPod("app", "mock"))
	eventually(t, 60*time.Second, "the pod with the mock's volume Ready", func() error { return c.podReady("app") })
	pod, err := c.getPod("app")
	if err != nil {
		t.Fatal(err)
	}
	staging := filepath.Join(c.rootDir, "plugins", "kubernetes.io", "csi", m.name, fmt.Sprintf("%x", sha256.Sum256([]byte("1"))), "globalmount")
	target := filepath.Join(c.rootDir, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", pvName, "mount")
	time.Sleep(2 * time.Second) // let further syncs of the pod happen
	expectMockCalls(t, "at the pod's start", m.volumeCalls(t), staging, target, "NodeStageVolume", "NodePublishVolume")
	// The container's volume is the target directory the mock made.
	c.execIn(t, "app", "sh", "-c", "echo one > /data/hello")
	if b, err := os.ReadFile(filepath.Join(target, "hello")); err != nil || string(b) != "one\n" {
		t.Errorf("the target directory holds %q (%v), want what the pod wrote", b, err)
	}

	// kill -9 and restart: the restarted nodelet stages and publishes the running
	// pod's volume again, as upstream's kubelet does, and does nothing else.
	before := c.containerIDs(t, "app")
	c.restart(t, true)
	eventually(t, 30*time.Second, "node Ready after the restart", func() error { return c.nodeReady(t) })
	took := eventually(t, 60*time.Second, "the volume staged and published again after the restart", func() error {
		if calls := m.volumeCalls(t); len(calls) < 4 {
			return fmt.Errorf("calls %s", mockCallNames(calls))
		}
		return nil
	})
	t.Logf("stage and publish repeated %v after the restart's node Ready", took.Round(10*time.Millisecond))
	time.Sleep(5 * time.Second) // room for any further call
	expectMockCalls(t, "after the restart", m.volumeCalls(t), staging, target,
		"NodeStageVolume", "NodePublishVolume", "NodeStageVolume", "NodePublishVolume")
	if err := c.podReady("app"); err != nil {
		t.Errorf("the pod after the restart: %v", err)
	}
	if after := c.containerIDs(t, "app"); !sameIDs(after, before) {
		t.Errorf("the pod's containers changed across the restart: %v -> %v", before, after)
	}
	if out := c.execIn(t, "app", "cat", "/data/hello"); out != "one\n" {
		t.Errorf("after the restart the pod reads %q", out)
	}

	c.deletePodAndWait(t, "app")
	eventually(t, 10*time.Second, "the volume unpublished and unstaged", func() error {
		if calls := m.volumeCalls(t); len(calls) < 6 {
			return fmt.Errorf("calls %s", mockCallNames(calls))
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	expectMockCalls(t, "after the pod's deletion", m.volumeCalls(t), staging, target,
		"NodeStageVolume", "NodePublishVolume", "NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume")
	for _, dir := range []string{filepath.Dir(target), filepath.Dir(staging)} {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after the pod's deletion: %v, want it removed", dir, err)
		}
	}
	// The queries (capabilities, info, volume stats) may come at any time; none failed
	// but volume stats, which may race with the unpublish.
	for _, call := range m.calls(t) {
		switch {
		case call.Error == "":
		case call.name() == "NodeGetVolumeStats":
			t.Logf("NodeGetVolumeStats of %s failed: %s", call.Request.VolumePath, call.Error)
		default:
			t.Errorf("%s failed: %s", call.Method, call.Error)
		}
	}
}
