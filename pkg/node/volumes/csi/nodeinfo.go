package csi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"
)

// nodeIDAnnotation is the Node annotation holding a JSON map from driver name to the
// driver's node ID.
const nodeIDAnnotation = "csi.volume.kubernetes.io/nodeid"

// migratedPlugins are the in-tree volume plugins whose volumes go through CSI drivers;
// all are migrated for good, so the CSINode always announces all of them, sorted.
var migratedPlugins = strings.Join([]string{
	"kubernetes.io/aws-ebs",
	"kubernetes.io/azure-disk",
	"kubernetes.io/azure-file",
	"kubernetes.io/cinder",
	"kubernetes.io/gce-pd",
	"kubernetes.io/portworx-volume",
	"kubernetes.io/vsphere-volume",
}, ",")

var (
	// updateBackoff retries one update of the Node or CSINode object, on any error.
	updateBackoff = wait.Backoff{Steps: 4, Duration: 10 * time.Millisecond, Factor: 5, Jitter: 0.1}
	// initBackoff retries the CSINode initialization for about 140 seconds.
	initBackoff = wait.Backoff{Steps: 6, Duration: 30 * time.Millisecond, Factor: 8, Jitter: 0.1}
	// apiServerPollInterval paces the wait for the API server in InitializeNode.
	apiServerPollInterval = time.Second
)

// InitializeNode waits until the API server answers, then creates the CSINode object
// owned by the Node, or fixes its owner and the migrated-plugins annotation
// (storage.alpha.kubernetes.io/migrated-plugins). It returns once that succeeded, or
// with an error once the retries are exhausted or ctx ends.
//
// Upstream keeps the node NotReady ("CSINode is not yet initialized") until this
// succeeds and exits the kubelet when it gives up; both are the caller's to do. Without
// a client (standalone) there is nothing to initialize.
func (m *Manager) InitializeNode(ctx context.Context) error {
	if m.client == nil {
		klog.InfoS("Skipping CSINode initialization, kubelet running in standalone mode")
		return nil
	}
	if err := m.waitForAPIServer(ctx); err != nil {
		return err
	}
	var lastErr error
	err := wait.ExponentialBackoffWithContext(ctx, initBackoff, func(ctx context.Context) (bool, error) {
		if lastErr = m.initializeCSINode(ctx); lastErr != nil {
			klog.ErrorS(lastErr, "Failed to initialize CSINode")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("failed to initialize CSINode after retrying: %w (last error: %v)", err, lastErr)
	}
	return nil
}

// waitForAPIServer polls for this node's CSINode until the API server answers, found
// or not: the kubelet may lack permissions while its TLS bootstrap is underway.
func (m *Manager) waitForAPIServer(ctx context.Context) error {
	// ResourceVersion "0" lets the API server answer from its cache: the object is
	// thrown away, only the answer matters.
	opts := metav1.GetOptions{ResourceVersion: "0"}
	return wait.PollUntilContextCancel(ctx, apiServerPollInterval, true, func(ctx context.Context) (bool, error) {
		_, err := m.client.StorageV1().CSINodes().Get(ctx, m.nodeName, opts)
		if err == nil || apierrors.IsNotFound(err) {
			return true, nil
		}
		klog.V(2).InfoS("Failed to contact API server when waiting for CSINode publishing", "err", err)
		return false, nil
	})
}

func (m *Manager) initializeCSINode(ctx context.Context) error {
	var lastErr error
	err := wait.ExponentialBackoffWithContext(ctx, updateBackoff, func(ctx context.Context) (bool, error) {
		if lastErr = m.tryInitializeCSINode(ctx); lastErr != nil {
			klog.V(2).InfoS("Failed to publish CSINode", "err", lastErr)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("error updating CSINode annotation: %v; caused by: %v", err, lastErr)
	}
	return nil
}

func (m *Manager) tryInitializeCSINode(ctx context.Context) error {
	m.nodeMu.Lock()
	defer m.nodeMu.Unlock()
	// The Node's UID is read anew: the Node may have been re-created since.
	node, err := m.client.CoreV1().Nodes().Get(ctx, m.nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	m.nodeUID = node.UID
	csiNode, err := m.client.StorageV1().CSINodes().Get(ctx, m.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = m.createCSINode(ctx)
		return err
	}
	if err != nil {
		return err
	}
	if err := m.ensureNodeOwnsCSINode(ctx, csiNode); err != nil {
		return err
	}
	if setMigrationAnnotation(csiNode) {
		_, err = m.client.StorageV1().CSINodes().Update(ctx, csiNode, metav1.UpdateOptions{})
	}
	return err
}

// installDriver records a driver's node ID in the Node annotation, its topology in the
// Node's labels and its entry in the CSINode object.
func (m *Manager) installDriver(ctx context.Context, name string, info nodeInfo) error {
	if info.nodeID == "" {
		return errors.New("error adding CSI driver node info: driverNodeID must not be empty")
	}
	if m.client == nil {
		return nil
	}
	if err := m.updateNode(ctx, setNodeID(name, info.nodeID), addTopologyLabels(info.topology)); err != nil {
		return fmt.Errorf("error updating Node object with CSI driver node info: %v", err)
	}
	if err := m.updateCSINode(ctx, name, info); err != nil {
		return fmt.Errorf("error updating CSINode object with CSI driver node info: %v", err)
	}
	return nil
}

// uninstallDriver removes a driver's CSINode entry and its node ID from the Node
// annotation. The topology labels stay: other drivers may report the same keys.
func (m *Manager) uninstallDriver(ctx context.Context, name string) error {
	if m.client == nil {
		return nil
	}
	err := retryUpdate(ctx, "CSINode", func(ctx context.Context) error { return m.tryRemoveFromCSINode(ctx, name) })
	if err != nil {
		return fmt.Errorf("error uninstalling CSI driver from CSINode object %v", err)
	}
	if err := m.updateNode(ctx, removeNodeID(name)); err != nil {
		return fmt.Errorf("error removing CSI driver node info from Node object %v", err)
	}
	return nil
}

// retryUpdate runs try with updateBackoff until it succeeds, collecting the errors.
func retryUpdate(ctx context.Context, object string, try func(context.Context) error) error {
	var errs []error
	err := wait.ExponentialBackoffWithContext(ctx, updateBackoff, func(ctx context.Context) (bool, error) {
		if err := try(ctx); err != nil {
			errs = append(errs, err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("error updating %s: %v; caused by: %v", object, err, utilerrors.NewAggregate(errs))
	}
	return nil
}

// nodeChange edits a copy of the Node and reports whether it changed anything.
type nodeChange func(node *v1.Node) (changed bool, err error)

func (m *Manager) updateNode(ctx context.Context, changes ...nodeChange) error {
	return retryUpdate(ctx, "node", func(ctx context.Context) error { return m.tryUpdateNode(ctx, changes) })
}

// tryUpdateNode applies the changes to the latest Node and patches them in. The status
// patch carries metadata too, so labels and annotations change without touching the
// spec.
func (m *Manager) tryUpdateNode(ctx context.Context, changes []nodeChange) error {
	m.nodeMu.Lock()
	defer m.nodeMu.Unlock()
	original, err := m.client.CoreV1().Nodes().Get(ctx, m.nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	m.nodeUID = original.UID
	node := original.DeepCopy()
	changed := false
	for _, change := range changes {
		c, err := change(node)
		if err != nil {
			return err
		}
		changed = changed || c
	}
	if !changed {
		return nil
	}
	_, _, err = nodeutil.PatchNodeStatus(m.client.CoreV1(), types.NodeName(m.nodeName), original, node)
	return err
}

// nodeIDs parses the node ID annotation; a missing one is an empty map.
func nodeIDs(node *v1.Node) (map[string]string, error) {
	ids := map[string]string{}
	value := node.Annotations[nodeIDAnnotation]
	if value == "" {
		return ids, nil
	}
	if err := json.Unmarshal([]byte(value), &ids); err != nil {
		return nil, fmt.Errorf("failed to parse node's %q annotation value (%q) err=%v", nodeIDAnnotation, value, err)
	}
	if ids == nil { // the annotation said "null"
		ids = map[string]string{}
	}
	return ids, nil
}

func setNodeIDs(node *v1.Node, ids map[string]string) error {
	if len(ids) == 0 {
		delete(node.Annotations, nodeIDAnnotation)
		return nil
	}
	raw, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[nodeIDAnnotation] = string(raw)
	return nil
}

func setNodeID(driver, id string) nodeChange {
	return func(node *v1.Node) (bool, error) {
		ids, err := nodeIDs(node)
		if err != nil || ids[driver] == id {
			return false, err
		}
		ids[driver] = id
		return true, setNodeIDs(node, ids)
	}
}

func removeNodeID(driver string) nodeChange {
	return func(node *v1.Node) (bool, error) {
		ids, err := nodeIDs(node)
		if err != nil {
			return false, err
		}
		if _, ok := ids[driver]; !ok {
			return false, nil
		}
		delete(ids, driver)
		return true, setNodeIDs(node, ids)
	}
}

// addTopologyLabels labels the Node with the driver's topology segments. A label that
// exists with another value fails the registration: two drivers disagree about where
// the node is.
func addTopologyLabels(topology map[string]string) nodeChange {
	return func(node *v1.Node) (bool, error) {
		for k, v := range topology {
			if cur, ok := node.Labels[k]; ok && cur != v {
				return false, fmt.Errorf("detected topology value collision: driver reported %q:%q but existing label is %q:%q", k, v, k, cur)
			}
		}
		changed := false
		for k, v := range topology {
			if _, ok := node.Labels[k]; ok {
				continue
			}
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			node.Labels[k] = v
			changed = true
		}
		return changed, nil
	}
}

func (m *Manager) updateCSINode(ctx context.Context, name string, info nodeInfo) error {
	return retryUpdate(ctx, "CSINode", func(ctx context.Context) error { return m.tryInstallInCSINode(ctx, name, info) })
}

func (m *Manager) tryInstallInCSINode(ctx context.Context, name string, info nodeInfo) error {
	m.nodeMu.Lock()
	defer m.nodeMu.Unlock()
	csiNode, err := m.client.StorageV1().CSINodes().Get(ctx, m.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		csiNode, err = m.createCSINode(ctx)
	}
	if err != nil {
		return err
	}
	if err := m.ensureNodeOwnsCSINode(ctx, csiNode); err != nil {
		return err
	}
	entry := csiNodeDriver(name, info)
	entryChanged := replaceDriverEntry(csiNode, entry)
	annotationChanged := setMigrationAnnotation(csiNode)
	if !entryChanged && !annotationChanged {
		return nil
	}
	_, err = m.client.StorageV1().CSINodes().Update(ctx, csiNode, metav1.UpdateOptions{})
	return err
}

// csiNodeDriver is a driver's CSINode entry: topology keys sorted, the volume limit as
// allocatable count when the driver reports one (capped at the API's int32).
func csiNodeDriver(name string, info nodeInfo) storagev1.CSINodeDriver {
	entry := storagev1.CSINodeDriver{
		Name:         name,
		NodeID:       info.nodeID,
		TopologyKeys: slices.Sorted(maps.Keys(info.topology)),
	}
	if entry.TopologyKeys == nil {
		entry.TopologyKeys = []string{}
	}
	switch {
	case info.maxVolumes > math.MaxInt32:
		klog.InfoS("Exceeded max supported attach limit value, truncating it", "limit", math.MaxInt32)
		entry.Allocatable = &storagev1.VolumeNodeResources{Count: new(int32(math.MaxInt32))}
	case info.maxVolumes > 0:
		entry.Allocatable = &storagev1.VolumeNodeResources{Count: new(int32(info.maxVolumes))}
	case info.maxVolumes < 0:
		klog.ErrorS(nil, "Invalid attach limit value cannot be added to CSINode object", "limit", info.maxVolumes, "driver", name)
	}
	return entry
}

// replaceDriverEntry puts entry last in the CSINode's drivers, replacing the driver's
// old entry, and reports whether that changed anything.
func replaceDriverEntry(csiNode *storagev1.CSINode, entry storagev1.CSINodeDriver) bool {
	i := slices.IndexFunc(csiNode.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == entry.Name })
	if i >= 0 && sameDriverEntry(csiNode.Spec.Drivers[i], entry) {
		return false
	}
	drivers := slices.DeleteFunc(slices.Clone(csiNode.Spec.Drivers), func(d storagev1.CSINodeDriver) bool { return d.Name == entry.Name })
	csiNode.Spec.Drivers = append(drivers, entry)
	return true
}

// sameDriverEntry compares what registration sets: the node ID, the set of topology
// keys and the allocatable count.
func sameDriverEntry(old, entry storagev1.CSINodeDriver) bool {
	oldKeys := slices.Sorted(slices.Values(old.TopologyKeys))
	return old.NodeID == entry.NodeID &&
		slices.Equal(slices.Compact(oldKeys), entry.TopologyKeys) &&
		allocatableCount(old) == allocatableCount(entry)
}

func allocatableCount(d storagev1.CSINodeDriver) int32 {
	if d.Allocatable == nil || d.Allocatable.Count == nil {
		return 0
	}
	return *d.Allocatable.Count
}

func (m *Manager) tryRemoveFromCSINode(ctx context.Context, name string) error {
	m.nodeMu.Lock()
	defer m.nodeMu.Unlock()
	csiNode, err := m.client.StorageV1().CSINodes().Get(ctx, m.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	isDriver := func(d storagev1.CSINodeDriver) bool { return d.Name == name }
	if !slices.ContainsFunc(csiNode.Spec.Drivers, isDriver) {
		return nil
	}
	csiNode.Spec.Drivers = slices.DeleteFunc(csiNode.Spec.Drivers, isDriver)
	_, err = m.client.StorageV1().CSINodes().Update(ctx, csiNode, metav1.UpdateOptions{})
	return err
}

// createCSINode creates the node's CSINode, owned by the Node so that it goes with it.
// Called with nodeMu held.
func (m *Manager) createCSINode(ctx context.Context) (*storagev1.CSINode, error) {
	uid, err := m.knownNodeUID(ctx)
	if err != nil {
		return nil, err
	}
	csiNode := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{
			Name: m.nodeName,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: m.nodeName, UID: uid,
			}},
		},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{}},
	}
	setMigrationAnnotation(csiNode)
	return m.client.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{})
}

// knownNodeUID returns the Node's UID, reading the Node when it is not known yet.
// Upstream learns it only in the start-up initialization; reading it here keeps a
// driver registered earlier from creating a CSINode with an empty owner UID, which the
// initialization would then delete. Called with nodeMu held.
func (m *Manager) knownNodeUID(ctx context.Context) (types.UID, error) {
	if m.nodeUID != "" {
		return m.nodeUID, nil
	}
	node, err := m.client.CoreV1().Nodes().Get(ctx, m.nodeName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	m.nodeUID = node.UID
	return m.nodeUID, nil
}

// ensureNodeOwnsCSINode deletes a CSINode left by an earlier Node of the same name and
// returns an error, so that the next attempt creates a fresh one: the old one's
// drivers belong to a node that is gone. Called with nodeMu held.
func (m *Manager) ensureNodeOwnsCSINode(ctx context.Context, csiNode *storagev1.CSINode) error {
	uid, err := m.knownNodeUID(ctx)
	if err != nil {
		return err
	}
	var ownerUID types.UID
	for _, ref := range csiNode.OwnerReferences {
		if ref.Kind != "Node" {
			continue
		}
		ownerUID = ref.UID
		if ref.Name == m.nodeName && ref.UID == uid {
			return nil
		}
	}
	klog.V(2).InfoS("Existing CSINode is owned by a different node, cleaning up", "csiNode", csiNode.Name, "oldNodeID", ownerUID, "newNodeID", uid)
	if err := m.client.StorageV1().CSINodes().Delete(ctx, m.nodeName, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("error deleting existing CSINode %q: %w", csiNode.Name, err)
	}
	return fmt.Errorf("CSINode %q was owned by different node (oldNodeID=%q, newNodeID=%q), deleted it", csiNode.Name, ownerUID, uid)
}

// setMigrationAnnotation sets the migrated-plugins annotation and reports whether it
// changed. The comparison is of the sets, so a reordered value is left alone.
func setMigrationAnnotation(csiNode *storagev1.CSINode) bool {
	current := strings.Split(csiNode.Annotations[v1.MigratedPluginsAnnotationKey], ",")
	slices.Sort(current)
	if strings.Join(slices.Compact(current), ",") == migratedPlugins {
		return false
	}
	if csiNode.Annotations == nil {
		csiNode.Annotations = map[string]string{}
	}
	csiNode.Annotations[v1.MigratedPluginsAnnotationKey] = migratedPlugins
	return true
}
