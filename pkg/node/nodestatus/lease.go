package nodestatus

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Lease renewal timing. A renewal is due every quarter of the lease duration (upstream's
// renewInterval); a failed one is retried soon, so that after an API outage the lease is
// fresh within a second of the server's return — before the node controller, whose grace
// period a long outage outlasts, looks at it and marks the node Unknown. (Upstream's lease
// controller backs off to 7 s and so often loses that race.)
const (
	leaseRenewFraction = 0.25
	leaseRenewJitter   = 0.04
	leaseRetryMin      = 250 * time.Millisecond
	leaseRetryMax      = time.Second
)

// runLease keeps the node's Lease in kube-node-lease, owned by the Node, once the Node is
// known. A failing renewal logs its first failure and its recovery; the retries between
// them are logged at V(2), and the second failure in a row closes idle connections, as
// upstream's onRepeatedHeartbeatFailure does.
func (c *Controller) runLease(ctx context.Context) {
	for !c.NodeSynced() {
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(leaseStartPoll):
		}
	}
	logger := klog.FromContext(ctx)
	duration := time.Duration(c.opts.NodeLeaseDurationSeconds) * time.Second
	renew := time.Duration(float64(duration) * leaseRenewFraction)
	var latest *coordinationv1.Lease
	failures, retry := 0, leaseRetryMin
	for {
		var err error
		latest, err = c.renewLease(ctx, latest)
		next := wait.Jitter(renew, leaseRenewJitter)
		switch {
		case err != nil:
			c.noteAPIFailure()
			failures++
			if failures == 1 {
				logger.Error(err, "Failed to renew the node lease, retrying", "lease", klog.KRef(v1.NamespaceNodeLease, c.opts.NodeName))
			} else {
				logger.V(2).Info("Node lease renewal failed again", "failures", failures, "err", err)
				if c.onFailure != nil {
					c.onFailure()
				}
			}
			next, retry = retry, min(2*retry, leaseRetryMax)
		case failures > 0:
			logger.Info("Node lease renewed", "afterFailures", failures)
			failures, retry = 0, leaseRetryMin
		}
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(next):
		}
	}
}

// renewLease updates the lease from the last version written, without a read; when there
// is none, or it is outdated, it reads the lease and creates it if missing.
func (c *Controller) renewLease(ctx context.Context, latest *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	leases := c.heartbeat.CoordinationV1().Leases(v1.NamespaceNodeLease)
	if latest != nil {
		l := latest.DeepCopy()
		if err := c.stampLease(ctx, l); err != nil {
			return latest, err
		}
		updated, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		if err == nil {
			return updated, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return latest, err // the server is away: try the same again next time
		}
	}
	current, err := leases.Get(ctx, c.opts.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: c.opts.NodeName, Namespace: v1.NamespaceNodeLease}}
		if err := c.stampLease(ctx, l); err != nil {
			return nil, err
		}
		return leases.Create(ctx, l, metav1.CreateOptions{})
	}
	if err != nil {
		return nil, err
	}
	if err := c.stampLease(ctx, current); err != nil {
		return nil, err
	}
	return leases.Update(ctx, current, metav1.UpdateOptions{})
}

// stampLease sets the holder, duration and renew time, and the Node as owner.
func (c *Controller) stampLease(ctx context.Context, l *coordinationv1.Lease) error {
	l.Spec.HolderIdentity = ptr.To(c.opts.NodeName)
	l.Spec.LeaseDurationSeconds = ptr.To(c.opts.NodeLeaseDurationSeconds)
	l.Spec.RenewTime = &metav1.MicroTime{Time: c.clock.Now()}
	if err := c.setLeaseOwner(ctx)(l); err != nil {
		return fmt.Errorf("lease owner: %w", err)
	}
	return nil
}
