package kuberuntime

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// A pod that claims DRA devices is not started without them: no sandbox, upstream's
// event reason, and the sync fails so that it is retried.
func TestSyncPodDoesNotStartAPodWithResourceClaims(t *testing.T) {
	env := newTestEnv(t)
	pod := newPod("gpu", ctr("app"))
	claim := "gpu-claim"
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim}}
	err := syncPod(t, env, pod, nil).Error()
	if err == nil || !strings.Contains(err.Error(), "resource claims gpu") {
		t.Fatalf("SyncPod: %v, want refused naming the claim", err)
	}
	if n := len(sandboxHandlers(env)); n != 0 {
		t.Errorf("%d sandboxes created for a pod whose claims were not prepared", n)
	}
	want := "Warning FailedPrepareDynamicResources Failed to prepare dynamic resources: prepare dynamic resources: resource claims gpu need a DRA driver"
	found := false
	for _, e := range env.events() {
		found = found || strings.HasPrefix(e, want)
	}
	if !found {
		t.Errorf("events %q, want one starting %q", env.events(), want)
	}
	if err := syncPod(t, env, newPod("plain", ctr("app")), nil).Error(); err != nil {
		t.Errorf("a pod without claims: %v", err)
	}
}
