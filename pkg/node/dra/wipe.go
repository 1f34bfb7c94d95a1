package dra

import (
	"context"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// DefaultWipingDelay is how long a driver may be gone before its ResourceSlices are
// deleted: long enough for a plugin's container to restart, short enough that pods are
// not scheduled for long to a node where the devices cannot be prepared. Drivers that
// must keep their slices use rolling updates.
const DefaultWipingDelay = 30 * time.Second

// wipeBackoff is upstream's retry schedule for deleting slices: nobody can handle the
// error, so it is retried until it works or the kubelet stops.
var wipeBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Cap: 5 * time.Minute, Steps: 100}

// pendingWipe is a scheduled deletion of a driver's slices.
type pendingWipe struct {
	timer  *time.Timer
	cancel context.CancelFunc
}

// startupWipe deletes all of the node's slices in the background: right after a start
// no driver is registered, none is usable until it comes back (which may never happen),
// and pods must not get stuck on the node waiting for one.
func (r *Registry) startupWipe() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.canWipe() {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.wipeSlices(r.ctx, "")
	}()
}

// canWipe: wiping needs the API server and the node's name (an empty name would select
// every node's slices). Caller holds the lock.
func (r *Registry) canWipe() bool {
	return r.client != nil && r.nodeName != "" && r.ctx.Err() == nil
}

// syncWipe cancels the pending wipe of a driver that is usable again, or schedules one
// for a driver that is not; an already scheduled wipe keeps its time. Caller holds the
// lock.
func (r *Registry) syncWipe(driverName string) {
	if r.usable(driverName) {
		r.cancelWipe(driverName)
		return
	}
	if r.wipes[driverName] != nil || !r.canWipe() {
		return
	}
	ctx, cancel := context.WithCancel(r.ctx)
	w := &pendingWipe{cancel: cancel}
	r.wg.Add(1)
	w.timer = time.AfterFunc(r.wipingDelay, func() {
		defer r.wg.Done()
		defer cancel()
		r.wipeSlices(ctx, driverName)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.wipes[driverName] == w {
			delete(r.wipes, driverName)
		}
	})
	r.wipes[driverName] = w
	r.logger.V(3).Info("Scheduled wiping of ResourceSlices", "driverName", driverName, "delay", r.wipingDelay)
}

// cancelWipe stops a pending wipe, also one already retrying. Caller holds the lock.
func (r *Registry) cancelWipe(driverName string) {
	w := r.wipes[driverName]
	if w == nil {
		return
	}
	delete(r.wipes, driverName)
	w.cancel()
	if w.timer.Stop() {
		r.wg.Done()
	}
	r.logger.V(3).Info("Canceled wiping of ResourceSlices", "driverName", driverName)
}

// wipeSlices deletes the node's ResourceSlices, of one driver or (driverName "") all,
// retrying until it works or ctx ends.
func (r *Registry) wipeSlices(ctx context.Context, driverName string) {
	selector := fields.Set{resourceapi.ResourceSliceSelectorNodeName: r.nodeName}
	if driverName != "" {
		selector[resourceapi.ResourceSliceSelectorDriver] = driverName
	}
	logger := klog.FromContext(ctx).WithValues("fieldSelector", selector.String())
	_ = wait.ExponentialBackoffWithContext(ctx, wipeBackoff, func(ctx context.Context) (bool, error) {
		err := r.client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: selector.String()})
		switch {
		case err == nil:
			logger.V(3).Info("Deleted ResourceSlices")
			return true, nil
		case apierrors.IsNotFound(err):
			logger.V(5).Info("ResourceSlices not found, nothing to delete")
			return true, nil
		case apierrors.IsUnauthorized(err):
			// The kubelet may still be getting its credentials.
			logger.V(5).Info("Deleting ResourceSlices failed, retrying", "err", err)
			return false, nil
		default:
			logger.V(3).Info("Deleting ResourceSlices failed, retrying", "err", err)
			return false, nil
		}
	})
}
