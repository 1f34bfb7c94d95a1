package credentialprovider

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCacheKeyTypes: each step asks for image and expects the plugin to have run runs
// times in all.
func TestCacheKeyTypes(t *testing.T) {
	type step struct {
		image   string
		advance time.Duration
		runs    int
	}
	tests := []struct {
		keyType, cacheDuration string
		steps                  []step
	}{
		{"Image", "1m", []step{
			{"a.example.com/app", 0, 1},
			{"a.example.com/app", 0, 1},
			{"a.example.com/other", 0, 2}, // another image of the same registry
			{"a.example.com/app", time.Minute, 2},
			{"a.example.com/app", time.Nanosecond, 3}, // expired
		}},
		{"Registry", "1m", []step{
			{"a.example.com/app", 0, 1},
			{"a.example.com/other", 0, 1},
			{"b.example.com/app", 0, 2},
			{"a.example.com/app", time.Minute + time.Nanosecond, 3},
		}},
		{"Global", "1m", []step{
			{"a.example.com/app", 0, 1},
			{"b.example.com/app", 0, 1},
			{"c.example.com/team/app", 0, 1},
			{"b.example.com/app", 2 * time.Minute, 2},
		}},
		// No cacheDuration: the config's defaultCacheDuration (10m).
		{"Image", "", []step{
			{"a.example.com/app", 0, 1},
			{"a.example.com/app", 10 * time.Minute, 1},
			{"a.example.com/app", time.Second, 2},
		}},
		// Zero: not cached.
		{"Global", "0s", []step{
			{"a.example.com/app", 0, 1},
			{"a.example.com/app", 0, 2},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.keyType+"/"+tc.cacheDuration, func(t *testing.T) {
			f := newFixture(t)
			p := f.load(recorderConfig)
			f.respond(v1Response(tc.keyType, tc.cacheDuration, map[string][2]string{"*.example.com": {"u", "p"}}))
			for i, s := range tc.steps {
				f.clock.Step(s.advance)
				if got := p.Credentials(context.Background(), s.image, nil); len(got) != 1 {
					t.Fatalf("step %d: credentials = %+v", i, got)
				}
				if got := f.calls(); got != s.runs {
					t.Fatalf("step %d (%s): plugin ran %d times, want %d", i, s.image, got, s.runs)
				}
			}
		})
	}
}

// TestCacheZeroDefault: with defaultCacheDuration 0, a response without cacheDuration
// is not cached.
func TestCacheZeroDefault(t *testing.T) {
	f := newFixture(t)
	p := f.load(strings.Replace(recorderConfig, "defaultCacheDuration: 10m", "defaultCacheDuration: 0s", 1))
	f.respond(v1Response("Global", "", map[string][2]string{"*.example.com": {"u", "p"}}))
	p.Credentials(context.Background(), "a.example.com/app", nil)
	p.Credentials(context.Background(), "a.example.com/app", nil)
	if got := f.calls(); got != 2 {
		t.Errorf("plugin ran %d times, want 2", got)
	}
}

// TestCacheServesCachedCredentials: the cached response is what is returned, not a new
// one.
func TestCacheServesCachedCredentials(t *testing.T) {
	f := newFixture(t)
	p := f.load(recorderConfig)
	f.respond(v1Response("Registry", "1h", map[string][2]string{"*.example.com": {"first", "p"}}))
	p.Credentials(context.Background(), "a.example.com/app", nil)
	f.respond(v1Response("Registry", "1h", map[string][2]string{"*.example.com": {"second", "p"}}))
	if got := p.Credentials(context.Background(), "a.example.com/other", nil); len(got) != 1 || got[0].Username != "first" {
		t.Errorf("credentials = %+v, want the cached ones", got)
	}
}

// TestCachePurge: expired entries that are not looked up again go at the next lookup
// once the purge interval has passed.
func TestCachePurge(t *testing.T) {
	f := newFixture(t)
	p := f.load(recorderConfig)
	f.respond(v1Response("Image", "1m", map[string][2]string{"*.example.com": {"u", "p"}}))
	p.Credentials(context.Background(), "a.example.com/one", nil)
	p.Credentials(context.Background(), "a.example.com/two", nil)
	cache := p.providers[0].cache
	entries := func() int {
		cache.mu.Lock()
		defer cache.mu.Unlock()
		return len(cache.entries)
	}
	if n := entries(); n != 2 {
		t.Fatalf("entries = %d, want 2", n)
	}
	f.clock.Step(cachePurgeInterval)
	cache.lookup("b.example.com/x", "")
	if n := entries(); n != 2 {
		t.Errorf("entries before the purge interval = %d, want 2", n)
	}
	f.clock.Step(time.Second)
	cache.lookup("b.example.com/x", "")
	if n := entries(); n != 0 {
		t.Errorf("entries after the purge = %d, want 0", n)
	}
}

// TestConcurrentRequestsShareOneRun: concurrent requests for the same image run the
// plugin once, even with caching off.
func TestConcurrentRequestsShareOneRun(t *testing.T) {
	f := newFixture(t)
	p := f.load(recorderConfig)
	f.writeState("sleep", "0.5")
	f.respond(v1Response("Image", "0s", map[string][2]string{"*.example.com": {"u", "p"}}))
	const callers = 8
	var wg sync.WaitGroup
	results := make([][]Credential, callers)
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-start
			results[i] = p.Credentials(context.Background(), "a.example.com/app", nil)
		})
	}
	close(start)
	wg.Wait()
	if got := f.calls(); got != 1 {
		t.Errorf("plugin ran %d times, want 1", got)
	}
	for i, r := range results {
		if len(r) != 1 || r[0].Username != "u" {
			t.Errorf("caller %d: credentials = %+v", i, r)
		}
	}
	// Other images are not merged.
	p.Credentials(context.Background(), "a.example.com/other", nil)
	if got := f.calls(); got != 2 {
		t.Errorf("plugin ran %d times, want 2", got)
	}
}

func TestFlightGroupSharesResultAndForgets(t *testing.T) {
	var g flightGroup[int]
	release := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	runs := 0
	fn := func() (int, error) {
		mu.Lock()
		runs++
		mu.Unlock()
		<-release
		return 42, nil
	}
	results := make([]int, 5)
	wg.Go(func() { results[0], _ = g.do("k", fn) })
	// Wait until the first call is in flight before the others join it.
	for {
		g.mu.Lock()
		inFlight := len(g.flights)
		g.mu.Unlock()
		if inFlight == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < 5; i++ {
		wg.Go(func() { results[i], _ = g.do("k", fn) })
	}
	// Give the others time to join the flight.
	time.Sleep(100 * time.Millisecond)
	close(release)
	wg.Wait()
	for i, r := range results {
		if r != 42 {
			t.Errorf("result %d = %d", i, r)
		}
	}
	if runs != 1 {
		t.Errorf("runs = %d, want 1", runs)
	}
	if v, _ := g.do("k", func() (int, error) { return 7, nil }); v != 7 {
		t.Errorf("a call after the flight landed got %d, want a new run", v)
	}
}

func TestKeyBuilderIsUnambiguous(t *testing.T) {
	var a, b keyBuilder
	a.add("ab").add("c")
	b.add("a").add("bc")
	if a.String() == b.String() {
		t.Errorf("%q and %q build the same key", "ab|c", "a|bc")
	}
	var c, d keyBuilder
	c.addMap(map[string]string{"k": "v", "x": "y"})
	d.addMap(map[string]string{"x": "y", "k": "v"})
	if c.String() != d.String() {
		t.Errorf("map keys depend on order: %q, %q", c.String(), d.String())
	}
}
