package cadvisor

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	testingclock "k8s.io/utils/clock/testing"
)

// gatedCollect is a collection that returns a metric numbered by its call, once its gate
// lets it.
type gatedCollect struct {
	calls atomic.Int32
	gate  chan struct{} // nil: returns at once
	err   error
}

var testDesc = prometheus.NewDesc("test_collection", "Which collection this is.", nil, nil)

func (g *gatedCollect) collect(ctx context.Context) ([]prometheus.Metric, error) {
	n := g.calls.Add(1)
	if g.gate != nil {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if g.err != nil {
		return nil, g.err
	}
	return []prometheus.Metric{prometheus.MustNewConstMetric(testDesc, prometheus.GaugeValue, float64(n))}, nil
}

// served is the number of the collection a scrape is served.
func served(t *testing.T, c *collections, ctx context.Context) int {
	t.Helper()
	ms, err := c.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 {
		t.Fatalf("%d metrics", len(ms))
	}
	var m dto.Metric
	if err := ms[0].Write(&m); err != nil {
		t.Fatal(err)
	}
	return int(m.GetGauge().GetValue())
}

func (c *collections) isRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running != nil
}

// TestCollectionReusedWithinMaxAge: scrapes within MaxAge of a collection share it.
func TestCollectionReusedWithinMaxAge(t *testing.T) {
	g := &gatedCollect{}
	clk := testingclock.NewFakeClock(t0)
	c := newCollections(g.collect, 10*time.Second, time.Second, clk.Now)
	ctx := context.Background()
	if n := served(t, c, ctx); n != 1 {
		t.Fatalf("first scrape served collection %d", n)
	}
	clk.Step(9 * time.Second)
	if n := served(t, c, ctx); n != 1 {
		t.Errorf("a scrape 9 s later served collection %d, want the first", n)
	}
	clk.Step(time.Second)
	if n := served(t, c, ctx); n != 2 {
		t.Errorf("a scrape 10 s later served collection %d, want a new one", n)
	}
}

// TestConcurrentScrapesShareOneCollection: scrapers arriving while a collection runs
// wait for it rather than start their own.
func TestConcurrentScrapesShareOneCollection(t *testing.T) {
	g := &gatedCollect{gate: make(chan struct{})}
	c := newCollections(g.collect, 10*time.Second, time.Second, testingclock.NewFakeClock(t0).Now)
	var wg sync.WaitGroup
	got := make([]int, 5)
	for i := range got {
		wg.Go(func() { got[i] = served(t, c, context.Background()) })
	}
	for g.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let the others join
	close(g.gate)
	wg.Wait()
	if n := g.calls.Load(); n != 1 {
		t.Errorf("%d collections for 5 concurrent scrapes", n)
	}
	for i, n := range got {
		if n != 1 {
			t.Errorf("scrape %d served collection %d", i, n)
		}
	}
}

// TestSlowCollectionServesPrevious: a collection slower than MaxWait leaves the scrape
// the previous one; the next scrape gets the new one once it is done.
func TestSlowCollectionServesPrevious(t *testing.T) {
	g := &gatedCollect{}
	clk := testingclock.NewFakeClock(t0)
	c := newCollections(g.collect, 10*time.Second, 20*time.Millisecond, clk.Now)
	ctx := context.Background()
	served(t, c, ctx)
	g.gate = make(chan struct{})
	clk.Step(30 * time.Second)
	start := time.Now()
	if n := served(t, c, ctx); n != 1 {
		t.Errorf("served collection %d while the second ran, want the first", n)
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Errorf("served the previous collection after %v, before MaxWait", waited)
	}
	close(g.gate)
	for c.isRunning() {
		time.Sleep(time.Millisecond)
	}
	if n := served(t, c, ctx); n != 2 {
		t.Errorf("served collection %d after the second ended, want it", n)
	}
	if n := g.calls.Load(); n != 2 {
		t.Errorf("%d collections, want 2", n)
	}
}

// TestStaleCollectionNotServed: a previous collection older than staleLimit is not
// served in place of the running one: the scrape waits.
func TestStaleCollectionNotServed(t *testing.T) {
	g := &gatedCollect{}
	clk := testingclock.NewFakeClock(t0)
	c := newCollections(g.collect, 10*time.Second, time.Millisecond, clk.Now)
	served(t, c, context.Background())
	g.gate = make(chan struct{})
	clk.Step(staleLimit)
	time.AfterFunc(30*time.Millisecond, func() { close(g.gate) })
	if n := served(t, c, context.Background()); n != 2 {
		t.Errorf("served collection %d, want the new one", n)
	}
}

// TestFailedCollectionNotReused: an error is the scrape's answer but not kept: the next
// scrape collects again, and the earlier success is not served as if it were fresh.
func TestFailedCollectionNotReused(t *testing.T) {
	g := &gatedCollect{}
	clk := testingclock.NewFakeClock(t0)
	c := newCollections(g.collect, 10*time.Second, time.Second, clk.Now)
	served(t, c, context.Background())
	clk.Step(time.Minute)
	g.err = errors.New("runtime down")
	if _, err := c.get(context.Background()); !errors.Is(err, g.err) {
		t.Fatalf("got %v, want the collection's error", err)
	}
	g.err = nil
	if n := served(t, c, context.Background()); n != 3 {
		t.Errorf("served collection %d, want a third", n)
	}
}

// TestScrapeCancelled: a scrape that gives up leaves the collection running for others.
func TestScrapeCancelled(t *testing.T) {
	g := &gatedCollect{gate: make(chan struct{})}
	c := newCollections(g.collect, 10*time.Second, time.Second, testingclock.NewFakeClock(t0).Now)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.get(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want the scrape's cancellation", err)
	}
	close(g.gate)
	if n := served(t, c, context.Background()); n != 1 {
		t.Errorf("served collection %d, want the one the cancelled scrape started", n)
	}
}
