// Package podcache holds the runtime's latest view of every pod (upstream's kubecontainer.Cache).
// The PLEG fills it; the pod workers read it, waiting with GetNewerThan until the PLEG has
// inspected the runtime after their previous sync, so a sync never acts on a status older
// than its own last change.
package podcache

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Cache stores the latest PodStatus of every pod the runtime knows. Every entry is at least
// as fresh as the cache's global timestamp (set by UpdateTime); single entries may be newer.
// A pod the runtime has nothing of reads as an empty PodStatus with only its ID set.
// Callers must not modify the statuses they get back.
type Cache interface {
	// Get returns the pod's cached status and the error met inspecting it, without waiting.
	Get(uid types.UID) (*container.PodStatus, error)
	// GetNewerThan blocks until the cache holds data for the pod newer than minTime: the
	// entry was set after minTime, or the whole cache was refreshed after minTime.
	GetNewerThan(uid types.UID, minTime time.Time) (*container.PodStatus, error)
	// Set stores the pod's status (or the error inspecting it) read at timestamp. It keeps
	// a cached entry newer than timestamp and then reports false: two writers racing (the
	// relist and a pod worker) must not let the older read win.
	Set(uid types.UID, status *container.PodStatus, err error, timestamp time.Time) (updated bool)
	// SetObservedTime records that the pod's cached data was confirmed accurate at
	// timestamp (a one-pod relist found nothing new): it counts as that fresh.
	SetObservedTime(uid types.UID, timestamp time.Time)
	// Delete drops the pod's entry, once the runtime has nothing left of it.
	Delete(uid types.UID)
	// UpdateTime marks every entry fresh up to timestamp: the runtime was fully listed then
	// and pods without an entry have nothing in it.
	UpdateTime(timestamp time.Time)
}

// entry is what the cache knows about one pod.
type entry struct {
	status   *container.PodStatus
	err      error
	modified time.Time
	// observed is when the data was last confirmed accurate, if after modified.
	observed time.Time
}

// freshness is how recent the entry's data is known to be.
func (e entry) freshness() time.Time {
	if e.observed.After(e.modified) {
		return e.observed
	}
	return e.modified
}

// waiter is a GetNewerThan call waiting for data newer than minTime.
type waiter struct {
	minTime time.Time
	ch      chan entry
}

type cache struct {
	mu   sync.Mutex
	pods map[types.UID]entry
	// fresh is the global timestamp; zero until the first UpdateTime, so nothing counts as
	// fresh before the first complete relist.
	fresh   time.Time
	waiters map[types.UID][]waiter
}

// New returns an empty cache.
func New() Cache {
	return &cache{pods: map[types.UID]entry{}, waiters: map[types.UID][]waiter{}}
}

func (c *cache) Get(uid types.UID) (*container.PodStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.lookup(uid)
	return e.status, e.err
}

func (c *cache) GetNewerThan(uid types.UID, minTime time.Time) (*container.PodStatus, error) {
	e := <-c.subscribe(uid, minTime)
	return e.status, e.err
}

func (c *cache) Set(uid types.UID, status *container.PodStatus, err error, timestamp time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.pods[uid]; ok && old.modified.After(timestamp) {
		return false
	}
	c.pods[uid] = entry{status: status, err: err, modified: timestamp}
	c.wake(uid, timestamp)
	return true
}

func (c *cache) SetObservedTime(uid types.UID, timestamp time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.lookup(uid)
	if !timestamp.After(e.freshness()) {
		return
	}
	e.observed = timestamp
	c.pods[uid] = e
	c.wake(uid, timestamp)
}

func (c *cache) Delete(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pods, uid)
}

func (c *cache) UpdateTime(timestamp time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fresh = timestamp
	for uid := range c.waiters {
		c.wake(uid, timestamp)
	}
}

// lookup returns the pod's entry, or an empty status when the cache has none: the cache
// mirrors everything the runtime has, so a miss means the pod has nothing there.
func (c *cache) lookup(uid types.UID) entry {
	if e, ok := c.pods[uid]; ok {
		return e
	}
	return entry{status: &container.PodStatus{ID: uid}}
}

// newerThan reports whether what the cache would return for uid is newer than minTime.
func (c *cache) newerThan(uid types.UID, minTime time.Time) bool {
	if !c.fresh.IsZero() && c.fresh.After(minTime) {
		return true
	}
	e, ok := c.pods[uid]
	return ok && e.freshness().After(minTime)
}

// subscribe returns a channel that receives the pod's entry once it is newer than minTime,
// at once if it already is.
func (c *cache) subscribe(uid types.UID, minTime time.Time) <-chan entry {
	ch := make(chan entry, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.newerThan(uid, minTime) {
		ch <- c.lookup(uid)
		return ch
	}
	c.waiters[uid] = append(c.waiters[uid], waiter{minTime: minTime, ch: ch})
	return ch
}

// wake answers the pod's waiters whose minTime is not after timestamp. Like upstream, data
// stamped exactly minTime satisfies a waiter here, while a fresh call needs strictly newer
// data. The caller holds c.mu.
func (c *cache) wake(uid types.UID, timestamp time.Time) {
	var still []waiter
	for _, w := range c.waiters[uid] {
		if timestamp.Before(w.minTime) {
			still = append(still, w)
			continue
		}
		w.ch <- c.lookup(uid)
	}
	if len(still) == 0 {
		delete(c.waiters, uid)
	} else {
		c.waiters[uid] = still
	}
}
