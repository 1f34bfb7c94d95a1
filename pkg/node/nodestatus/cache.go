package nodestatus

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// refreshed holds the last good answer of a runtime call and asks again once it is
// older than ttl, the way upstream reads images and runtime status from caches that
// background loops refresh. A failed refresh keeps the previous answer, and a runtime
// that fails is asked again only after ttl too.
type refreshed[T any] struct {
	what  string
	ttl   time.Duration
	clock clock.PassiveClock
	fetch func(context.Context) (T, error)

	mu      sync.Mutex
	value   T
	have    bool
	lastErr error
	asked   time.Time
}

func newRefreshed[T any](what string, ttl time.Duration, c clock.PassiveClock, fetch func(context.Context) (T, error)) *refreshed[T] {
	return &refreshed[T]{what: what, ttl: ttl, clock: c, fetch: fetch}
}

// get returns the cached value, refreshing it when stale; the error is returned only
// when there has never been a good answer.
func (r *refreshed[T]) get(ctx context.Context) (T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.asked.IsZero() && r.clock.Since(r.asked) < r.ttl {
		return r.value, r.lastErr
	}
	r.asked = r.clock.Now()
	v, err := r.fetch(ctx)
	if err != nil && r.have {
		klog.FromContext(ctx).V(2).Info("Keeping the previous answer", "what", r.what, "err", err)
		return r.value, nil
	}
	r.lastErr = err
	if err == nil {
		r.value, r.have = v, true
	}
	return r.value, err
}

// cached is get for callers that treat "no answer yet" as the zero value.
func (r *refreshed[T]) cached(ctx context.Context) T {
	v, _ := r.get(ctx)
	return v
}
