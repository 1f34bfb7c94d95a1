package nodestatus

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	goruntime "runtime"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"
)

const (
	// nodeStatusUpdateRetry is how many times one sync tries to update the status.
	nodeStatusUpdateRetry = 5
	// nodeReadyGracePeriod bounds the fast start-up updates.
	nodeReadyGracePeriod = 120 * time.Second
	// fastStatusUpdatePeriod is how often the start-up loop checks for readiness.
	fastStatusUpdatePeriod = 100 * time.Millisecond
	// statusJitter spreads nodes' updates apart, as upstream's JitterUntil does.
	statusJitter = 0.04
	// statusRetryMin is the first wait after a failed status sync.
	statusRetryMin = 500 * time.Millisecond
	// afterOutageWindow is how long after a failed heartbeat (lease or status) the
	// server's copy of the Node is read, every second, instead of the watch's.
	afterOutageWindow = 45 * time.Second
)

// errNodeGone means the Node no longer exists on the API server.
var errNodeGone = errors.New("node not found")

// statusLoop syncs the status now and then every nodeStatusUpdateFrequency, or at once
// when the watch sees the Node deleted or another writer's Ready (the node controller's
// Unknown after an outage). A failed sync is retried after statusRetryMin, doubling up to
// the update period, so the node's status is right again soon after an API outage.
func (c *Controller) statusLoop(ctx context.Context) {
	retry := statusRetryMin
	for {
		next := wait.Jitter(c.opts.NodeStatusUpdateFrequency, statusJitter)
		switch {
		case !c.syncNodeStatus(ctx):
			next, retry = min(retry, next), min(2*retry, c.opts.NodeStatusUpdateFrequency)
		case c.recentlyFailed():
			// Just after an API outage the node controller may still mark the node Unknown
			// (its grace period ran out while nobody could write): look every second for a
			// while, reading the server's copy, and write Ready back at once.
			next, retry = min(statusRetryMin*2, next), statusRetryMin
		default:
			retry = statusRetryMin
		}
		select {
		case <-ctx.Done():
			return
		case <-c.resync:
		case <-c.clock.After(next):
		}
	}
}

// syncNodeStatus registers the node if needed, then updates its status when it changed
// or nodeStatusReportFrequency has passed. It reports success. The first failure in a
// row is logged as an error, the next ones at V(2), and the recovery once.
func (c *Controller) syncNodeStatus(ctx context.Context) bool {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	if c.opts.RegisterNode {
		c.registerWithAPIServer(ctx)
	}
	if ctx.Err() != nil {
		return true
	}
	logger := klog.FromContext(ctx)
	// The first sync after the API server failed us reports in full: the node's
	// heartbeat is overdue.
	c.forceReport = c.lastAPIFailure().After(c.lastStatusReport)
	if err := c.updateNodeStatus(ctx); err != nil {
		c.noteAPIFailure()
		c.statusFailures++
		if c.statusFailures == 1 {
			logger.Error(err, "Unable to update node status")
		} else {
			logger.V(2).Info("Unable to update node status", "failures", c.statusFailures, "err", err)
		}
		return false
	}
	if c.statusFailures > 0 {
		logger.Info("Node status updated", "afterFailures", c.statusFailures)
		c.statusFailures = 0
	}
	return true
}

// updateNodeStatus tries nodeStatusUpdateRetry times; the first try reads the Node from
// the watch (unless the last sync failed), the others from the API server.
func (c *Controller) updateNodeStatus(ctx context.Context) error {
	var err error
	for try := range nodeStatusUpdateRetry {
		if err = c.tryUpdateNodeStatus(ctx, try); err == nil {
			// The watch may lag for a while after an outage (its reflector backs off):
			// keep reading the server's copy until that has surely passed.
			c.watchMayBeStale = c.recentlyFailed()
			c.forceReport = false
			return nil
		}
		// After a failure (an API outage) the watch may lag behind what others wrote
		// meanwhile, such as the node controller's Ready=Unknown; read the server's copy
		// first until an update succeeds, so recovery is reported at the next sync.
		c.watchMayBeStale = true
		if errors.Is(err, errNodeGone) {
			return err
		}
		if try > 0 && c.onFailure != nil {
			c.onFailure()
		}
		klog.FromContext(ctx).V(2).Info("Error updating node status, will retry", "err", err)
	}
	return fmt.Errorf("update node status exceeds retry count: %w", err)
}

func (c *Controller) tryUpdateNodeStatus(ctx context.Context, try int) error {
	var original *v1.Node
	var err error
	if try == 0 && !c.watchMayBeStale && !c.recentlyFailed() {
		original, err = c.watchedNode()
	} else {
		original, err = c.heartbeat.CoreV1().Nodes().Get(ctx, c.opts.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return c.nodeGone(ctx)
		}
	}
	if err != nil {
		return fmt.Errorf("error getting node %q: %v", c.opts.NodeName, err)
	}
	node, changed := c.updateNode(ctx, original)
	if !changed && !c.reportPeriodExpired() && !c.forceReport {
		c.markVolumesFromNode(node)
		return nil
	}
	// A change (or the first report) starts a random offset within the report period so
	// that nodes do not all report at once; the periodic reports after it keep the beat.
	if changed || c.lastStatusReport.IsZero() {
		c.delayAfterChange = time.Duration(float64(c.opts.NodeStatusReportFrequency) * (rand.Float64() - 0.5))
	} else {
		c.delayAfterChange = 0
	}
	updated, err := c.patchNodeStatus(original, node)
	if err == nil {
		c.postedReady.Store(string(readyStatus(updated)))
		c.markVolumesFromNode(updated)
	}
	return err
}

// readyStatus is the status of a node's Ready condition ("" when it has none).
func readyStatus(node *v1.Node) v1.ConditionStatus {
	if node == nil {
		return ""
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == v1.NodeReady {
			return cond.Status
		}
	}
	return ""
}

// noteAPIFailure records that a heartbeat (lease or status) could not reach the API server.
func (c *Controller) noteAPIFailure() { c.apiFailure.Store(c.clock.Now().UnixNano()) }

func (c *Controller) lastAPIFailure() time.Time {
	if ns := c.apiFailure.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// recentlyFailed reports a heartbeat failure within afterOutageWindow.
func (c *Controller) recentlyFailed() bool {
	last := c.lastAPIFailure()
	return !last.IsZero() && c.clock.Since(last) < afterOutageWindow
}

func (c *Controller) reportPeriodExpired() bool {
	return c.clock.Since(c.lastStatusReport) >= c.opts.NodeStatusReportFrequency+c.delayAfterChange
}

// nodeGone notes that the Node was deleted: with registerNode the next sync registers
// it again, at once.
func (c *Controller) nodeGone(ctx context.Context) error {
	if c.opts.RegisterNode && c.registered.Swap(false) {
		klog.FromContext(ctx).Info("Node not found on the API server; registering it again", "node", klog.KRef("", c.opts.NodeName))
		c.requestResync()
	}
	return fmt.Errorf("%w: %q", errNodeGone, c.opts.NodeName)
}

// SyncNow asks the status loop to update the node's status now (the node shutdown
// manager does, so that the node turns not ready as its shutdown starts).
func (c *Controller) SyncNow() { c.requestResync() }

func (c *Controller) requestResync() {
	select {
	case c.resync <- struct{}{}:
	default:
	}
}

// updateNode returns a copy of original with this kubelet's status and whether it
// differs from original in anything but heartbeat times.
func (c *Controller) updateNode(ctx context.Context, original *v1.Node) (*v1.Node, bool) {
	node := original.DeepCopy()
	podCIDRChanged := c.updatePodCIDR(ctx, node)
	labelsChanged := ensureLabel(node, v1.LabelOSStable, goruntime.GOOS)
	labelsChanged = ensureLabel(node, v1.LabelArchStable, goruntime.GOARCH) || labelsChanged
	c.setNodeStatus(ctx, node)
	return node, podCIDRChanged || labelsChanged || nodeStatusHasChanged(&original.Status, &node.Status)
}

func ensureLabel(node *v1.Node, key, value string) bool {
	if have, ok := node.Labels[key]; ok && have == value {
		return false
	}
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels[key] = value
	return true
}

// updatePodCIDR hands a new spec.podCIDRs to the runtime hook and reports a change.
func (c *Controller) updatePodCIDR(ctx context.Context, node *v1.Node) bool {
	if len(node.Spec.PodCIDRs) == 0 {
		return false
	}
	cidr := strings.Join(node.Spec.PodCIDRs, ",")
	if cidr == c.podCIDR {
		return false
	}
	if c.podCIDRHook != nil {
		if err := c.podCIDRHook(ctx, cidr); err != nil {
			klog.FromContext(ctx).Error(err, "Error updating pod CIDR")
			return false
		}
	}
	klog.FromContext(ctx).Info("Updating Pod CIDR", "originalPodCIDR", c.podCIDR, "newPodCIDR", cidr)
	c.podCIDR = cidr
	return true
}

// patchNodeStatus sends the difference between original and node as a strategic merge
// patch of the status subresource.
func (c *Controller) patchNodeStatus(original, node *v1.Node) (*v1.Node, error) {
	updated, _, err := nodeutil.PatchNodeStatus(c.heartbeat.CoreV1(), types.NodeName(c.opts.NodeName), original, node)
	if err != nil {
		return nil, err
	}
	c.lastStatusReport = c.clock.Now()
	if i := conditionIndex(updated, v1.NodeReady); i >= 0 && updated.Status.Conditions[i].Status == v1.ConditionTrue {
		c.startup.RecordNodeReady()
	}
	return updated, nil
}

// nodeStatusHasChanged compares two statuses, ignoring conditions' heartbeat times.
func nodeStatusHasChanged(original, status *v1.NodeStatus) bool {
	if original == nil || status == nil {
		return original != status
	}
	if conditionsChanged(original.Conditions, status.Conditions) {
		return true
	}
	a, b := original.DeepCopy(), status.DeepCopy()
	a.Conditions, b.Conditions = nil, nil
	return !apiequality.Semantic.DeepEqual(a, b)
}

func conditionsChanged(original, conditions []v1.NodeCondition) bool {
	if len(original) != len(conditions) {
		return true
	}
	a := append([]v1.NodeCondition(nil), original...)
	b := append([]v1.NodeCondition(nil), conditions...)
	sort.SliceStable(a, func(i, j int) bool { return a[i].Type < a[j].Type })
	sort.SliceStable(b, func(i, j int) bool { return b[i].Type < b[j].Type })
	for i := range a {
		a[i].LastHeartbeatTime, b[i].LastHeartbeatTime = metav1.Time{}, metav1.Time{}
		if !apiequality.Semantic.DeepEqual(a[i], b[i]) {
			return true
		}
	}
	return false
}

// fastStatusUpdateOnce reports readiness as soon as the node becomes ready after start,
// checking every 100ms, instead of waiting for the next periodic sync. It gives up
// after nodeReadyGracePeriod.
func (c *Controller) fastStatusUpdateOnce(ctx context.Context) {
	start := c.clock.Now()
	for {
		if c.fastNodeStatusUpdate(ctx, c.clock.Since(start) >= nodeReadyGracePeriod) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(fastStatusUpdatePeriod):
		}
	}
}

// fastNodeStatusUpdate reports whether the start-up loop is done: the node is Ready on
// the API server, or has just been patched Ready, or the grace period is over.
func (c *Controller) fastNodeStatusUpdate(ctx context.Context, timedOut bool) bool {
	logger := klog.FromContext(ctx)
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	if timedOut {
		logger.Error(nil, "Node not becoming ready in time after startup")
		return true
	}
	original, err := c.watchedNode()
	if err != nil {
		return false
	}
	if idx := conditionIndex(original, v1.NodeReady); idx < 0 {
		return false
	} else if original.Status.Conditions[idx].Status == v1.ConditionTrue {
		return true
	}
	node, changed := c.updateNode(ctx, original)
	if !changed {
		return false
	}
	if idx := conditionIndex(node, v1.NodeReady); idx < 0 || node.Status.Conditions[idx].Status != v1.ConditionTrue {
		return false
	}
	logger.Info("Fast updating node status as it just became ready")
	if _, err := c.patchNodeStatus(original, node); err != nil {
		// The watched copy may be stale; the regular update reads the API server's.
		logger.Error(err, "Error updating node status, will retry with syncNodeStatus")
		if err := c.updateNodeStatus(ctx); err != nil {
			logger.Error(err, "Unable to update node status")
		}
	}
	return true
}
