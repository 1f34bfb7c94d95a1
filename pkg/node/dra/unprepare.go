package dra

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// UnprepareResources removes the pod from its claims and has the drivers unprepare the
// claims no other pod uses. It is idempotent; after an error (a driver gone or
// failing) it is retried, also by the reconcile loop.
func (m *Manager) UnprepareResources(ctx context.Context, pod *v1.Pod) error {
	start := time.Now()
	err := m.unprepareForPod(ctx, pod)
	m.observe("UnprepareResources", start, err)
	if err != nil {
		return fmt.Errorf("unprepare dynamic resources: %w", err)
	}
	return nil
}

func (m *Manager) unprepareForPod(ctx context.Context, pod *v1.Pod) error {
	m.cache.RLock()
	names := m.cache.claimNamesOfPod(pod.UID)
	m.cache.RUnlock()
	if len(names) == 0 {
		// Nothing recorded for the pod (the checkpoint may have been removed): fall
		// back to the pod's own claims.
		var err error
		if names, err = podClaimNames(pod); err != nil {
			return err
		}
	}
	return m.unprepare(ctx, pod.UID, pod.Namespace, names)
}

// unprepare releases the pod's claims among names.
func (m *Manager) unprepare(ctx context.Context, podUID types.UID, namespace string, names []string) error {
	batches, released := m.releaseClaims(podUID, namespace, names)
	for driverName, claims := range batches {
		if err := m.unprepareBatch(ctx, driverName, claims); err != nil {
			return err
		}
	}
	return m.forgetClaims(ctx, namespace, released)
}

// releaseClaims removes the pod from the claims other pods still use, and marks the
// others as being unprepared. It returns the calls to make, by driver, and the claims
// they unprepare. The removals are checkpointed with forgetClaims: until then a restart
// just repeats this.
func (m *Manager) releaseClaims(podUID types.UID, namespace string, names []string) (map[string][]*drapb.Claim, []string) {
	batches := map[string][]*drapb.Claim{}
	var released []string
	m.cache.Lock()
	defer m.cache.Unlock()
	for _, name := range names {
		info, ok := m.cache.get(name, namespace)
		// A claim without the pod was not prepared for it (validation failed): another
		// pod may be using it.
		if !ok || !info.PodUIDs.Has(string(podUID)) {
			continue
		}
		if info.PodUIDs.Len() > 1 {
			info.PodUIDs.Delete(string(podUID))
			continue
		}
		info.unpreparing = true
		released = append(released, name)
		call := &drapb.Claim{Namespace: info.Namespace, Uid: string(info.ClaimUID), Name: info.ClaimName}
		for _, driverName := range info.DriverNames() {
			if info.DriverState[driverName].Skips(resourceapi.SkipNodeOperationNodeUnprepareResources) {
				m.metrics.unprepareSkips.WithLabelValues(driverName).Inc()
				continue
			}
			batches[driverName] = append(batches[driverName], call)
		}
	}
	return batches, released
}

// unprepareBatch calls the driver's current plugin for its claims.
func (m *Manager) unprepareBatch(ctx context.Context, driverName string, claims []*drapb.Claim) error {
	plugin, err := m.registry.getPlugin(driverName)
	if err != nil {
		return err
	}
	resp, err := plugin.nodeUnprepareResources(ctx, claims)
	if err != nil {
		return fmt.Errorf("NodeUnprepareResources: %w", err)
	}
	for uid, result := range resp.GetClaims() {
		claim := findClaim(claims, uid)
		if claim == nil {
			return fmt.Errorf("NodeUnprepareResources returned result for unknown claim UID %s", uid)
		}
		if result.GetError() != "" {
			return fmt.Errorf("NodeUnprepareResources failed for ResourceClaim %s: %s", claim.Name, result.GetError())
		}
	}
	if skipped := len(claims) - len(resp.GetClaims()); skipped != 0 {
		return fmt.Errorf("NodeUnprepareResources skipped %d ResourceClaims", skipped)
	}
	return nil
}

// forgetClaims deletes the unprepared claims from the cache and checkpoints.
func (m *Manager) forgetClaims(ctx context.Context, namespace string, names []string) error {
	logger := klog.FromContext(ctx).WithName("dra-manager")
	m.cache.Lock()
	defer m.cache.Unlock()
	for _, name := range names {
		m.cache.delete(name, namespace)
		logger.V(6).Info("Deleted claim info cache entry", "claim", klog.KRef(namespace, name))
	}
	if err := m.cache.sync(); err != nil {
		return fmt.Errorf("checkpoint ResourceClaim state: %w", err)
	}
	return nil
}
