// Package dra is the node side of Dynamic Resource Allocation, upstream's kubelet
// v1.37.2 pkg/kubelet/cm/dra: before a pod's sandbox starts, the ResourceClaims the
// scheduler allocated and reserved for it are prepared by their drivers' kubelet
// plugins (NodePrepareResources over gRPC, DRAPlugin service v1 or v1beta1), and the
// CDI devices the drivers return are handed to the pod's containers; after the last
// pod using a claim stops, the drivers unprepare it.
//
// What is mirrored from upstream:
//   - the plugin watcher handler for "DRAPlugin" (Registry): version negotiation,
//     several plugins per driver, connection monitoring, and deleting a driver's
//     ResourceSlices when it has been unusable for the wiping delay, plus all of the
//     node's slices at start-up;
//   - the claim cache and its checkpoint, <state-dir>/dra_manager_state, byte for byte
//     in upstream's format (see package state), so that a node can move between the
//     two kubelets;
//   - device health from drivers serving DRAResourceHealth (v1, or v1alpha1), kept in
//     <state-dir>/dra_health_state and reported in containers' allocatedResourcesStatus;
//   - the reconcile loop unpreparing claims of pods that are no longer active;
//   - the claims of extended resources backed by DRA (pod.status.extendedResourceClaimStatus);
//   - the DRA metrics and the pod-resources API's view of the claims.
//
// Upstream's feature gates at their v1.37 defaults are options here where they are off
// by default (OptionalNodeOperations) or may be turned off (DisableResourceHealthStatus).
// PodGroup claims (DRAWorkloadResourceClaims, beta and off) are not supported.
package dra

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/node/dra/state"
)

const (
	// DefaultReconcilePeriod is how often claims of pods that are gone are unprepared.
	DefaultReconcilePeriod = 60 * time.Second
	// updatesBuffer is the size of upstream's health update channel.
	updatesBuffer = 100
)

// ErrNoClient is returned when a pod with claims is prepared without an API server:
// ResourceClaims only exist there.
var ErrNoClient = errors.New("no API server client (standalone mode), ResourceClaims cannot be read")

// Options configure a Manager.
type Options struct {
	// StateDir holds the checkpoint and the health file. Required.
	StateDir string
	// Client reads ResourceClaims and deletes ResourceSlices; nil in standalone mode,
	// where pods with claims cannot be prepared and no slice is wiped.
	Client kubernetes.Interface
	// NodeName selects the node's ResourceSlices; without it none is wiped.
	NodeName string
	// WipingDelay overrides DefaultWipingDelay (tests).
	WipingDelay time.Duration
	// ReconcilePeriod overrides DefaultReconcilePeriod (tests).
	ReconcilePeriod time.Duration
	// DisableResourceHealthStatus stops following the drivers' health and reporting it
	// in container statuses (upstream's ResourceHealthStatus gate, on by default).
	DisableResourceHealthStatus bool
	// OptionalNodeOperations lets allocations skip NodePrepareResources or
	// NodeUnprepareResources (upstream's DRAOptionalNodeOperations gate, alpha and off:
	// such claims then fail to prepare).
	OptionalNodeOperations bool
}

// ResourceUpdate names the pods whose claimed devices changed health.
type ResourceUpdate struct {
	PodUIDs []string
}

// Manager prepares and unprepares the ResourceClaims of the node's pods.
type Manager struct {
	client                 kubernetes.Interface
	cache                  *claimCache
	health                 *healthCache
	registry               *Registry
	metrics                *metrics
	updates                chan ResourceUpdate
	reportHealth           bool
	optionalNodeOperations bool
	reconcilePeriod        time.Duration

	stopOnce sync.Once
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// New loads the claim checkpoint (creating it on a new node) and the device health,
// and makes the plugin handler ready. A corrupt checkpoint is an error: the node should
// be drained and the file removed, as with upstream's kubelet.
func New(opts Options) (*Manager, error) {
	if opts.StateDir == "" {
		return nil, errors.New("DRA manager: a state directory is required")
	}
	cache, err := loadClaimCache(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("create ResourceClaim cache: %w", err)
	}
	if opts.WipingDelay == 0 {
		opts.WipingDelay = DefaultWipingDelay
	}
	if opts.ReconcilePeriod == 0 {
		opts.ReconcilePeriod = DefaultReconcilePeriod
	}
	logger := klog.Background().WithName("dra-manager")
	m := &Manager{
		client:                 opts.Client,
		cache:                  cache,
		health:                 loadHealthCache(logger, filepath.Join(opts.StateDir, state.HealthFileName)),
		metrics:                newMetrics(cache),
		updates:                make(chan ResourceUpdate, updatesBuffer),
		reportHealth:           !opts.DisableResourceHealthStatus,
		optionalNodeOperations: opts.OptionalNodeOperations,
		reconcilePeriod:        opts.ReconcilePeriod,
		cancel:                 func() {},
	}
	var health healthStreamHandler
	if m.reportHealth {
		health = m.handleHealthStream
	}
	m.registry = newRegistry(opts.Client, opts.NodeName, opts.WipingDelay, health, m.metrics.grpcDuration)
	return m, nil
}

// PluginHandler is the handler to register with the plugin watcher for PluginType.
// Register it after Start: Start wipes the slices of drivers not registered yet.
func (m *Manager) PluginHandler() *Registry { return m.registry }

// Updates delivers the pods whose claimed devices changed health.
func (m *Manager) Updates() <-chan ResourceUpdate { return m.updates }

// Start wipes the node's ResourceSlices in the background and runs the reconcile loop
// until ctx ends (then the manager stops). The loop only runs once sourcesReady says
// all pod sources were seen, so that a pod not known yet after a restart is not taken
// as gone; a nil sourcesReady never lets it run, as upstream's.
func (m *Manager) Start(ctx context.Context, activePods func() []*v1.Pod, sourcesReady func() bool) error {
	if activePods == nil {
		return errors.New("DRA manager: activePods is required")
	}
	ctx, cancel := context.WithCancel(ctx)
	m.cancel = cancel
	m.registry.startupWipe()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		wait.UntilWithContext(ctx, func(ctx context.Context) { m.reconcile(ctx, activePods, sourcesReady) }, m.reconcilePeriod)
	}()
	context.AfterFunc(ctx, m.Stop)
	return nil
}

// Stop ends the background work, disconnects the plugins and waits. It may be called
// more than once, and without Start.
func (m *Manager) Stop() {
	m.stopOnce.Do(func() {
		m.cancel()
		m.registry.stop()
		m.wg.Wait()
	})
}

// reconcile unprepares the claims of pods that are no longer active: their
// UnprepareResources may have failed, or they were deleted while the kubelet was down.
func (m *Manager) reconcile(ctx context.Context, activePods func() []*v1.Pod, sourcesReady func() bool) {
	if sourcesReady == nil || !sourcesReady() {
		return
	}
	logger := klog.FromContext(ctx).WithName("dra-manager")
	active := sets.New[types.UID]()
	for _, p := range activePods() {
		active.Insert(p.UID)
	}
	type podClaims struct {
		namespace string
		names     []string
	}
	inactive := map[types.UID]*podClaims{}
	m.cache.RLock()
	for _, info := range m.cache.claims {
		for uid := range info.PodUIDs {
			if active.Has(types.UID(uid)) {
				continue
			}
			pc := inactive[types.UID(uid)]
			if pc == nil {
				pc = &podClaims{namespace: info.Namespace}
				inactive[types.UID(uid)] = pc
			}
			pc.names = append(pc.names, info.ClaimName)
		}
	}
	m.cache.RUnlock()
	for uid, pc := range inactive {
		if err := m.unprepare(ctx, uid, pc.namespace, pc.names); err != nil {
			logger.Info("Unpreparing pod resources in reconcile loop failed, will retry", "podUID", uid, "err", err)
		}
	}
}

// PodMightNeedToUnprepareResources tells whether a claim is still prepared for the pod,
// so that the pod is not considered terminated yet.
func (m *Manager) PodMightNeedToUnprepareResources(uid types.UID) bool {
	m.cache.RLock()
	defer m.cache.RUnlock()
	return m.cache.hasPod(uid)
}

// observe records an operation's duration by success.
func (m *Manager) observe(operation string, start time.Time, err error) {
	m.metrics.operationsDuration.WithLabelValues(operation, strconv.FormatBool(err != nil)).Observe(time.Since(start).Seconds())
}
