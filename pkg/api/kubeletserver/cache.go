package kubeletserver

import (
	"sync"
	"time"
)

// maxCacheEntries bounds each review cache, so a flood of distinct tokens or requests
// cannot grow the kubelet's memory without limit (upstream bounds its caches too).
const maxCacheEntries = 4096

// ttlCache remembers review results for a time, and makes concurrent lookups of one
// missing key share a single review (as upstream's token cache does).
type ttlCache[V any] struct {
	now func() time.Time

	mu       sync.Mutex
	entries  map[string]cacheEntry[V]
	inflight map[string]*call[V]
}

type cacheEntry[V any] struct {
	value   V
	expires time.Time
}

// call is one review in progress; waiters read value/err once done is closed.
type call[V any] struct {
	done  chan struct{}
	value V
	err   error
}

func newTTLCache[V any]() *ttlCache[V] {
	return &ttlCache[V]{now: time.Now, entries: map[string]cacheEntry[V]{}, inflight: map[string]*call[V]{}}
}

// get returns the cached value for key, or runs fetch once for all concurrent callers
// and caches its value for the TTL it returns (0: not cached). Errors are never cached.
func (c *ttlCache[V]) get(key string, fetch func() (V, time.Duration, error)) (V, error) {
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		if c.now().Before(e.expires) {
			c.mu.Unlock()
			return e.value, nil
		}
		delete(c.entries, key)
	}
	if running, ok := c.inflight[key]; ok {
		c.mu.Unlock()
		<-running.done
		return running.value, running.err
	}
	this := &call[V]{done: make(chan struct{})}
	c.inflight[key] = this
	c.mu.Unlock()

	value, ttl, err := fetch()
	this.value, this.err = value, err

	c.mu.Lock()
	delete(c.inflight, key)
	if err == nil && ttl > 0 {
		c.store(key, value, ttl)
	}
	c.mu.Unlock()
	close(this.done)
	return value, err
}

// store adds an entry; c.mu is held. When full, expired entries go first, then
// arbitrary ones: a cache miss only costs one more review.
func (c *ttlCache[V]) store(key string, value V, ttl time.Duration) {
	now := c.now()
	if len(c.entries) >= maxCacheEntries {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		for k := range c.entries {
			if len(c.entries) < maxCacheEntries {
				break
			}
			delete(c.entries, k)
		}
	}
	c.entries[key] = cacheEntry[V]{value: value, expires: now.Add(ttl)}
}
