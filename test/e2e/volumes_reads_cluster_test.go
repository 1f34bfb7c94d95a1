//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The pod sync that starts a pod reads each API object behind its volumes once before the
// sandbox is created: the kubelet sets the volumes up, the runtime manager only mounts them
// (as upstream's, which waits for the volume manager). With the Get change-detection
// strategy every configMap and secret read reaches the API server; claims and their
// volumes are read from it whatever the strategy. nodelet logs its API responses
// (round_trippers at -v 6) and the sandbox's creation (sync.go at -v 4), so the test
// counts the reads in its output.
func TestClusterVolumesReadOnceBeforeStart(t *testing.T) {
	c := startClusterNode(t, clusterOptions{
		config: "configMapAndSecretChangeDetectionStrategy: Get\n",
		args:   []string{"--vmodule=round_trippers=6,sync=4"},
	})
	ctx := context.Background()
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: c.namespace}, StringData: map[string]string{"password": "hunter2"}}
	if _, err := c.admin.CoreV1().Secrets(c.namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.createConfigMap(t, "settings", map[string]string{"a": "1"})
	c.createLocalClaim(t, "data", t.TempDir())

	pod := c.testPod("reads")
	pod.Spec.Volumes = []v1.Volume{
		{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "settings"}}}},
		{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds"}}},
		{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
		{Name: "config", MountPath: "/config"}, {Name: "creds", MountPath: "/creds"}, {Name: "data", MountPath: "/data"},
	}
	c.createPod(t, pod)
	took := eventually(t, 60*time.Second, "pod Ready", func() error { return c.podReady("reads") })

	objects := []string{
		"/namespaces/" + c.namespace + "/configmaps/settings",
		"/namespaces/" + c.namespace + "/secrets/creds",
		"/namespaces/" + c.namespace + "/persistentvolumeclaims/data",
		"/persistentvolumes/" + c.name + "-data",
	}
	reads := countAPIReads(c.out.String(), `pod="`+c.namespace+`/reads"`, objects)
	if !reads.sandboxCreated {
		t.Fatal("no \"Created PodSandbox for pod\" line for the pod in nodelet's output")
	}
	t.Logf("pod Ready %v after create, after %d runtime syncs", took, reads.syncs)
	for _, o := range objects {
		t.Logf("GET %s: %d before the sandbox was created, %d until the pod was Ready", o, reads.beforeSandbox[o], reads.all[o])
		if reads.beforeSandbox[o] != 1 {
			t.Errorf("GET %s %d times before the sandbox was created, want once", o, reads.beforeSandbox[o])
		}
	}
}

// apiReads are nodelet's GET responses per object path, those logged before the pod's
// sandbox was created and all of them, and the runtime manager's syncs of the pod.
type apiReads struct {
	beforeSandbox, all map[string]int
	sandboxCreated     bool
	syncs              int
}

// countAPIReads counts, in nodelet's output, the GET responses for each object path and
// the runtime syncs of the pod named by podKV (as klog writes it).
func countAPIReads(out, podKV string, objects []string) apiReads {
	r := apiReads{beforeSandbox: map[string]int{}, all: map[string]int{}}
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(line, `"Created PodSandbox for pod"`) && strings.Contains(line, podKV):
			r.sandboxCreated = true
		case strings.Contains(line, `"computePodActions got for pod"`) && strings.Contains(line, podKV):
			r.syncs++
		case strings.Contains(line, `"Response" verb="GET"`):
			r.countRead(line, objects)
		}
	}
	return r
}

func (r *apiReads) countRead(line string, objects []string) {
	for _, o := range objects {
		if strings.Contains(line, o+`"`) {
			r.all[o]++
			if !r.sandboxCreated {
				r.beforeSandbox[o]++
			}
		}
	}
}
