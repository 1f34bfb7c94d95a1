//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// testHandler is the second runc handler hack/runtime.sh configures in containerd.
const testHandler = "test-handler"

// A pod's RuntimeClass picks the runtime handler its sandbox runs with, and the class's
// overhead (filled into spec.overhead by the API server's RuntimeClass admission) sizes
// the pod cgroup; a pod whose class names a handler the runtime lacks never gets a
// sandbox, and says why in upstream's event.
func TestClusterRuntimeClass(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	ctx := context.Background()
	class := &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: c.name + "-sandboxed"},
		Handler:    testHandler,
		Overhead: &nodev1.Overhead{PodFixed: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("32Mi"),
		}},
	}
	if _, err := c.admin.NodeV1().RuntimeClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.admin.NodeV1().RuntimeClasses().Delete(ctx, class.Name, metav1.DeleteOptions{}) })

	classy := withResources(c.testPod("classy"), "500m", "500m", "64Mi", "64Mi")
	classy.Spec.RuntimeClassName = ptr.To(class.Name)
	classy = c.createPod(t, classy)
	if classy.Spec.Overhead.Cpu().MilliValue() != 250 {
		t.Fatalf("the API server did not fill spec.overhead from the RuntimeClass: %v", classy.Spec.Overhead)
	}
	// The API server's RuntimeClass admission refuses a pod naming a class that does not
	// exist; a class whose handler the runtime does not have gets through, and its sandbox
	// fails with the runtime's reason.
	noHandler := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: c.name + "-nohandler"}, Handler: "no-such-handler"}
	if _, err := c.admin.NodeV1().RuntimeClasses().Create(ctx, noHandler, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.admin.NodeV1().RuntimeClasses().Delete(ctx, noHandler.Name, metav1.DeleteOptions{}) })
	missing := c.testPod("missing")
	missing.Spec.RuntimeClassName = ptr.To(noHandler.Name)
	missing = c.createPod(t, missing)
	eventually(t, 60*time.Second, "classy Ready", func() error { return c.podReady("classy") })

	sandboxes := func(uid string) []*runtimeapi.PodSandbox {
		list, err := c.rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}})
		if err != nil {
			t.Fatal(err)
		}
		return list
	}
	got := sandboxes(string(classy.UID))
	if len(got) != 1 {
		t.Fatalf("%d sandboxes for the classy pod, want 1", len(got))
	}
	status, err := c.rs.PodSandboxStatus(ctx, got[0].Id, false)
	if err != nil {
		t.Fatal(err)
	}
	if h := status.GetStatus().GetRuntimeHandler(); h != testHandler {
		t.Errorf("the classy pod's sandbox runs under handler %q, want %q", h, testHandler)
	}

	eventually(t, 30*time.Second, "FailedCreatePodSandBox for the missing handler", func() error {
		list, err := c.admin.CoreV1().Events(c.namespace).List(ctx, metav1.ListOptions{
			FieldSelector: "reason=FailedCreatePodSandBox,involvedObject.uid=" + string(missing.UID),
		})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Type == v1.EventTypeWarning && strings.HasPrefix(e.Message, "Failed to create pod sandbox: ") &&
				strings.Contains(e.Message, `"no-such-handler"`) {
				return nil
			}
		}
		return fmt.Errorf("no FailedCreatePodSandBox event naming the handler among %d events", len(list.Items))
	})
	if n := len(sandboxes(string(missing.UID))); n != 0 {
		t.Errorf("the pod whose runtime handler is missing has %d sandboxes, want none", n)
	}
	if p, err := c.getPod("missing"); err != nil || p.Status.Phase != v1.PodPending {
		t.Errorf("the missing-handler pod: %v, phase %s; want Pending", err, p.Status.Phase)
	}

	// Requests + overhead: 750m → 768 shares and a 75000 µs quota, 96Mi of memory.
	skipUnlessCgroupV1(t)
	dir := "kubepods/pod" + string(classy.UID)
	cg := []string{c.cgroupValue(t, "cpu", dir, "cpu.shares"), c.cgroupValue(t, "cpu", dir, "cpu.cfs_quota_us"),
		c.cgroupValue(t, "memory", dir, "memory.limit_in_bytes")}
	if want := []string{"768", "75000", "100663296"}; strings.Join(cg, " ") != strings.Join(want, " ") {
		t.Errorf("pod cgroup cpu.shares, cfs_quota_us, memory limit = %v, want %v (requests + overhead)", cg, want)
	}
}

// Standalone there is no API server to read RuntimeClasses from: a static pod naming one
// is refused, with the reason in its event, instead of running under the default handler,
// and the node's other pods run.
func TestStandaloneRuntimeClassIsRefused(t *testing.T) {
	s := startStandalone(t)
	classy := strings.Replace(busyboxPod("classy", "Always", "sleep 3600"), "spec:\n", "spec:\n  runtimeClassName: kata\n", 1)
	s.writeManifest(t, "classy.yaml", classy)
	s.writeManifest(t, "plain.yaml", busyboxPod("plain", "Always", "sleep 3600"))
	waitFor(t, 20*time.Second, "the plain pod running", func() bool { return len(s.containers(t, "plain", false)) == 1 })
	if err := s.waitLog(10*time.Second, "FailedCreatePodSandBox", `RuntimeClass \"kata\" cannot be resolved: nodelet runs standalone`); err != nil {
		t.Errorf("no refusal with its reason in the log: %v", err)
	}
	if n := len(s.sandboxes(t, "classy")); n != 0 {
		t.Errorf("the pod naming a RuntimeClass got %d sandboxes, want none", n)
	}
}
