package cadvisor

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	// staleLimit: a collection older than this is never served in place of a new one.
	staleLimit = 2 * time.Minute
	// collectTimeout bounds one collection, which runs on behalf of every scrape waiting
	// for it and so is not cancelled with any one of them.
	collectTimeout = 2 * time.Minute
)

// collections shares collections between scrapes. A collection younger than maxAge is
// served again; an older one makes the next scrape start a new collection (one at a
// time, whatever the number of scrapers) and wait for it up to maxWait. A collection that
// takes longer (containerd 2.4 needs about a second per ten pods) leaves the scrape the
// previous one, if it is younger than staleLimit, so that the scrape answers within
// Prometheus's timeout. The metrics carry the runtime's timestamps, so a sample served
// twice or late is still stored at the time it was taken.
type collections struct {
	collect func(context.Context) ([]prometheus.Metric, error)
	maxAge  time.Duration
	maxWait time.Duration
	now     func() time.Time

	mu      sync.Mutex
	last    *collection   // the latest successful collection
	result  *collection   // the latest collection's outcome, success or not
	running chan struct{} // closed when the running collection ends; nil when none runs
}

type collection struct {
	metrics []prometheus.Metric
	taken   time.Time
	err     error
}

func newCollections(collect func(context.Context) ([]prometheus.Metric, error), maxAge, maxWait time.Duration, now func() time.Time) *collections {
	return &collections{collect: collect, maxAge: maxAge, maxWait: maxWait, now: now}
}

// get returns the metrics a scrape serves.
func (c *collections) get(ctx context.Context) ([]prometheus.Metric, error) {
	c.mu.Lock()
	prev := c.last
	if prev != nil && c.now().Sub(prev.taken) < c.maxAge {
		c.mu.Unlock()
		return prev.metrics, nil
	}
	done := c.startLocked()
	c.mu.Unlock()

	var fallback <-chan time.Time
	if prev != nil && c.now().Sub(prev.taken) < staleLimit {
		t := time.NewTimer(c.maxWait)
		defer t.Stop()
		fallback = t.C
	}
	select {
	case <-done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.result.metrics, c.result.err
	case <-fallback:
		return prev.metrics, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// startLocked starts a collection unless one runs, and returns the channel closed when
// the running one ends. c.mu is held.
func (c *collections) startLocked() <-chan struct{} {
	if c.running != nil {
		return c.running
	}
	done := make(chan struct{})
	c.running = done
	go func() {
		defer close(done)
		taken := c.now()
		ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
		metrics, err := c.collect(ctx)
		cancel()
		c.mu.Lock()
		defer c.mu.Unlock()
		c.result = &collection{metrics: metrics, taken: taken, err: err}
		if err == nil {
			c.last = c.result
		}
		c.running = nil
	}()
	return done
}
