//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// sampleResource is what upstream's sample device plugin offers: two devices, Dev-1 and
// Dev-2; Allocate mounts /tmp/<device> into the container and, with CDI_ENABLED, names
// the CDI device example.com/resource=CDI-<device> whose spec sets CDI_DEVICE and adds a
// device node /tmp/CDI-<device>.
const sampleResource = v1.ResourceName("example.com/resource")

// startSampleDevicePlugin runs upstream's test/images/sample-device-plugin. With a control
// file it registers only once the file is deleted (and not again after a kubelet restart);
// without, it registers at once and again 10 s after each kubelet restart.
func startSampleDevicePlugin(t *testing.T, controlFile string) *toolProcess {
	t.Helper()
	var env []string
	if controlFile != "" {
		env = append(env, "REGISTER_CONTROL_FILE="+controlFile)
	}
	if cdiRuntime() {
		// The plugin writes its CDI spec where containerd 2.x reads them; its DaemonSet
		// would mount the directory with DirectoryOrCreate.
		if err := os.MkdirAll("/var/run/cdi", 0o755); err != nil {
			t.Fatal(err)
		}
		env = append(env, "CDI_ENABLED=1")
	}
	return startUpstreamTool(t, "sample-device-plugin", env)
}

// cdiRuntime: containerd 2.x resolves CDI device names; 1.6 has no CDI.
func cdiRuntime() bool { return os.Getenv("NODELET_RUNTIME") == "containerd2" }

// devicePod is a test pod whose container asks for one sample device.
func (c *clusterNode) devicePod(name string) *v1.Pod {
	pod := c.testPod(name)
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{sampleResource: resource.MustParse("1")}
	return pod
}

// allocatable is the node's allocatable count of the sample resource.
func (c *clusterNode) sampleAllocatable(t *testing.T) (capacity, allocatable int64, err error) {
	n, err := c.node(t)
	if err != nil {
		return 0, 0, err
	}
	capQ, allocQ := n.Status.Capacity[sampleResource], n.Status.Allocatable[sampleResource]
	return capQ.Value(), allocQ.Value(), nil
}

func (c *clusterNode) waitSampleAllocatable(t *testing.T, d time.Duration, want int64) time.Duration {
	t.Helper()
	return eventually(t, d, fmt.Sprintf("%s allocatable %d", sampleResource, want), func() error {
		_, alloc, err := c.sampleAllocatable(t)
		if err == nil && alloc != want {
			err = fmt.Errorf("allocatable %d", alloc)
		}
		return err
	})
}

// sampleDeviceOf is the device the pod-resources API lists for the pod (one expected).
func (c *clusterNode) sampleDeviceOf(t *testing.T, socket, pod string) string {
	t.Helper()
	listed := podResourcesDevices(t, socket, c.namespace, pod)
	if len(listed) != 1 || listed[0].ResourceName != string(sampleResource) || len(listed[0].DeviceIds) != 1 {
		t.Fatalf("pod-resources lists %v for %s, want one %s device", listed, pod, sampleResource)
	}
	return listed[0].DeviceIds[0]
}

// checkSampleDevice: the container sees the device the pod-resources API names: its
// mount, and on a CDI runtime the CDI spec's env var and device node.
func (c *clusterNode) checkSampleDevice(t *testing.T, pod, device string) {
	t.Helper()
	out := c.execIn(t, pod, "sh", "-c", "ls /tmp; echo CDI=$CDI_DEVICE; for f in /tmp/CDI-*; do [ -b $f ] && echo block $f; done; true")
	if !strings.Contains(out, device+"\n") {
		t.Errorf("%s's container sees %q: want the mount of its device %s", pod, out, device)
	}
	for _, other := range []string{"Dev-1", "Dev-2"} {
		if other != device && strings.Contains(out, other+"\n") {
			t.Errorf("%s's container sees %q: the other device %s is mounted too", pod, out, other)
		}
	}
	if cdiRuntime() && (!strings.Contains(out, "CDI=CDI-"+device) || !strings.Contains(out, "block /tmp/CDI-"+device)) {
		t.Errorf("%s's container sees %q: want CDI_DEVICE=CDI-%s and the block device /tmp/CDI-%[2]s from the CDI spec", pod, out, device)
	}
}

// TestClusterUpstreamSampleDevicePlugin runs upstream's own sample device plugin against
// nodelet: held back by its registration-control file it is not in the node status;
// once it registers its two devices are in capacity and allocatable within 1 s; a pod
// gets one device's mount (and on containerd 2.x its CDI env and device node); a kill -9
// of the plugin mid-stream makes the devices unallocatable while the pod runs on; the
// plugin started again serves the other device to a second pod and none to a third
// (refused, as upstream, by the device manager's admission).
func TestClusterUpstreamSampleDevicePlugin(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	control := filepath.Join(t.TempDir(), "register")
	if err := os.WriteFile(control, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p := startSampleDevicePlugin(t, control)
	p.loggedAt(10*time.Second, "Registration process will be managed explicitly")
	time.Sleep(2 * time.Second)
	if capacity, _, err := c.sampleAllocatable(t); err != nil || capacity != 0 {
		t.Fatalf("before the plugin registered: capacity %d (%v), want none", capacity, err)
	}

	if err := os.Remove(control); err != nil {
		t.Fatal(err)
	}
	registered := p.loggedAt(20*time.Second, "Control file was deleted, registration succeeded")
	var seen time.Time
	eventually(t, 10*time.Second, "the sample devices in the node status", func() error {
		capacity, alloc, err := c.sampleAllocatable(t)
		if err == nil && (capacity != 2 || alloc != 2) {
			err = fmt.Errorf("capacity %d allocatable %d", capacity, alloc)
		}
		seen = time.Now()
		return err
	})
	// The plugin logs its line after Register returned, so this is an upper bound.
	took := seen.Sub(registered)
	t.Logf("sample devices in the node's capacity and allocatable %v after the plugin registered", took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("the devices reached the node status %v after registration, want within 1s", took)
	}

	socket := filepath.Join(c.rootDir, "pod-resources", "kubelet.sock")
	c.createPod(t, c.devicePod("dev"))
	eventually(t, 60*time.Second, "the device pod Ready", func() error { return c.podReady("dev") })
	first := c.sampleDeviceOf(t, socket, "dev")
	c.checkSampleDevice(t, "dev", first)
	containers := c.containerIDs(t, "dev")

	// kill -9 mid-stream: the socket file stays, the ListAndWatch stream breaks.
	p.stop(syscall.SIGKILL)
	took = c.waitSampleAllocatable(t, 20*time.Second, 0)
	t.Logf("allocatable 0 %v after the plugin was killed", took.Round(10*time.Millisecond))
	if err := c.podReady("dev"); err != nil {
		t.Errorf("the device pod after its plugin was killed: %v", err)
	}

	startSampleDevicePlugin(t, "")
	c.waitSampleAllocatable(t, 20*time.Second, 2)
	c.createPod(t, c.devicePod("second"))
	eventually(t, 60*time.Second, "a second device pod Ready", func() error { return c.podReady("second") })
	second := c.sampleDeviceOf(t, socket, "second")
	if second == first {
		t.Errorf("both pods got %s", first)
	}
	c.checkSampleDevice(t, "second", second)
	c.createPod(t, c.devicePod("third"))
	// Upstream's device manager admits before the resource-fit predicates, so the
	// refusal is its UnexpectedAdmissionError, not OutOfexample.com/resource.
	if third := c.waitRejected(t, "third", "UnexpectedAdmissionError"); !strings.Contains(third.Status.Message, "requested number of devices unavailable") {
		t.Errorf("the third pod's refusal: %q", third.Status.Message)
	}
	if got := c.containerIDs(t, "dev"); !sameIDs(got, containers) {
		t.Errorf("the first device pod's containers changed: %v -> %v", containers, got)
	}
	if got := c.sampleDeviceOf(t, socket, "dev"); got != first {
		t.Errorf("the first pod's device changed from %s to %s", first, got)
	}
}

// waitRejected waits for the pod to fail admission with the reason.
func (c *clusterNode) waitRejected(t *testing.T, name, reason string) *v1.Pod {
	t.Helper()
	var pod *v1.Pod
	eventually(t, 30*time.Second, name+" refused with "+reason, func() error {
		p, err := c.getPod(name)
		if err != nil {
			return err
		}
		if p.Status.Phase != v1.PodFailed || p.Status.Reason != reason {
			return fmt.Errorf("phase %s reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
		}
		pod = p
		return nil
	})
	return pod
}

// TestClusterDevicePodKilledBeforeStart kills nodelet (-9) after a pod's devices were
// allocated and checkpointed but before its app container started (its init container
// sleeps). The restarted nodelet admits the pod again before upstream's sample plugin is
// back (it re-registers 10 s after the kubelet's socket reappears), so, as upstream's
// kubelet, it refuses the pod with UnexpectedAdmissionError and stops its init container.
// Nothing leaks: once the plugin is back, both devices go to two new pods, and the
// checkpoint no longer holds the refused pod.
func TestClusterDevicePodKilledBeforeStart(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	startSampleDevicePlugin(t, "")
	c.waitSampleAllocatable(t, 20*time.Second, 2)

	pod := c.devicePod("slow")
	pod.Spec.InitContainers = []v1.Container{{Name: "wait", Image: pod.Spec.Containers[0].Image,
		ImagePullPolicy: v1.PullIfNotPresent, Command: []string{"sleep", "600"}}}
	uid := string(c.createPod(t, pod).UID)
	eventually(t, 60*time.Second, "the init container running", func() error {
		p, err := c.getPod("slow")
		if err != nil {
			return err
		}
		if s := p.Status.InitContainerStatuses; len(s) != 1 || s[0].State.Running == nil {
			return fmt.Errorf("init container statuses %v", s)
		}
		return nil
	})
	if !checkpointHolds(t, uid) {
		t.Fatalf("the device checkpoint does not hold pod %s once it is admitted", uid)
	}

	c.restart(t, true)
	rejected := c.waitRejected(t, "slow", "UnexpectedAdmissionError")
	t.Logf("after the restart: %s", rejected.Status.Message)
	eventually(t, 30*time.Second, "the refused pod's init container stopped", func() error {
		if ids := c.containerIDs(t, "slow"); len(ids) > 0 {
			return fmt.Errorf("running: %v", ids)
		}
		return nil
	})

	c.waitSampleAllocatable(t, 40*time.Second, 2)
	socket := filepath.Join(c.rootDir, "pod-resources", "kubelet.sock")
	for _, name := range []string{"a", "b"} {
		c.createPod(t, c.devicePod(name))
	}
	for _, name := range []string{"a", "b"} {
		eventually(t, 60*time.Second, name+" Ready", func() error { return c.podReady(name) })
	}
	if a, b := c.sampleDeviceOf(t, socket, "a"), c.sampleDeviceOf(t, socket, "b"); a == b {
		t.Errorf("pods a and b both got %s", a)
	}
	if checkpointHolds(t, uid) {
		t.Errorf("the device checkpoint still holds the refused pod %s", uid)
	}
}

// checkpointHolds says whether the device manager's checkpoint names the pod.
func checkpointHolds(t *testing.T, podUID string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pluginapi.DevicePluginPath, "kubelet_internal_checkpoint"))
	if err != nil {
		t.Fatalf("reading the device checkpoint: %v", err)
	}
	return strings.Contains(string(b), podUID)
}
