package status

import (
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// maxReasonCacheEntries bounds the cache: 1000 suits ~100 pods per node.
const maxReasonCacheEntries = 1000

// ReasonCache remembers why the latest start of each container failed, keyed by pod UID and
// container name, so the status can show it as the waiting reason (upstream's ReasonCache).
// It is best effort: in memory only, and an LRU may drop entries of live pods.
type ReasonCache struct {
	cache *lru.Cache // thread-safe itself
}

type reasonEntry struct {
	reason, message string
}

// NewReasonCache returns an empty cache.
func NewReasonCache() *ReasonCache {
	return &ReasonCache{cache: lru.New(maxReasonCacheEntries)}
}

func reasonKey(uid types.UID, name string) string { return string(uid) + "_" + name }

// Update records the outcome of a SyncPod: only StartContainer results count; a failed start
// records its error and message, a successful one clears the container's entry.
func (c *ReasonCache) Update(uid types.UID, result container.PodSyncResult) {
	for _, r := range result.SyncResults {
		if r.Action != container.StartContainer {
			continue
		}
		name, ok := r.Target.(string)
		if !ok {
			continue
		}
		if r.Error != nil {
			c.cache.Add(reasonKey(uid, name), reasonEntry{reason: r.Error.Error(), message: r.Message})
		} else {
			c.cache.Remove(reasonKey(uid, name))
		}
	}
}

// Get returns the container's last start failure, if any.
func (c *ReasonCache) Get(uid types.UID, name string) (reason, message string, ok bool) {
	v, ok := c.cache.Get(reasonKey(uid, name))
	if !ok {
		return "", "", false
	}
	e := v.(reasonEntry)
	return e.reason, e.message, true
}

// Remove forgets the container's entry.
func (c *ReasonCache) Remove(uid types.UID, name string) {
	c.cache.Remove(reasonKey(uid, name))
}
