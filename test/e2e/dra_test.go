//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// draDriver is upstream's DRA test driver (test/e2e/dra/test-driver) running as the
// kubelet plugin of one node: it publishes the node's ResourceSlice (two devices),
// registers through <root-dir>/plugins_registry, and prepares a claim by writing a CDI
// spec whose env holds the claim's opaque parameters (user_<key>=<value>) and
// claim_<claim>_<request>=true.
type draDriver struct {
	*toolProcess
	name string
}

func startDRADriver(t *testing.T, c *clusterNode, rootDir string) *draDriver {
	t.Helper()
	if err := os.MkdirAll("/var/run/cdi", 0o755); err != nil {
		t.Fatal(err)
	}
	name := c.namespace + ".test-driver.cdi.k8s.io"
	// The driver's DaemonSet would mount its data directory (DirectoryOrCreate).
	if err := os.MkdirAll(filepath.Join(rootDir, "plugins", name), 0o750); err != nil {
		t.Fatal(err)
	}
	p := startUpstreamTool(t, "test-driver", nil, "--kubeconfig="+os.Getenv("KUBECONFIG"),
		"--drivername="+name, "-v=6", "kubelet-plugin", "--node-name="+c.name,
		"--plugin-registration-path="+filepath.Join(rootDir, "plugins_registry"),
		"--datadir="+filepath.Join(rootDir, "plugins"), "--cdi-dir=/var/run/cdi", "--num-devices=2")
	d := &draDriver{toolProcess: p, name: name}
	t.Cleanup(func() { d.removeFromAPI(t, c) })
	took := d.waitRegistered(t, 1)
	t.Logf("DRA driver registered %v after it started", took.Round(10*time.Millisecond))
	return d
}

// waitRegistered waits until the kubelet has told the driver n times that it is
// registered (once per kubelet that found its socket).
func (d *draDriver) waitRegistered(t *testing.T, n int) time.Duration {
	t.Helper()
	return eventually(t, 20*time.Second, "the DRA driver registered with the kubelet", func() error {
		seen := 0
		for _, line := range strings.Split(d.out.String(), "\n") {
			if strings.Contains(line, "NotifyRegistrationStatus") && strings.Contains(line, `"handling request"`) {
				if !strings.Contains(line, "plugin_registered:true") {
					return fmt.Errorf("registration refused: %s", line)
				}
				seen++
			}
		}
		select {
		case <-d.done:
			t.Fatalf("the DRA driver exited:\n%s", d.out.String())
		default:
		}
		if seen < n {
			return fmt.Errorf("%d registrations, want %d", seen, n)
		}
		return nil
	})
}

// removeFromAPI deletes the device class and the driver's slices the test created.
func (d *draDriver) removeFromAPI(t *testing.T, c *clusterNode) {
	ctx := context.Background()
	_ = c.admin.ResourceV1().DeviceClasses().Delete(ctx, c.namespace, metav1.DeleteOptions{})
	_ = c.admin.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{FieldSelector: "spec.driver=" + d.name})
}

// calls counts the driver's gRPC requests of one method (NodePrepareResources, ...).
func (d *draDriver) calls(method string) int {
	n := 0
	for _, line := range strings.Split(d.out.String(), "\n") {
		if strings.Contains(line, `"handling request"`) && strings.Contains(line, "DRAPlugin/"+method+`"`) {
			n++
		}
	}
	return n
}

// cdiSpecs lists the CDI spec files the driver has written and not removed.
func (d *draDriver) cdiSpecs(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("/var/run/cdi", d.name+"-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// createDRAObjects creates the device class selecting the driver's devices and a claim
// template asking for one device with the opaque parameter a=b.
func createDRAObjects(t *testing.T, c *clusterNode, driver string) {
	t.Helper()
	ctx := context.Background()
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: c.namespace},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)}}}}}
	if _, err := c.admin.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	params, _ := json.Marshal(map[string]string{"a": "b"})
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one-device", Namespace: c.namespace},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "my-device", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: c.namespace}}},
			Config: []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: params}}}}},
		}}}}
	if _, err := c.admin.ResourceV1().ResourceClaimTemplates(c.namespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// draPod is a pod the scheduler places on this node (it allocates the claim there); its
// container "main" uses the claim and one device of upstream's sample device plugin, its
// container "plain" neither.
func (c *clusterNode) draPod(name string) *v1.Pod {
	pod := c.devicePod(name)
	pod.Spec.NodeName = ""
	pod.Spec.NodeSelector = map[string]string{v1.LabelHostname: c.name}
	tmpl := "one-device"
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	plain := pod.Spec.Containers[0]
	plain.Name, plain.Resources = "plain", v1.ResourceRequirements{}
	pod.Spec.Containers = append(pod.Spec.Containers, plain)
	return pod
}

// TestClusterDRA runs upstream's DRA test driver against nodelet, with the control
// plane's scheduler allocating the claim: a pod whose container uses a claim made from a
// template gets the driver's CDI env (its other container does not); the claim is
// prepared once, also across a kill -9 and restart of nodelet; the pod-resources API
// lists the container's claim and its device-plugin device; a pod bound to the node
// with a claim nobody allocated waits with FailedPrepareDynamicResources and gets no
// sandbox; and once the pod is deleted the claim is unprepared (the CDI spec removed).
// CDI needs containerd 2.x.
func TestClusterDRA(t *testing.T) {
	if !cdiRuntime() {
		t.Skip("containerd 1.6 has no CDI: DRA drivers' devices reach containers on containerd 2.x")
	}
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	startSampleDevicePlugin(t, "")
	c.waitSampleAllocatable(t, 20*time.Second, 2)
	d := startDRADriver(t, c, c.rootDir)
	createDRAObjects(t, c, d.name)

	created := c.createPod(t, c.draPod("dra"))
	eventually(t, 90*time.Second, "the DRA pod Ready", func() error { return c.podReady("dra") })
	pod, err := c.getPod("dra")
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("resource claim statuses %+v", pod.Status.ResourceClaimStatuses)
	}
	claim := *pod.Status.ResourceClaimStatuses[0].ResourceClaimName
	env := c.execInContainer(t, "dra", "main", "env")
	// The driver writes claim_<claim>_<request>=true with "-" as "_".
	for _, want := range []string{"user_a=b", strings.ReplaceAll("claim_"+claim+"_my-device", "-", "_") + "=true"} {
		if !strings.Contains(env, want+"\n") {
			t.Errorf("the claiming container's env lacks %s:\n%s", want, env)
		}
	}
	if plain := c.execInContainer(t, "dra", "plain", "env"); strings.Contains(plain, "user_a=") {
		t.Errorf("the container without the claim got its env:\n%s", plain)
	}
	checkPodResourcesClaim(t, filepath.Join(c.rootDir, "pod-resources", "kubelet.sock"), c, claim, d.name)
	if n := d.calls("NodePrepareResources"); n != 1 {
		t.Errorf("NodePrepareResources called %d times, want 1", n)
	}

	before := c.containerIDs(t, "dra")
	c.restart(t, true)
	eventually(t, 30*time.Second, "node Ready after the restart", func() error { return c.nodeReady(t) })
	time.Sleep(5 * time.Second)
	if after := c.containerIDs(t, "dra"); !sameIDs(after, before) {
		t.Errorf("the DRA pod's containers changed across the restart: %v -> %v", before, after)
	}
	if n := d.calls("NodePrepareResources"); n != 1 {
		t.Errorf("NodePrepareResources called %d times after the restart, want 1", n)
	}

	checkUnallocatedClaimWaits(t, c)

	if err := c.admin.CoreV1().Pods(c.namespace).Delete(context.Background(), created.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the DRA pod gone", func() error { return c.podGone("dra") })
	if n := d.calls("NodeUnprepareResources"); n != 1 {
		t.Errorf("NodeUnprepareResources called %d times, want 1", n)
	}
	if specs := d.cdiSpecs(t); len(specs) != 0 {
		t.Errorf("CDI specs left after the claim was unprepared: %v", specs)
	}
}

// checkPodResourcesClaim: the pod-resources API (List) lists the claim (driver, pool, device
// and CDI device) and the device-plugin device for the claiming container.
func checkPodResourcesClaim(t *testing.T, socket string, c *clusterNode, claim, driver string) {
	t.Helper()
	pod := podResourcesListed(t, socket, c.namespace, "dra")
	if pod == nil {
		t.Fatalf("pod-resources List has no %s/dra", c.namespace)
	}
	for _, ctr := range pod.Containers {
		if ctr.Name != "main" {
			if len(ctr.DynamicResources)+len(ctr.Devices) > 0 {
				t.Errorf("container %s lists %v and %v", ctr.Name, ctr.DynamicResources, ctr.Devices)
			}
			continue
		}
		if len(ctr.Devices) != 1 || ctr.Devices[0].ResourceName != string(sampleResource) {
			t.Errorf("main's devices %v, want one %s", ctr.Devices, sampleResource)
		}
		if len(ctr.DynamicResources) != 1 {
			t.Fatalf("main's dynamic resources %v, want the claim", ctr.DynamicResources)
		}
		dr := ctr.DynamicResources[0]
		if dr.ClaimName != claim || dr.ClaimNamespace != c.namespace || len(dr.ClaimResources) != 1 {
			t.Fatalf("main's claim %v, want %s/%s with one device", dr, c.namespace, claim)
		}
		r := dr.ClaimResources[0]
		if r.DriverName != driver || r.PoolName != c.name || !strings.HasPrefix(r.DeviceName, "device-") || len(r.CdiDevices) != 1 ||
			!strings.HasPrefix(r.CdiDevices[0].Name, driver+"/test=") {
			t.Errorf("main's claim resource %v", r)
		}
		return
	}
	t.Errorf("pod-resources List has no container main: %v", pod)
}

// checkUnallocatedClaimWaits: a pod bound to the node (no scheduler) with a claim nobody
// allocated or reserved for it gets no sandbox and upstream's FailedPrepareDynamicResources
// event.
func checkUnallocatedClaimWaits(t *testing.T, c *clusterNode) {
	t.Helper()
	ctx := context.Background()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "unallocated", Namespace: c.namespace},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: c.namespace}}}}}}
	if _, err := c.admin.ResourceV1().ResourceClaims(c.namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := c.testPod("waits")
	name := "unallocated"
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "r", ResourceClaimName: &name}}
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "r"}}}
	c.createPod(t, pod)
	eventually(t, 30*time.Second, "FailedPrepareDynamicResources for the unallocated claim", func() error {
		list, err := c.admin.CoreV1().Events(c.namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedPrepareDynamicResources,involvedObject.name=waits"})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			// Upstream checks the reservation first: a claim nobody allocated is
			// reserved for no pod either.
			if strings.Contains(e.Message, "is not allowed to use ResourceClaim unallocated") {
				t.Logf("event: %s", e.Message)
				return nil
			}
		}
		return fmt.Errorf("events %d", len(list.Items))
	})
	if ids := c.sandboxesOf(t, "waits"); len(ids) != 0 {
		t.Errorf("the pod with an unallocated claim has sandboxes %v", ids)
	}
	if err := c.admin.CoreV1().Pods(c.namespace).Delete(ctx, "waits", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// execInContainer runs cmd in the pod's running container of that name.
func (c *clusterNode) execInContainer(t *testing.T, pod, container string, cmd ...string) string {
	t.Helper()
	list, err := c.rs.ListContainers(context.Background(), &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{criconfig.PodNameLabel: pod, criconfig.PodNamespaceLabel: c.namespace, criconfig.ContainerNameLabel: container}})
	if err != nil || len(list) != 1 {
		t.Fatalf("container %s of pod %s: %v (%d running)", container, pod, err, len(list))
	}
	stdout, stderr, err := c.rs.ExecSync(context.Background(), list[0].Id, cmd, 10*time.Second)
	if err != nil {
		t.Fatalf("exec %v: %v\n%s", cmd, err, stderr)
	}
	return string(stdout)
}

// sandboxesOf lists the IDs of the pod's sandboxes in the runtime, in any state.
func (c *clusterNode) sandboxesOf(t *testing.T, pod string) []string {
	t.Helper()
	list, err := c.rs.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{criconfig.PodNameLabel: pod, criconfig.PodNamespaceLabel: c.namespace}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sb := range list {
		ids = append(ids, sb.Id)
	}
	return ids
}

// TestClusterSwitchDRA moves a node with prepared DRA claims between upstream's kubelet
// and nodelet, each reading the claims the other prepared from dra_manager_state: a pod
// whose claim upstream's kubelet prepared runs on under nodelet, which neither restarts
// it nor prepares its claim again and unprepares the claim when the pod is deleted; a
// pod nodelet prepared runs on under upstream's kubelet, which unprepares its claim at
// deletion. Containerd 1.6 ignores the claims' CDI devices; the claims' preparation is
// what is switched.
func TestClusterSwitchDRA(t *testing.T) {
	c, sw, root := newClusterSwitch(t)
	sw.start(upstream)
	eventually(t, 60*time.Second, "node Ready under upstream's kubelet", func() error { return c.nodeReady(t) })
	d := startDRADriver(t, c, root)
	createDRAObjects(t, c, d.name)
	registrations := 1

	for i, next := range []string{nodeletK, upstream} {
		name := fmt.Sprintf("claims-%d", i)
		pod := c.draPod(name)
		pod.Spec.Containers[0].Resources.Limits = nil
		c.createPod(t, pod)
		eventually(t, 90*time.Second, name+" Ready", func() error { return c.podReady(name) })
		if n := d.calls("NodePrepareResources"); n != i+1 {
			t.Fatalf("NodePrepareResources called %d times, want %d", n, i+1)
		}
		before := sw.waitRunning(2, 60*time.Second)
		sw.switchTo(next, before)
		registrations++
		d.waitRegistered(t, registrations)
		if n := d.calls("NodePrepareResources"); n != i+1 {
			t.Errorf("%s prepared the claim again: NodePrepareResources called %d times", next, n)
		}
		if err := c.admin.CoreV1().Pods(c.namespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, name+" gone under "+next, func() error { return c.podGone(name) })
		if n := d.calls("NodeUnprepareResources"); n != i+1 {
			t.Errorf("%s: NodeUnprepareResources called %d times, want %d", next, n, i+1)
		}
	}
	if specs := d.cdiSpecs(t); len(specs) != 0 {
		t.Errorf("CDI specs left after the claims were unprepared: %v", specs)
	}
}
