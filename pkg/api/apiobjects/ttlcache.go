package apiobjects

import (
	"context"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// object is what the cache holds: a pointer to an API object.
type object interface {
	comparable
	GetResourceVersion() string
}

// getFunc reads one object from the API server.
type getFunc[T object] func(ctx context.Context, namespace, name string, opts metav1.GetOptions) (T, error)

// ttlCache is upstream's "Cache" change-detection strategy without pod
// registration: an object is read with a GET when its cached copy is older
// than the TTL. Errors are never cached as fresh: after a NotFound the next
// Get asks again, so an object created meanwhile is seen at once. When a GET
// fails for another reason, the last answer (object or NotFound) is served.
type ttlCache[T object] struct {
	get      getFunc[T]
	resource schema.GroupResource // singular, as the watching managers name it in NotFound
	ttl      time.Duration
	clock    clock.Clock

	mu        sync.Mutex
	entries   map[types.NamespacedName]*cacheEntry[T]
	lastSweep time.Time
}

// cacheEntry is one object's last answer. Its own lock makes concurrent Gets
// of one object share a GET.
type cacheEntry[T object] struct {
	mu        sync.Mutex
	object    T     // zero unless the last answer was the object
	err       error // the last answer was NotFound
	fetchedAt time.Time

	usedAt time.Time // guarded by ttlCache.mu
}

func newTTLCache[T object](get getFunc[T], resource schema.GroupResource, ttl time.Duration, clk clock.Clock) *ttlCache[T] {
	return &ttlCache[T]{get: get, resource: resource, ttl: ttl, clock: clk,
		entries: map[types.NamespacedName]*cacheEntry[T]{}, lastSweep: clk.Now()}
}

// Get returns the object, from the cache while it is fresh.
func (c *ttlCache[T]) Get(ctx context.Context, namespace, name string) (T, error) {
	e := c.entry(types.NamespacedName{Namespace: namespace, Name: name})
	e.mu.Lock()
	defer e.mu.Unlock()
	var zero T
	if e.err == nil && e.object != zero && c.clock.Since(e.fetchedAt) < c.ttl {
		return e.object, nil
	}
	opts := metav1.GetOptions{}
	if e.object != zero && c.ttl > 0 {
		// A refresh of a known object may come from the API server's cache,
		// sparing etcd; an older answer from it is ignored below.
		opts.ResourceVersion = "0"
	}
	obj, err := c.get(ctx, namespace, name, opts)
	switch {
	case err == nil:
		if !olderThan(obj, e.object) {
			e.object, e.err, e.fetchedAt = obj, nil, c.clock.Now()
		}
	case apierrors.IsNotFound(err):
		e.object, e.err, e.fetchedAt = zero, apierrors.NewNotFound(c.resource, name), c.clock.Now()
	case e.object == zero && e.err == nil:
		return zero, err // nothing known to fall back on
	}
	return e.object, e.err
}

// entry returns the entry for key, creating it, and now and then drops the
// entries nobody asked for in a while.
func (c *ttlCache[T]) entry(key types.NamespacedName) *cacheEntry[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if idle := c.idleExpiry(); now.Sub(c.lastSweep) >= idle {
		for k, e := range c.entries {
			if now.Sub(e.usedAt) >= idle {
				delete(c.entries, k)
			}
		}
		c.lastSweep = now
	}
	e, ok := c.entries[key]
	if !ok {
		e = &cacheEntry[T]{}
		c.entries[key] = e
	}
	e.usedAt = now
	return e
}

// idleExpiry is how long an unused entry is kept: long enough to serve as a
// fallback through a short API server outage.
func (c *ttlCache[T]) idleExpiry() time.Duration {
	return max(10*c.ttl, 5*time.Minute)
}

// len is the number of cached entries (for tests).
func (c *ttlCache[T]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// olderThan reports whether fetched has a lower resource version than
// cached; versions that are not numbers never count as older.
func olderThan[T object](fetched, cached T) bool {
	var zero T
	if fetched == zero || cached == zero {
		return false
	}
	f, err1 := strconv.ParseUint(fetched.GetResourceVersion(), 10, 64)
	c, err2 := strconv.ParseUint(cached.GetResourceVersion(), 10, 64)
	return err1 == nil && err2 == nil && f < c
}
