package kuberuntime

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func claimingPod(name string) *v1.Pod {
	pod := newPod(name, ctr("app"))
	claim := "gpu-claim"
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim}}
	return pod
}

// A pod that claims DRA devices is not started without a DRA manager: no sandbox,
// upstream's event reason, and the sync fails so that it is retried.
func TestSyncPodDoesNotStartAPodWithResourceClaims(t *testing.T) {
	env := newTestEnv(t)
	err := syncPod(t, env, claimingPod("gpu"), nil).Error()
	if err == nil || !strings.Contains(err.Error(), "resource claims gpu") {
		t.Fatalf("SyncPod: %v, want refused naming the claim", err)
	}
	if n := len(sandboxHandlers(env)); n != 0 {
		t.Errorf("%d sandboxes created for a pod whose claims were not prepared", n)
	}
	want := "Warning FailedPrepareDynamicResources Failed to prepare dynamic resources: resource claims gpu need a DRA driver"
	if events := env.events(); !hasEvent(events, want) {
		t.Errorf("events %q, want one starting %q", events, want)
	}
	if err := syncPod(t, env, newPod("plain", ctr("app")), nil).Error(); err != nil {
		t.Errorf("a pod without claims: %v", err)
	}
}

// With a DRA manager the claims are prepared before the sandbox; a failure keeps the
// pod without a sandbox, with the manager's error in the event.
func TestSyncPodPreparesResourceClaimsBeforeTheSandbox(t *testing.T) {
	var prepared []string
	var prepareErr error
	env := newTestEnv(t, func(o *Options) {
		o.PrepareDynamicResources = func(_ context.Context, pod *v1.Pod) error {
			prepared = append(prepared, pod.Name)
			return prepareErr
		}
	})
	prepareErr = errors.New(`ResourceClaim "gpu-claim" is not allocated`)
	if err := syncPod(t, env, claimingPod("gpu"), nil).Error(); err == nil {
		t.Fatal("SyncPod succeeded though the claim could not be prepared")
	}
	if n := len(sandboxHandlers(env)); n != 0 {
		t.Errorf("%d sandboxes created before the claims were prepared", n)
	}
	want := `Warning FailedPrepareDynamicResources Failed to prepare dynamic resources: ResourceClaim "gpu-claim" is not allocated`
	if events := env.events(); !hasEvent(events, want) {
		t.Errorf("events %q, want %q", events, want)
	}
	prepareErr = nil
	if err := syncPod(t, env, claimingPod("gpu2"), nil).Error(); err != nil {
		t.Fatalf("SyncPod with prepared claims: %v", err)
	}
	if n := len(sandboxHandlers(env)); n != 1 {
		t.Errorf("%d sandboxes after the claims were prepared, want 1", n)
	}
	if strings.Join(prepared, ",") != "gpu,gpu2" {
		t.Errorf("prepared for %v", prepared)
	}
}
