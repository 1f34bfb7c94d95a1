package stats

import (
	"sync"
	"time"
)

// cpuRates turns cumulative CPU usage samples into usageNanoCores, which
// needs a previous sample: the runtime (containerd reports 0 on a first call)
// and cgroupfs give only the cumulative figure. Upstream keeps such a cache
// for the CRI path, updated only by the eviction manager every 10s; here
// every caller updates it, but a sample closer than minInterval to the
// previous one only reads the last rate, so frequent callers (a benchmark,
// several scrapers) neither skew the rate nor turn it spiky.
type cpuRates struct {
	minInterval time.Duration
	// maxAge drops entries of containers not seen for that long (upstream's
	// 10-minute cache period).
	maxAge time.Duration

	mu        sync.Mutex
	entries   map[string]*rateEntry
	lastPrune time.Time
}

type rateEntry struct {
	ts      int64  // sample time, Unix nanoseconds
	usage   uint64 // cumulative core-nanoseconds
	rate    uint64 // nanocores over the last interval
	hasRate bool
}

func newCPURates() *cpuRates {
	return &cpuRates{minInterval: time.Second, maxAge: 10 * time.Minute, entries: map[string]*rateEntry{}}
}

// update records a sample of key (a container, sandbox or cgroup) taken at
// ts (Unix nanoseconds) and returns its usageNanoCores, if known.
func (c *cpuRates) update(key string, ts int64, usage uint64) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || usage < e.usage || ts < e.ts {
		// New, or restarted (counter went back): start over.
		c.entries[key] = &rateEntry{ts: ts, usage: usage}
		return 0, false
	}
	elapsed := ts - e.ts
	if elapsed < int64(c.minInterval) {
		return e.rate, e.hasRate
	}
	e.rate = uint64(float64(usage-e.usage) / float64(elapsed) * float64(time.Second))
	e.hasRate = true
	e.ts, e.usage = ts, usage
	return e.rate, true
}

// prune forgets keys not sampled within maxAge; it runs at most once a minute.
func (c *cpuRates) prune(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.lastPrune) < time.Minute {
		return
	}
	c.lastPrune = now
	cutoff := now.Add(-c.maxAge).UnixNano()
	for k, e := range c.entries {
		if e.ts < cutoff {
			delete(c.entries, k)
		}
	}
}
