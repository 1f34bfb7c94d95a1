package credentialprovider

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

const (
	// globalCacheKey is the key of credentials a plugin returns with cacheKeyType Global;
	// the angle brackets keep it apart from any image or registry.
	globalCacheKey = "<global>"
	// cachePurgeInterval is how often a lookup also drops every expired entry: an entry
	// is otherwise only dropped when it is looked up after it expired.
	cachePurgeInterval = 15 * time.Minute
)

// credentialCache holds a provider's responses until they expire, as upstream's
// expiration store does: an entry is valid up to and including its expiry time.
type credentialCache struct {
	clock clock.Clock

	mu        sync.Mutex
	entries   map[string]cacheEntry
	lastPurge time.Time
}

type cacheEntry struct {
	auth      authMap
	expiresAt time.Time
}

func newCredentialCache(c clock.Clock) *credentialCache {
	return &credentialCache{clock: c, entries: map[string]cacheEntry{}, lastPurge: c.Now()}
}

// lookup finds cached credentials for image under, in turn, the image, its registry and
// the global key, each combined with saKey (the service account dimension; "" if none).
func (c *credentialCache) lookup(image, saKey string) (authMap, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.purgeIfDue()
	for _, base := range []string{image, registryOf(image), globalCacheKey} {
		if auth, ok := c.get(cacheKey(base, saKey)); ok {
			return auth, true
		}
	}
	return nil, false
}

// add caches auth under key until expiresAt.
func (c *credentialCache) add(key string, auth authMap, expiresAt time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[key] = cacheEntry{auth: auth, expiresAt: expiresAt}
}

// get returns the entry under key, dropping it if it has expired. c.mu is held.
func (c *credentialCache) get(key string) (authMap, bool) {
	e, ok := c.entries[key]
	if !ok {
		return nil, false
	}
	if c.expired(e) {
		delete(c.entries, key)
		return nil, false
	}
	return e.auth, true
}

// purgeIfDue drops all expired entries once per cachePurgeInterval, so that entries never
// looked up again do not stay forever. c.mu is held.
func (c *credentialCache) purgeIfDue() {
	now := c.clock.Now()
	if !now.After(c.lastPurge.Add(cachePurgeInterval)) {
		return
	}
	for key, e := range c.entries {
		if c.expired(e) {
			delete(c.entries, key)
		}
	}
	c.lastPurge = now
}

func (c *credentialCache) expired(e cacheEntry) bool {
	return c.clock.Now().After(e.expiresAt)
}

// cacheKey is the key of credentials cached under base (image, registry or global) for
// the service account identified by saKey.
func cacheKey(base, saKey string) string {
	var k keyBuilder
	return k.add(base).add(saKey).String()
}

// keyBuilder builds unambiguous composite keys: every field is length-prefixed, so no two
// different field lists give the same key, whatever the fields contain.
type keyBuilder struct{ strings.Builder }

func (k *keyBuilder) add(field string) *keyBuilder {
	k.WriteString(strconv.Itoa(len(field)))
	k.WriteByte(':')
	k.WriteString(field)
	return k
}

// addMap adds the entries of m in key order, preceded by their count.
func (k *keyBuilder) addMap(m map[string]string) *keyBuilder {
	k.add(strconv.Itoa(len(m)))
	for _, key := range slices.Sorted(maps.Keys(m)) {
		k.add(key).add(m[key])
	}
	return k
}

// flightGroup runs one call per key at a time: callers that ask for a key whose call is
// in flight wait for it and share its result (what upstream uses singleflight for).
type flightGroup[T any] struct {
	mu      sync.Mutex
	flights map[string]*flight[T]
}

type flight[T any] struct {
	done   chan struct{}
	result T
	err    error
}

func (g *flightGroup[T]) do(key string, fn func() (T, error)) (T, error) {
	g.mu.Lock()
	if f, ok := g.flights[key]; ok {
		g.mu.Unlock()
		<-f.done
		return f.result, f.err
	}
	f := &flight[T]{done: make(chan struct{})}
	if g.flights == nil {
		g.flights = map[string]*flight[T]{}
	}
	g.flights[key] = f
	g.mu.Unlock()

	defer func() {
		g.mu.Lock()
		delete(g.flights, key)
		g.mu.Unlock()
		close(f.done)
	}()
	f.result, f.err = fn()
	return f.result, f.err
}
