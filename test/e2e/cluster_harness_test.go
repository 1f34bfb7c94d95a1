//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	internalapi "k8s.io/cri-api/pkg/apis"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// clusterNode is a nodelet joined to the project's control plane (hack/controlplane.sh,
// brought up by `make test-e2e`) under a node name of its own, with its own namespace for
// the test's API pods, cgroup root and static pod directory.
type clusterNode struct {
	*nodelet
	name       string
	namespace  string
	manifests  string
	kubeconfig string
	configPath string
	args       []string
	// apiPort is the kubelet API's port (a free one: tests may run beside other kubelets).
	apiPort int
	admin   kubernetes.Interface
	rs      internalapi.RuntimeService
}

// clusterOptions tune a cluster node; the zero value joins with a node client certificate.
type clusterOptions struct {
	// bootstrap joins through --bootstrap-kubeconfig (TLS bootstrap) instead.
	bootstrap bool
	// config is extra KubeletConfiguration YAML appended to the test's config file.
	config string
	// args are extra command-line flags.
	args []string
	// rootDir, podLogsDir and endpoint, when set, replace the node's temporary root and
	// pod logs directories and the isolated containerd (the disk-pressure test puts them
	// all on a filesystem of its own).
	rootDir, podLogsDir, endpoint string
}

// adminClient is a client with the control plane's admin credentials.
func adminClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		t.Fatal("KUBECONFIG is not set: run `make test-e2e` (it starts the control plane)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// controlPlane runs hack/controlplane.sh with args.
func controlPlane(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(), "hack", "controlplane.sh"), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/controlplane.sh %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func cpDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("NODELET_CP_DIR"); d != "" {
		return d
	}
	return filepath.Dir(os.Getenv("KUBECONFIG"))
}

// startClusterNode starts nodelet as a new node of the control plane and removes the node,
// its namespace and its pods when the test ends.
func startClusterNode(t *testing.T, o clusterOptions) *clusterNode {
	t.Helper()
	id := string(uuid.NewUUID())[:8]
	c := &clusterNode{name: "e2e-" + id, namespace: "e2e-" + id, manifests: t.TempDir(), admin: adminClient(t)}
	dir := t.TempDir()
	c.kubeconfig = filepath.Join(dir, "kubelet.kubeconfig")
	c.configPath = filepath.Join(dir, "config.yaml")
	c.apiPort = freePort(t)
	podLogsDir, endpoint := o.podLogsDir, o.endpoint
	if podLogsDir == "" {
		podLogsDir = t.TempDir()
	}
	if endpoint == "" {
		endpoint = nodeletEndpoint(t)
	}
	// The API server's kubelet client certificate is signed by the cluster CA, as in a
	// kubeadm cluster, whose kubelets trust that CA for client certificates.
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
podLogsDir: %s
staticPodPath: %s
cgroupRoot: /%s
port: %d
authentication:
  x509:
    clientCAFile: %s
%s`, podLogsDir, c.manifests, c.name, c.apiPort, filepath.Join(cpDir(t), "pki", "ca.crt"), o.config)
	if err := os.WriteFile(c.configPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c.args = []string{"--config=" + c.configPath, "--hostname-override=" + c.name, "--kubeconfig=" + c.kubeconfig}
	c.args = append(c.args, "--cert-dir="+filepath.Join(dir, "pki"))
	if o.bootstrap {
		c.args = append(c.args, "--bootstrap-kubeconfig="+filepath.Join(cpDir(t), "bootstrap-kubeconfig"))
	} else {
		controlPlane(t, "node-kubeconfig", c.name, c.kubeconfig)
	}
	c.args = append(c.args, o.args...)
	c.createNamespace(t)
	rs, err := cri.NewRemoteRuntimeService(context.Background(), endpoint, 3*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c.rs = rs
	makeCgroupRoot(t, c.name)
	forgetDeviceAllocations(t)
	c.nodelet = startNodeletOn(t, endpoint, o.rootDir, c.args...)
	t.Cleanup(func() { c.cleanup(t) })
	return c
}

// forgetDeviceAllocations removes the device manager's checkpoint an earlier test's node
// left: its path is fixed (upstream's), so every node of the run shares it. A new node
// would otherwise start with the devices of pods that will never run here, held until its
// pod sources are all ready, and refuse a pod admitted before that.
func forgetDeviceAllocations(t *testing.T) {
	t.Helper()
	err := os.Remove(filepath.Join(pluginapi.DevicePluginPath, "kubelet_internal_checkpoint"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

func (c *clusterNode) createNamespace(t *testing.T) {
	t.Helper()
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.namespace}}
	if _, err := c.admin.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Pods need the namespace's default service account to exist (the ServiceAccount
	// admission plugin looks it up). The controller manager creates it, but may lag (after
	// an API outage, say), so the test creates it if it is not there yet.
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: c.namespace}}
	if _, err := c.admin.CoreV1().ServiceAccounts(c.namespace).Create(context.Background(), sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// restart stops nodelet (SIGKILL when hard) and starts it again with the same arguments.
func (c *clusterNode) restart(t *testing.T, hard bool) {
	t.Helper()
	c.restartAfter(t, hard, 0)
}

// restartAfter is restart with a pause between the stop and the start.
func (c *clusterNode) restartAfter(t *testing.T, hard bool, pause time.Duration) {
	t.Helper()
	sig := syscall.SIGTERM
	if hard {
		sig = syscall.SIGKILL
	}
	c.signal(sig)
	<-c.done
	time.Sleep(pause)
	c.nodelet = launchNodelet(t, c.healthzPort, c.rootDir, c.cmd.Args[1:])
}

// cleanup stops nodelet, then removes the node's pods from containerd and its objects
// from the API server, so that the next test starts clean.
func (c *clusterNode) cleanup(t *testing.T) {
	ctx := context.Background()
	c.signal(syscall.SIGKILL)
	<-c.done
	sandboxes, _ := c.rs.ListPodSandbox(ctx, nil)
	for _, sb := range sandboxes {
		if sb.Labels[criconfig.PodNamespaceLabel] == c.namespace || strings.HasSuffix(sb.Labels[criconfig.PodNameLabel], "-"+c.name) {
			_ = c.rs.StopPodSandbox(ctx, sb.Id)
			_ = c.rs.RemovePodSandbox(ctx, sb.Id)
		}
	}
	// A test that failed half-way leaves its pods' volumes mounted (nodelet was killed):
	// detach them, so that the test's temporary directories can go.
	unmountAllUnder(t, c.rootDir)
	c.removeFromAPI()
}

// unmountAllUnder lazily unmounts every mount under dir, deepest first.
func unmountAllUnder(t *testing.T, dir string) {
	mounts := mountsUnder(t, dir)
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := syscall.Unmount(mounts[i], syscall.MNT_DETACH); err != nil {
			t.Logf("unmounting %s: %v", mounts[i], err)
		}
	}
}

// eventually polls cond every 50 ms until it holds or d passes; the last error explains a
// failure.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	var last error
	for time.Since(start) < d {
		if last = cond(); last == nil {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v: %v", what, d, last)
	return 0
}

// node reads this node's Node object.
func (c *clusterNode) node(t *testing.T) (*v1.Node, error) {
	t.Helper()
	return c.admin.CoreV1().Nodes().Get(context.Background(), c.name, metav1.GetOptions{})
}

// nodeReady is nil once the Node exists with Ready=True.
func (c *clusterNode) nodeReady(t *testing.T) error {
	n, err := c.node(t)
	if err != nil {
		return err
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == v1.NodeReady {
			if cond.Status == v1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("Ready=%s: %s", cond.Status, cond.Message)
		}
	}
	return fmt.Errorf("no Ready condition yet")
}

// testPod is a busybox pod bound to this node by its nodeName, so that the test depends
// on the scheduler only where it says so (the Deployment test).
func (c *clusterNode) testPod(name string, command ...string) *v1.Pod {
	if len(command) == 0 {
		command = []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}
	}
	no := false
	grace := int64(5)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace, Labels: map[string]string{"app": name}},
		Spec: v1.PodSpec{
			NodeName:                      c.name,
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{{
				Name: "main", Image: "docker.io/library/busybox:1.36", ImagePullPolicy: v1.PullIfNotPresent,
				Command: command,
			}},
		},
	}
}

// createPod creates pod through the API.
func (c *clusterNode) createPod(t *testing.T, pod *v1.Pod) *v1.Pod {
	t.Helper()
	created, err := c.admin.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// getPod reads a pod of the test's namespace.
func (c *clusterNode) getPod(name string) (*v1.Pod, error) {
	return c.admin.CoreV1().Pods(c.namespace).Get(context.Background(), name, metav1.GetOptions{})
}

// podReady is nil once the pod reports Ready=True.
func (c *clusterNode) podReady(name string) error {
	p, err := c.getPod(name)
	if err != nil {
		return err
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == v1.PodReady && cond.Status == v1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("phase %s, not ready yet", p.Status.Phase)
}

// podGone is nil once the pod no longer exists in the API.
// deletePodAndWait deletes the pod through the API and waits (up to a minute) until the
// API server has it no more: nodelet has stopped it and torn it down.
func (c *clusterNode) deletePodAndWait(t *testing.T, name string) {
	t.Helper()
	if err := c.admin.CoreV1().Pods(c.namespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "pod "+name+" gone", func() error { return c.podGone(name) })
}

func (c *clusterNode) podGone(name string) error {
	_, err := c.getPod(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("pod %s still exists", name)
}

// writeManifest writes a static pod manifest with a rename, as tools do.
func (c *clusterNode) writeManifest(t *testing.T, file, body string) {
	t.Helper()
	tmp := filepath.Join(c.manifests, "."+file+".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.manifests, file)); err != nil {
		t.Fatal(err)
	}
}
