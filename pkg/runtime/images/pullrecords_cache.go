package images

import (
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"

	"k8s.io/klog/v2"
	kc "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/lru"
)

// Upstream's bounds of the in-memory caches of intents and pulled records.
const (
	maxIntentsCacheSize       = 1024
	maxPulledRecordsCacheSize = 2000
)

// lruCache is an LRU of records that knows whether it is authoritative: whether it
// holds every record there is, so that a miss means "no such record" without reading
// the files. It is authoritative after a full, error-free listing that fit, until a
// record is evicted for lack of room.
type lruCache[V any] struct {
	cache         *lru.Cache
	maxSize       int
	authoritative atomic.Bool
	// deleting marks keys being removed on purpose: their eviction keeps the cache
	// authoritative.
	deleting sync.Map
}

func newLRUCache[V any](size int) *lruCache[V] {
	c := &lruCache[V]{cache: lru.New(size), maxSize: size}
	if err := c.cache.SetEvictionFunc(func(key lru.Key, _ any) {
		if _, ok := c.deleting.Load(key); !ok {
			c.authoritative.Store(false)
		}
	}); err != nil {
		panic(fmt.Sprintf("failed to set the eviction function of an LRU cache: %v", err))
	}
	return c
}

func (c *lruCache[V]) Get(key string) (*V, bool) {
	v, ok := c.cache.Get(key)
	if !ok || v == nil {
		return nil, ok
	}
	return v.(*V), true
}

func (c *lruCache[V]) Set(key string, v *V) { c.cache.Add(key, v) }
func (c *lruCache[V]) Len() int             { return c.cache.Len() }
func (c *lruCache[V]) Clear()               { c.cache.Clear() }

// Delete removes key without making the cache non-authoritative.
func (c *lruCache[V]) Delete(key string) {
	c.deleting.Store(key, struct{}{})
	defer c.deleting.Delete(key)
	c.cache.Remove(key)
}

// stripedLocks locks by string key over a fixed set of mutexes (upstream's
// StripedLockSet), between 1 and 31 of them.
type stripedLocks struct{ locks []sync.Mutex }

func newStripedLocks(size int32) *stripedLocks {
	return &stripedLocks{locks: make([]sync.Mutex, min(31, max(1, size)))}
}

func (s *stripedLocks) index(key string) int {
	h := fnv.New32()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(len(s.locks)))
}

func (s *stripedLocks) Lock(key string)   { s.locks[s.index(key)].Lock() }
func (s *stripedLocks) Unlock(key string) { s.locks[s.index(key)].Unlock() }

func (s *stripedLocks) GlobalLock() {
	for i := range s.locks {
		s.locks[i].Lock()
	}
}

func (s *stripedLocks) GlobalUnlock() {
	for i := range s.locks {
		s.locks[i].Unlock()
	}
}

// cachedPullRecords is a write-through cache in front of the files (upstream's
// cachedPullRecordsAccessor): reads are served from memory, and while the cache is
// authoritative a miss is an answer too.
type cachedPullRecords struct {
	delegate pullRecordsAccessor

	intentsLocks *stripedLocks
	intents      *lruCache[kc.ImagePullIntent]
	pulledLocks  *stripedLocks
	pulled       *lruCache[kc.ImagePulledRecord]
}

var _ pullRecordsAccessor = (*cachedPullRecords)(nil)

// newCachedPullRecords warms the caches with a full listing; sizes are capped at
// upstream's 1024 intents and 2000 records.
func newCachedPullRecords(logger klog.Logger, delegate pullRecordsAccessor, intentsSize, pulledSize, locks int32) *cachedPullRecords {
	c := &cachedPullRecords{
		delegate:     delegate,
		intentsLocks: newStripedLocks(locks),
		intents:      newLRUCache[kc.ImagePullIntent](int(max(1, min(intentsSize, maxIntentsCacheSize)))),
		pulledLocks:  newStripedLocks(locks),
		pulled:       newLRUCache[kc.ImagePulledRecord](int(max(1, min(pulledSize, maxPulledRecordsCacheSize)))),
	}
	if _, err := c.ListImagePullIntents(); err != nil {
		logger.Info("there was an error initializing the image pull intents cache, the cache will work in a non-authoritative mode until the intents are listed successfully", "error", err)
	}
	if _, err := c.ListImagePulledRecords(); err != nil {
		logger.Info("there was an error initializing the image pulled records cache, the cache will work in a non-authoritative mode until the pulled records are listed successfully", "error", err)
	}
	return c
}

// ListImagePullIntents implements pullRecordsAccessor.
func (c *cachedPullRecords) ListImagePullIntents() ([]*kc.ImagePullIntent, error) {
	return refreshingList(c.intents, c.intentsLocks, c.delegate.ListImagePullIntents,
		func(i *kc.ImagePullIntent) string { return i.Image })
}

// ImagePullIntentExists implements pullRecordsAccessor.
func (c *cachedPullRecords) ImagePullIntentExists(image string) (bool, error) {
	if _, ok := c.intents.Get(image); ok {
		return true, nil
	}
	c.intentsLocks.Lock(image)
	defer c.intentsLocks.Unlock(image)
	if _, ok := c.intents.Get(image); ok {
		return true, nil
	}
	if c.intents.authoritative.Load() {
		return false, nil
	}
	exists, err := c.delegate.ImagePullIntentExists(image)
	if err == nil && exists {
		c.intents.Set(image, &kc.ImagePullIntent{Image: image})
	}
	return exists, err
}

// WriteImagePullIntent implements pullRecordsAccessor.
func (c *cachedPullRecords) WriteImagePullIntent(image string) error {
	c.intentsLocks.Lock(image)
	defer c.intentsLocks.Unlock(image)
	if err := c.delegate.WriteImagePullIntent(image); err != nil {
		return err
	}
	c.intents.Set(image, &kc.ImagePullIntent{Image: image})
	return nil
}

// DeleteImagePullIntent implements pullRecordsAccessor.
func (c *cachedPullRecords) DeleteImagePullIntent(image string) error {
	c.intentsLocks.Lock(image)
	defer c.intentsLocks.Unlock(image)
	if err := c.delegate.DeleteImagePullIntent(image); err != nil {
		return err
	}
	c.intents.Delete(image)
	return nil
}

// ListImagePulledRecords implements pullRecordsAccessor.
func (c *cachedPullRecords) ListImagePulledRecords() ([]*kc.ImagePulledRecord, error) {
	return refreshingList(c.pulled, c.pulledLocks, c.delegate.ListImagePulledRecords,
		func(r *kc.ImagePulledRecord) string { return r.ImageRef })
}

// GetImagePulledRecord implements pullRecordsAccessor.
func (c *cachedPullRecords) GetImagePulledRecord(imageRef string) (*kc.ImagePulledRecord, bool, error) {
	if r, ok := c.pulled.Get(imageRef); ok {
		return r, true, nil
	}
	c.pulledLocks.Lock(imageRef)
	defer c.pulledLocks.Unlock(imageRef)
	if r, ok := c.pulled.Get(imageRef); ok {
		return r, true, nil
	}
	if c.pulled.authoritative.Load() {
		return nil, false, nil
	}
	r, exists, err := c.delegate.GetImagePulledRecord(imageRef)
	if err == nil && exists {
		c.pulled.Set(imageRef, r)
	}
	return r, exists, err
}

// WriteImagePulledRecord implements pullRecordsAccessor.
func (c *cachedPullRecords) WriteImagePulledRecord(record *kc.ImagePulledRecord) error {
	c.pulledLocks.Lock(record.ImageRef)
	defer c.pulledLocks.Unlock(record.ImageRef)
	if err := c.delegate.WriteImagePulledRecord(record); err != nil {
		return err
	}
	c.pulled.Set(record.ImageRef, record)
	return nil
}

// DeleteImagePulledRecord implements pullRecordsAccessor.
func (c *cachedPullRecords) DeleteImagePulledRecord(imageRef string) error {
	c.pulledLocks.Lock(imageRef)
	defer c.pulledLocks.Unlock(imageRef)
	if err := c.delegate.DeleteImagePulledRecord(imageRef); err != nil {
		return err
	}
	c.pulled.Delete(imageRef)
	return nil
}

// refreshingList lists from the files; a non-authoritative cache takes the chance to
// refill itself, and becomes authoritative when the listing had no error and fit.
func refreshingList[V any](cache *lruCache[V], locks *stripedLocks, list func() ([]*V, error), key func(*V) string) ([]*V, error) {
	wasAuthoritative := cache.authoritative.Load()
	if !wasAuthoritative {
		locks.GlobalLock()
		defer locks.GlobalUnlock()
	}
	results, err := list()
	if wasAuthoritative {
		return results, err
	}
	complete := err == nil && len(results) < cache.maxSize
	if complete || cache.Len() == 0 {
		cache.Clear()
		for _, r := range results[:min(len(results), cache.maxSize)] {
			cache.Set(key(r), r)
		}
		cache.authoritative.Store(complete)
	}
	return results, err
}
