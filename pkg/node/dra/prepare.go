package dra

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/nodelet/nodelet/pkg/node/dra/state"
)

// validClaim is a pod's claim that passed validation, with the plugins to call.
type validClaim struct {
	claim   *resourceapi.ResourceClaim
	info    *claimInfo
	plugins map[string]*driverPlugin
}

// PrepareResources has the drivers prepare the pod's claims that are not prepared yet,
// and records the pod as a user of all of them. Errors read as upstream's in pod
// events; it may be retried.
func (m *Manager) PrepareResources(ctx context.Context, pod *v1.Pod) error {
	start := time.Now()
	err := m.prepare(ctx, pod)
	m.observe("PrepareResources", start, err)
	if err != nil {
		return fmt.Errorf("prepare dynamic resources: %w", err)
	}
	return nil
}

func (m *Manager) prepare(ctx context.Context, pod *v1.Pod) error {
	logger := klog.FromContext(ctx).WithName("dra-manager").WithValues("pod", klog.KObj(pod))
	// Validate everything before touching the cache: once the pod is in a claim's pod
	// set, unpreparing it means calling the driver, which would keep a pod whose
	// driver was never installed from being deleted.
	claims, err := m.validateClaims(ctx, pod)
	if err != nil {
		return err
	}
	batches, toPrepare, err := m.addPodToClaims(logger, pod, claims)
	if err != nil {
		return err
	}
	for plugin, batch := range batches {
		if err := m.prepareBatch(ctx, plugin, batch); err != nil {
			return err
		}
	}
	return m.markPrepared(toPrepare)
}

// validateClaims fetches the pod's claims and checks that each is the pod's, reserved
// for it and allocated, and that the drivers to call are registered.
func (m *Manager) validateClaims(ctx context.Context, pod *v1.Pod) ([]validClaim, error) {
	var out []validClaim
	podClaims := podClaimsToPrepare(pod)
	for i := range podClaims {
		name, mustCheckOwner, err := claimName(pod, &podClaims[i])
		if err != nil {
			return nil, err
		}
		if name == nil {
			continue
		}
		vc, err := m.validateClaim(ctx, pod, *name, mustCheckOwner)
		if err != nil {
			return nil, err
		}
		out = append(out, vc)
	}
	return out, nil
}

func (m *Manager) validateClaim(ctx context.Context, pod *v1.Pod, name string, mustCheckOwner bool) (validClaim, error) {
	if m.client == nil {
		return validClaim{}, fmt.Errorf("fetch ResourceClaim %s: %w", name, ErrNoClient)
	}
	claim, err := m.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return validClaim{}, fmt.Errorf("fetch ResourceClaim %s: %w", name, err)
	}
	if mustCheckOwner {
		if err := checkClaimIsForPod(pod, claim); err != nil {
			return validClaim{}, err
		}
	}
	if !isReservedForPod(pod, claim) {
		return validClaim{}, fmt.Errorf("pod %s (%s) is not allowed to use ResourceClaim %s (%s)", pod.Name, pod.UID, name, claim.UID)
	}
	info, err := newClaimInfo(claim, m.optionalNodeOperations)
	if err != nil {
		return validClaim{}, fmt.Errorf("ResourceClaim %s: %w", claim.Name, err)
	}
	// The driver is needed even when the claim turns out to be prepared already: an
	// unusable driver means something is wrong with the node.
	plugins := map[string]*driverPlugin{}
	for driverName, ds := range info.DriverState {
		if ds.Skips(resourceapi.SkipNodeOperationNodePrepareResources) {
			continue
		}
		if plugins[driverName], err = m.registry.getPlugin(driverName); err != nil {
			return validClaim{}, err
		}
	}
	return validClaim{claim: claim, info: info, plugins: plugins}, nil
}

// addPodToClaims adds the pod to each claim's pod set (adding new claims to the cache),
// checkpointing so that the reconcile loop can clean up should the pod go away before
// its claims are prepared. It returns the calls to make, by plugin, and the claims
// they prepare.
func (m *Manager) addPodToClaims(logger klog.Logger, pod *v1.Pod, claims []validClaim) (map[*driverPlugin][]*drapb.Claim, []types.NamespacedName, error) {
	batches := map[*driverPlugin][]*drapb.Claim{}
	var toPrepare []types.NamespacedName
	m.cache.Lock()
	defer m.cache.Unlock()
	for _, vc := range claims {
		info, err := m.cachedClaim(vc)
		if err != nil {
			return nil, nil, err
		}
		info.PodUIDs.Insert(string(pod.UID))
		if err := m.cache.sync(); err != nil {
			return nil, nil, fmt.Errorf("checkpoint ResourceClaim cache: %w", err)
		}
		if info.prepared {
			logger.V(5).Info("Resources already prepared", "claim", klog.KObj(vc.claim))
			continue
		}
		toPrepare = append(toPrepare, types.NamespacedName{Namespace: info.Namespace, Name: info.ClaimName})
		call := &drapb.Claim{Namespace: info.Namespace, Uid: string(info.ClaimUID), Name: info.ClaimName}
		for _, driverName := range info.DriverNames() {
			if info.DriverState[driverName].Skips(resourceapi.SkipNodeOperationNodePrepareResources) {
				m.metrics.prepareSkips.WithLabelValues(driverName).Inc()
				continue
			}
			plugin := vc.plugins[driverName]
			if plugin == nil {
				if plugin, err = m.registry.getPlugin(driverName); err != nil {
					return nil, nil, err
				}
			}
			batches[plugin] = append(batches[plugin], call)
		}
	}
	return batches, toPrepare, nil
}

// cachedClaim returns the cache entry of a validated claim, adding it if new. An entry
// of another claim with the same name, or one being unprepared, cannot be used. Caller
// holds the write lock.
func (m *Manager) cachedClaim(vc validClaim) (*claimInfo, error) {
	info, ok := m.cache.get(vc.claim.Name, vc.claim.Namespace)
	if !ok {
		m.cache.add(vc.info)
		return vc.info, nil
	}
	if info.ClaimUID != vc.claim.UID {
		return nil, fmt.Errorf("old ResourceClaim with same name %s and different UID %s still exists (previous pod force-deleted?!)", vc.claim.Name, info.ClaimUID)
	}
	if info.unpreparing {
		return nil, fmt.Errorf("ResourceClaim %s is being unprepared", vc.claim.Name)
	}
	return info, nil
}

// prepareBatch calls one plugin for its claims and records the devices it prepared.
// Any failure aborts: the pod's sync retries the whole preparation.
func (m *Manager) prepareBatch(ctx context.Context, plugin *driverPlugin, claims []*drapb.Claim) error {
	resp, err := plugin.nodePrepareResources(ctx, claims)
	if err != nil {
		return fmt.Errorf("NodePrepareResources: %w", err)
	}
	for uid, result := range resp.GetClaims() {
		claim := findClaim(claims, uid)
		if claim == nil {
			return fmt.Errorf("NodePrepareResources returned result for unknown claim UID %s", uid)
		}
		if result.GetError() != "" {
			return fmt.Errorf("NodePrepareResources failed for ResourceClaim %s: %s", claim.Name, result.GetError())
		}
		if err := m.setDevices(claim, plugin.driverName, result.GetDevices()); err != nil {
			return err
		}
	}
	if skipped := len(claims) - len(resp.GetClaims()); skipped != 0 {
		return fmt.Errorf("NodePrepareResources skipped %d ResourceClaims", skipped)
	}
	return nil
}

func findClaim(claims []*drapb.Claim, uid string) *drapb.Claim {
	for _, c := range claims {
		if c.Uid == uid {
			return c
		}
	}
	return nil
}

// setDevices stores a driver's answer for a claim.
func (m *Manager) setDevices(claim *drapb.Claim, driverName string, devices []*drapb.Device) error {
	var out []state.Device
	for _, d := range devices {
		out = append(out, state.Device{
			PoolName: d.GetPoolName(), DeviceName: d.GetDeviceName(), ShareID: (*types.UID)(d.ShareId),
			RequestNames: d.GetRequestNames(), CDIDeviceIDs: d.GetCdiDeviceIds(),
		})
	}
	m.cache.Lock()
	defer m.cache.Unlock()
	info, ok := m.cache.get(claim.Name, claim.Namespace)
	if !ok {
		return fmt.Errorf("internal error: unable to get claim info for ResourceClaim %s in namespace %s", claim.Name, claim.Namespace)
	}
	info.setDevices(driverName, out)
	return nil
}

// markPrepared flags the claims prepared and checkpoints their devices.
func (m *Manager) markPrepared(claims []types.NamespacedName) error {
	m.cache.Lock()
	defer m.cache.Unlock()
	for _, c := range claims {
		info, ok := m.cache.get(c.Name, c.Namespace)
		if !ok {
			return fmt.Errorf("internal error: unable to get claim info for ResourceClaim %s in namespace %s", c.Name, c.Namespace)
		}
		info.prepared = true
	}
	if err := m.cache.sync(); err != nil {
		return fmt.Errorf("checkpoint ResourceClaim state: %w", err)
	}
	return nil
}
