//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// switchStaticPods are what a node runs from its manifest directory: a pod with an init
// container, a probed server, a container with resources and an emptyDir, and a host-network
// pod.
func switchStaticPods(node string) map[string]string {
	return map[string]string{
		"web.yaml": fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
  labels: {app: web}
spec:
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: init
    image: %[1]s
    command: ["sh", "-c", "echo init > /scratch/init"]
    volumeMounts: [{name: scratch, mountPath: /scratch}]
  containers:
  - name: server
    image: %[2]s
    command: ["sh", "-c", "touch /tmp/ready /tmp/healthy; exec /probe-server"]
    readinessProbe: {httpGet: {path: /ready, port: 8080}, periodSeconds: 1}
    livenessProbe: {tcpSocket: {port: 9000}, periodSeconds: 1}
    volumeMounts: [{name: scratch, mountPath: /scratch}]
  - name: sleeper
    image: %[1]s
    command: ["sh", "-c", "echo %[3]s; sleep 100000"]
    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {cpu: 200m, memory: 64Mi}
  volumes:
  - name: scratch
    emptyDir: {}
`, busybox, probeServerImage, node),
		"hostnet.yaml": fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: hostnet
  namespace: kube-system
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %s
    command: ["sleep", "100000"]
`, busybox),
	}
}

const usernsStaticPod = `apiVersion: v1
kind: Pod
metadata:
  name: userns
  namespace: default
spec:
  hostUsers: false
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: ` + busybox + `
    command: ["sh", "-c", "cat /proc/self/uid_map; sleep 100000"]
`

// TestSwitchStaticPods replaces upstream's kubelet v1.37.2 by nodelet on a running node
// (same command line, config and root directory), then nodelet by upstream's: the static
// pods keep their sandboxes and containers (none created, stopped or restarted) both ways.
func TestSwitchStaticPods(t *testing.T) {
	node := "sw-" + string(uuid.NewUUID())[:8]
	manifests := t.TempDir()
	for name, body := range switchStaticPods(node) {
		if err := os.WriteFile(filepath.Join(manifests, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	running := 3
	if os.Getenv("NODELET_RUNTIME") == "containerd2" {
		// containerd 2.x runs pods in user namespaces: the mapping each kubelet keeps for
		// the pod must carry over too.
		if err := os.WriteFile(filepath.Join(manifests, "userns.yaml"), []byte(usernsStaticPod), 0o644); err != nil {
			t.Fatal(err)
		}
		running++
	}
	sw, logs := newStandaloneSwitch(t, node, manifests)
	sw.start(upstream)
	before := sw.waitRunning(running, 90*time.Second)
	t.Logf("upstream's kubelet runs:\n%s", before)
	for _, next := range []string{nodeletK, upstream} {
		sw.switchTo(next, before)
	}
	checkLogsContinue(t, logs, node)
}

// TestKubeadmSwitch runs a kubeadm-shaped control plane (etcd and kube-apiserver as static
// pods, kubeadm's manifests and PKI) under upstream's kubelet, switches the node to nodelet
// and back, and checks that the API server answers /readyz throughout (polled every 100 ms)
// and that neither component is restarted.
func TestKubeadmSwitch(t *testing.T) {
	importControlPlaneImages(t, isolatedRig)
	node := "sw-kubeadm-" + string(uuid.NewUUID())[:8]
	cp := writeKubeadmControlPlane(t, t.TempDir(), node)
	sw, _ := newStandaloneSwitch(t, node, cp.manifestDir)
	sw.start(upstream)
	cp.waitReady(t, 3*time.Minute)
	before := sw.waitRunning(2, 60*time.Second)
	stop := cp.watchAvailability(100 * time.Millisecond)
	for _, next := range []string{nodeletK, upstream} {
		sw.switchTo(next, before)
	}
	a := stop()
	t.Logf("kube-apiserver /readyz during both switches: %d checks, %d failed", a.checks, len(a.failures))
	if len(a.failures) > 0 {
		t.Errorf("the API server stopped answering (longest %v): %v", a.longest, a.failures)
	}
}

// newStandaloneSwitch is a node without an API server whose kubelets run the static pods
// in manifests; it returns the node and its pod log directory.
func newStandaloneSwitch(t *testing.T, node, manifests string) (*switchNode, string) {
	t.Helper()
	return newStandaloneSwitchServing(t, node, manifests, "enableServer: false\nreadOnlyPort: 0\n")
}

// newStandaloneSwitchServing is newStandaloneSwitch with the kubelet API settings given.
func newStandaloneSwitchServing(t *testing.T, node, manifests, server string) (*switchNode, string) {
	t.Helper()
	dir := t.TempDir()
	root, logs := filepath.Join(dir, "root"), filepath.Join(dir, "logs")
	for _, d := range []string{root, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	endpoint := nodeletEndpoint(t)
	config := switchConfig(endpoint, node, manifests, logs, freePort(t), server+`authentication:
  webhook: {enabled: false}
  anonymous: {enabled: true}
authorization: {mode: AlwaysAllow}
`)
	configPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	makeCgroupRoot(t, node)
	t.Cleanup(func() { unmountRootDir(t, root) })
	args := []string{"--config=" + configPath, "--root-dir=" + root, "--hostname-override=" + node, "--v=2"}
	sw := newSwitchNode(t, endpoint, args, func(labels map[string]string) bool {
		return strings.HasSuffix(labels[criconfig.PodNameLabel], "-"+node)
	})
	return sw, logs
}

// checkLogsContinue: each container still writes to its first log file, in the pod log
// directory both kubelets name the same way.
func checkLogsContinue(t *testing.T, logs, node string) {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(logs, "default_web-"+node+"_*", "sleeper", "0.log"))
	if len(matches) != 1 {
		t.Fatalf("sleeper's log file: %v", matches)
	}
	b, err := os.ReadFile(matches[0])
	if err != nil || !strings.Contains(string(b), node) {
		t.Errorf("sleeper's log %s: %q, %v", matches[0], b, err)
	}
	if n := strings.Count(string(b), "\n"); n != 1 {
		t.Errorf("sleeper's log has %s lines, want 1 (it ran once)", strconv.Itoa(n))
	}
}

// TestClusterSwitch replaces upstream's kubelet by nodelet on a node of the control plane,
// and back, with a static pod (and its mirror pod), an API pod reading a configMap and a
// secret, and a pod with a device of upstream's sample device plugin: no sandbox or
// container is created, stopped or restarted; the node object, the client certificate
// upstream's TLS bootstrap wrote, and the mirror pod are kept; the node and the API pod
// stay Ready throughout; the device pod keeps its device; and each new kubelet carries
// on: a configMap edit reaches the pod's volume and a new pod starts.
func TestClusterSwitch(t *testing.T) {
	c, sw, root := newClusterSwitch(t)
	c.writeManifest(t, "web.yaml", switchStaticPods(c.name)["web.yaml"])
	createSwitchVolumes(t, c)

	sw.start(upstream)
	eventually(t, 60*time.Second, "node Ready under upstream's kubelet", func() error { return c.nodeReady(t) })
	c.createPod(t, switchVolumesPod(c))
	eventually(t, 60*time.Second, "the API pod Ready", func() error { return c.podReady("vols") })
	// A pod with a device of upstream's sample plugin: the device manager's checkpoint
	// (device-plugins/kubelet_internal_checkpoint) carries its device across the switches.
	startSampleDevicePlugin(t, "")
	c.waitSampleAllocatable(t, 30*time.Second, 2)
	c.createPod(t, c.devicePod("dev"))
	eventually(t, 60*time.Second, "the device pod Ready", func() error { return c.podReady("dev") })
	podResources := filepath.Join(root, "pod-resources", "kubelet.sock")
	device := c.sampleDeviceOf(t, podResources, "dev")
	mirror := c.mirrorPodUID(t)
	nodeUID := c.nodeUID(t)
	cert := readLink(t, filepath.Join(root, "pki", "kubelet-client-current.pem"))
	before := sw.waitRunning(4, 90*time.Second)

	for i, next := range []string{nodeletK, upstream} {
		// A container that started less than 10 s before a kubelet waits for its first
		// readiness probe (upstream's kubeletRestartGracePeriod): switch after that.
		c.waitRunningFor(t, "vols", 11*time.Second)
		watch := c.watchReady(t, "vols")
		sw.switchTo(next, before)
		if flaps := watch.stop(); len(flaps) > 0 {
			t.Errorf("while switching to %s:\n%s", next, strings.Join(flaps, "\n"))
		}
		if got := c.mirrorPodUID(t); got != mirror {
			t.Errorf("the mirror pod was re-created under %s: %s, was %s", next, got, mirror)
		}
		if got := c.nodeUID(t); got != nodeUID {
			t.Errorf("the node was re-registered under %s", next)
		}
		if got := readLink(t, filepath.Join(root, "pki", "kubelet-client-current.pem")); got != cert {
			t.Errorf("%s bootstrapped a new client certificate %s (had %s)", next, got, cert)
		}
		// The plugin serves again 10 s after the new kubelet's socket appears.
		c.waitSampleAllocatable(t, 40*time.Second, 2)
		if got := c.sampleDeviceOf(t, podResources, "dev"); got != device {
			t.Errorf("under %s the device pod has %s, had %s", next, got, device)
		}
		c.checkCarriesOn(t, root, next, i)
		before = sw.waitRunning(5+i, 60*time.Second)
	}
}

// newClusterSwitch is a node of the control plane whose kubelet the test switches: its
// config (syncFrequency 10s: a configMap edit reaches a pod's volume at its next resync,
// under either kubelet; the default minute would make the test wait for it twice), root
// directory, namespace and cgroup root. Nothing runs yet.
func newClusterSwitch(t *testing.T, extraConfig ...string) (*clusterNode, *switchNode, string) {
	t.Helper()
	id := string(uuid.NewUUID())[:8]
	c := &clusterNode{name: "sw-" + id, namespace: "sw-" + id, admin: adminClient(t)}
	dir := t.TempDir()
	root, logs := filepath.Join(dir, "root"), filepath.Join(dir, "logs")
	c.manifests = filepath.Join(dir, "manifests")
	for _, d := range []string{root, c.manifests, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	endpoint := nodeletEndpoint(t)
	config := switchConfig(endpoint, c.name, c.manifests, logs, freePort(t), fmt.Sprintf(`port: %d
readOnlyPort: 0
syncFrequency: 10s
authentication:
  x509:
    clientCAFile: %s
%s`, freePort(t), filepath.Join(cpDir(t), "pki", "ca.crt"), strings.Join(extraConfig, "")))
	configPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	makeCgroupRoot(t, c.name)
	t.Cleanup(func() { unmountRootDir(t, root) })
	args := []string{"--config=" + configPath, "--root-dir=" + root, "--hostname-override=" + c.name,
		"--kubeconfig=" + filepath.Join(dir, "kubelet.kubeconfig"), "--cert-dir=" + filepath.Join(root, "pki"),
		"--bootstrap-kubeconfig=" + filepath.Join(cpDir(t), "bootstrap-kubeconfig"), "--v=2"}
	sw := newSwitchNode(t, endpoint, args, func(labels map[string]string) bool {
		return labels[criconfig.PodNamespaceLabel] == c.namespace || strings.HasSuffix(labels[criconfig.PodNameLabel], "-"+c.name)
	})
	c.rs = sw.rs
	c.createNamespace(t)
	t.Cleanup(func() { c.removeFromAPI() })
	return c, sw, root
}

// createSwitchVolumes creates the configMap and secret the API pod reads.
func createSwitchVolumes(t *testing.T, c *clusterNode) {
	t.Helper()
	ctx := context.Background()
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"a": "0"}}
	if _, err := c.admin.CoreV1().ConfigMaps(c.namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sec := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"}, StringData: map[string]string{"p": "s3cret"}}
	if _, err := c.admin.CoreV1().Secrets(c.namespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// switchVolumesPod reads the configMap and the secret, has a readiness probe, and gets the
// default service-account token volume.
func switchVolumesPod(c *clusterNode) *v1.Pod {
	pod := c.testPod("vols", "sh", "-c", "trap 'exit 0' TERM; while true; do cat /cfg/a /sec/p >/dev/null; sleep 1; done")
	pod.Spec.AutomountServiceAccountToken = nil
	ctr := &pod.Spec.Containers[0]
	ctr.ReadinessProbe = &v1.Probe{PeriodSeconds: 2,
		ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/sec/p"}}}}
	ctr.VolumeMounts = []v1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}, {Name: "sec", MountPath: "/sec"}}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
		{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "sec"}}},
	}
	return pod
}

// checkCarriesOn: the new kubelet (the i-th switch) works: a configMap edit reaches the API
// pod's volume, and a new pod starts.
func (c *clusterNode) checkCarriesOn(t *testing.T, root, kind string, i int) {
	t.Helper()
	ctx := context.Background()
	value := strconv.Itoa(i + 1)
	cm, err := c.admin.CoreV1().ConfigMaps(c.namespace).Get(ctx, "cfg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["a"] = value
	if _, err := c.admin.CoreV1().ConfigMaps(c.namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := c.getPod("vols")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "pods", string(pod.UID), "volumes", "kubernetes.io~configmap", "cfg", "a")
	// Both kubelets write a configMap edit at the pod's next resync (syncFrequency 10s,
	// with jitter) and cache the object for a while: allow several resyncs.
	took := eventually(t, 60*time.Second, kind+" updates the configMap volume", func() error {
		b, err := os.ReadFile(file)
		if err == nil && string(b) != value {
			err = fmt.Errorf("%s reads %q, want %q", file, b, value)
		}
		return err
	})
	t.Logf("%s: configMap edit in the volume after %v", kind, took.Round(time.Second))
	name := "after-" + kind
	c.createPod(t, c.testPod(name))
	took = eventually(t, 60*time.Second, kind+" starts a new pod", func() error { return c.podReady(name) })
	t.Logf("%s: new pod Ready after %v", kind, took.Round(100*time.Millisecond))
}

// waitRunningFor waits until the pod's containers have been running for d.
func (c *clusterNode) waitRunningFor(t *testing.T, name string, d time.Duration) {
	t.Helper()
	eventually(t, d+30*time.Second, name+" running for "+d.String(), func() error {
		pod, err := c.getPod(name)
		if err != nil {
			return err
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.State.Running == nil || time.Since(cs.State.Running.StartedAt.Time) < d {
				return fmt.Errorf("container %s: %+v", cs.Name, cs.State)
			}
		}
		return nil
	})
}

func (c *clusterNode) mirrorPodUID(t *testing.T) types.UID {
	t.Helper()
	var uid types.UID
	eventually(t, 30*time.Second, "the mirror pod", func() error {
		p, err := c.admin.CoreV1().Pods("default").Get(context.Background(), "web-"+c.name, metav1.GetOptions{})
		if err == nil {
			uid = p.UID
		}
		return err
	})
	return uid
}

func (c *clusterNode) nodeUID(t *testing.T) types.UID {
	t.Helper()
	n, err := c.node(t)
	if err != nil {
		t.Fatal(err)
	}
	return n.UID
}

func readLink(t *testing.T, path string) string {
	t.Helper()
	target, err := os.Readlink(path)
	if err != nil {
		t.Fatal(err)
	}
	return target
}

// readyWatch polls the node's and a pod's Ready conditions until stopped and collects
// every moment either was not True.
type readyWatch struct {
	done   chan struct{}
	result chan []string
}

func (c *clusterNode) watchReady(t *testing.T, pod string) *readyWatch {
	w := &readyWatch{done: make(chan struct{}), result: make(chan []string, 1)}
	go func() {
		var flaps []string
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				w.result <- flaps
				return
			case <-tick.C:
			}
			if err := c.nodeReady(t); err != nil {
				flaps = append(flaps, fmt.Sprintf("%s node: %v", time.Now().Format("15:04:05.000"), err))
			}
			if err := c.podReady(pod); err != nil {
				flaps = append(flaps, fmt.Sprintf("%s pod %s: %v", time.Now().Format("15:04:05.000"), pod, err))
			}
		}
	}()
	return w
}

func (w *readyWatch) stop() []string {
	close(w.done)
	return <-w.result
}

// removeFromAPI deletes the node's namespace, pods, node object and lease.
func (c *clusterNode) removeFromAPI() {
	ctx := context.Background()
	zero := int64(0)
	_ = c.admin.CoreV1().Namespaces().Delete(ctx, c.namespace, metav1.DeleteOptions{})
	pods, _ := c.admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + c.name})
	if pods != nil {
		for _, p := range pods.Items {
			_ = c.admin.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
	}
	_ = c.admin.CoreV1().Nodes().Delete(ctx, c.name, metav1.DeleteOptions{})
	_ = c.admin.CoordinationV1().Leases("kube-node-lease").Delete(ctx, c.name, metav1.DeleteOptions{})
}
