//go:build e2e

package e2e

import (
	"encoding/json"
	"maps"
	"os/exec"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestKubeadmControlPlaneStaticPods runs a kubeadm-shaped control plane (etcd and
// kube-apiserver static pods from upstream's binaries, kubeadm's manifests) under a
// standalone nodelet: the API server must become ready, answer kubectl with the admin
// kubeconfig, and then stay ready for 30 s with neither container restarted.
func TestKubeadmControlPlaneStaticPods(t *testing.T) {
	refs := importControlPlaneImages(t, isolatedRig)
	node := "e2e-kubeadm-" + string(uuid.NewUUID())[:8]
	cp := writeKubeadmControlPlane(t, t.TempDir(), node)
	for _, image := range []string{cp.etcdImage, cp.apiserverImage} {
		if !slices.Contains(refs, image) {
			t.Fatalf("the manifests run %s, but the imported images are %v", image, refs)
		}
	}

	s := startKubeadmNode(t, cp)
	cp.waitReady(t, 3*time.Minute)
	t.Logf("nodelet start → kube-apiserver /readyz: %v", time.Since(s.started).Round(time.Millisecond))

	k8sVersion, _ := controlPlaneVersions(t)
	out, err := exec.Command(kubectlPath(), "--kubeconfig", cp.kubeconfig, "get", "--raw", "/version").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get --raw /version: %v\n%s", err, out)
	}
	var version struct{ GitVersion string }
	if err := json.Unmarshal(out, &version); err != nil || version.GitVersion != k8sVersion {
		t.Fatalf("kubectl get --raw /version = %s (%v), want gitVersion %s", out, err, k8sVersion)
	}

	stop := cp.watchAvailability(500 * time.Millisecond)
	time.Sleep(30 * time.Second)
	a := stop()
	t.Logf("readyz over 30 s: %d checks, %d failed", a.checks, len(a.failures))
	if len(a.failures) > 0 {
		t.Errorf("the API server stopped answering (longest %v): %v", a.longest, a.failures)
	}
	checkControlPlaneRunsUnrestarted(t, s)
}

// startKubeadmNode starts nodelet in standalone mode on cp's manifest directory, as the
// kubelet of a kubeadm control-plane node, with a cgroup root of its own; the test's end
// stops it and removes its pods.
func startKubeadmNode(t *testing.T, cp *kubeadmControlPlane) *standalone {
	t.Helper()
	return startStandaloneOn(t, cp.nodeName, cp.manifestDir, "")
}

// checkControlPlaneRunsUnrestarted checks, in the runtime and in nodelet's pod status,
// that etcd and kube-apiserver each run in one sandbox with one container that has
// never been restarted, Ready.
func checkControlPlaneRunsUnrestarted(t *testing.T, s *standalone) {
	t.Helper()
	pods := s.apiPods(t)
	for _, name := range []string{"etcd", "kube-apiserver"} {
		sandboxes := s.sandboxes(t, name)
		containers := s.containers(t, name, true)
		if len(sandboxes) != 1 || len(containers) != 1 {
			t.Errorf("%s: %d sandboxes and %d containers in the runtime, want one of each: %v", name, len(sandboxes), len(containers), ids(containers))
			continue
		}
		c := containers[0]
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING || c.Metadata.Attempt != 0 {
			t.Errorf("%s: container %s is %v, attempt %d; want running, attempt 0", name, c.Id, c.State, c.Metadata.Attempt)
		}
		pod, ok := pods[name]
		if !ok {
			t.Errorf("%s: not among nodelet's pods %v", name, slices.Collect(maps.Keys(pods)))
			continue
		}
		if pod.Status.Phase != v1.PodRunning || len(pod.Status.ContainerStatuses) != 1 {
			t.Errorf("%s: phase %s with %d container statuses", name, pod.Status.Phase, len(pod.Status.ContainerStatuses))
			continue
		}
		if cs := pod.Status.ContainerStatuses[0]; cs.RestartCount != 0 || !cs.Ready || cs.State.Running == nil {
			t.Errorf("%s: restarts %d, ready %v, state %+v", name, cs.RestartCount, cs.Ready, cs.State)
		}
	}
}
