package nodestatus

import (
	"context"
	"os"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// TestAgainstAPIServer runs the controller against a real API server when
// NODESTATUS_TEST_KUBECONFIG (the node's credentials) and NODESTATUS_TEST_ADMIN_KUBECONFIG
// are set; NODESTATUS_TEST_NODE names the node (default ns-helper-test) and
// NODESTATUS_TEST_HOLD keeps it running that long before cleaning up, for a look with
// kubectl. It registers, waits for Ready and the lease, deletes the Node as the admin
// and waits for it to come back, then deletes its Node and Lease.
func TestAgainstAPIServer(t *testing.T) {
	nodeKubeconfig, adminKubeconfig := os.Getenv("NODESTATUS_TEST_KUBECONFIG"), os.Getenv("NODESTATUS_TEST_ADMIN_KUBECONFIG")
	if nodeKubeconfig == "" || adminKubeconfig == "" {
		t.Skip("NODESTATUS_TEST_KUBECONFIG and NODESTATUS_TEST_ADMIN_KUBECONFIG are not set")
	}
	name := os.Getenv("NODESTATUS_TEST_NODE")
	if name == "" {
		name = "ns-helper-test"
	}
	nodeClient, admin := clientFrom(t, nodeKubeconfig), clientFrom(t, adminKubeconfig)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		c := context.Background()
		_ = admin.CoreV1().Nodes().Delete(c, name, metav1.DeleteOptions{})
		_ = admin.CoordinationV1().Leases(v1.NamespaceNodeLease).Delete(c, name, metav1.DeleteOptions{})
	})

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: nodeClient.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: name})

	opts := testOptions()
	opts.NodeName, opts.Hostname, opts.RootDir = name, name, t.TempDir()
	opts.NodeLabels = map[string]string{"node.kubernetes.io/nodelet-test": "true"}
	rt := &fakeRuntime{version: "v1.7.24", images: []container.Image{
		{ID: "sha256:1", RepoTags: []string{"registry.k8s.io/pause:3.10"}, RepoDigests: []string{"registry.k8s.io/pause@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a"}, Size: 320368},
	}}
	c, err := New(opts, Deps{Client: nodeClient, Runtime: rt, Recorder: recorder, Clock: clock.RealClock{}})
	if err != nil {
		t.Fatal(err)
	}
	c.BirthCry()
	go c.Run(ctx)

	first := waitFor(t, "a Ready node", func() *v1.Node {
		n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil || !isReady(n) {
			return nil
		}
		return n
	})
	checkRealNode(t, first)
	waitLeaseOwnedBy(t, admin, name, first.UID)

	if err := admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	second := waitFor(t, "re-registration", func() *v1.Node {
		n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil || n.UID == first.UID || !isReady(n) {
			return nil
		}
		return n
	})
	waitLeaseOwnedBy(t, admin, name, second.UID)
	if hold, err := time.ParseDuration(os.Getenv("NODESTATUS_TEST_HOLD")); err == nil {
		t.Logf("holding node %s for %v", name, hold)
		time.Sleep(hold)
	}
}

func clientFrom(t *testing.T, path string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func waitFor(t *testing.T, what string, get func() *v1.Node) *v1.Node {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if n := get(); n != nil {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitLeaseOwnedBy(t *testing.T, admin kubernetes.Interface, name string, uid any) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		l, err := admin.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && len(l.OwnerReferences) == 1 && l.OwnerReferences[0].UID == uid && *l.Spec.HolderIdentity == name {
			return
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("lease: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the lease owned by %v (last: %v, %v)", uid, l, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkRealNode compares what the API server stored with this host.
func checkRealNode(t *testing.T, n *v1.Node) {
	t.Helper()
	info, err := ReadMachineInfo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Status.Capacity.Cpu().Value(); got != int64(info.NumCores) {
		t.Errorf("cpu capacity %d, host has %d", got, info.NumCores)
	}
	if got := n.Status.Capacity.Memory().Value(); got != int64(info.MemoryCapacity) {
		t.Errorf("memory capacity %d, host has %d", got, info.MemoryCapacity)
	}
	ni := n.Status.NodeInfo
	if ni.BootID != info.BootID || ni.MachineID != info.MachineID || ni.KernelVersion != info.KernelVersion || ni.OSImage != info.OSImage {
		t.Errorf("nodeInfo %+v does not match the host %+v", ni, info)
	}
	if ni.ContainerRuntimeVersion != "containerd://1.7.24" || ni.KubeletVersion != "v1.37.2" {
		t.Errorf("versions: %q %q", ni.ContainerRuntimeVersion, ni.KubeletVersion)
	}
	if len(n.Status.Addresses) != 2 || n.Status.Addresses[0].Type != v1.NodeInternalIP || n.Status.Addresses[0].Address == "127.0.0.1" {
		t.Errorf("addresses = %v", n.Status.Addresses)
	}
	if n.Labels["node.kubernetes.io/nodelet-test"] != "true" {
		t.Errorf("labels = %v", n.Labels)
	}
	if len(n.Status.Images) != 1 {
		t.Errorf("images = %v", n.Status.Images)
	}
}
