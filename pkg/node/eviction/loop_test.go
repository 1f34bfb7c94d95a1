package eviction

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// fakeNotifiers records what is armed; fire signals the newest notifier.
type fakeNotifiers struct {
	mu    sync.Mutex
	armed []*fakeNotifier
}

type fakeNotifier struct {
	cgroup, attribute string
	threshold         int64
	events            chan<- struct{}
	started, stopped  chan struct{}
	stopOnce          sync.Once
}

func (f *fakeNotifiers) NewCgroupNotifier(cgroup, attribute string, threshold int64) (CgroupNotifier, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := &fakeNotifier{cgroup: cgroup, attribute: attribute, threshold: threshold, started: make(chan struct{}), stopped: make(chan struct{})}
	f.armed = append(f.armed, n)
	return n, nil
}

func (n *fakeNotifier) Start(_ context.Context, events chan<- struct{}) {
	n.events = events
	close(n.started)
}

func (n *fakeNotifier) Stop() { n.stopOnce.Do(func() { close(n.stopped) }) }

func (f *fakeNotifiers) all() []*fakeNotifier {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*fakeNotifier(nil), f.armed...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (h *harness) summaries() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.summary
}

func TestLoopChecksEveryIntervalAndOnMemcgNotification(t *testing.T) {
	notifiers := &fakeNotifiers{}
	h := newHarness(t, Config{
		Thresholds:              mustThresholds(t, map[string]string{"memory.available": "1Gi"}, nil, nil, nil),
		KernelMemcgNotification: true,
	})
	h.mgr.deps.Notifiers = notifiers
	h.setNode(func(n *fakeNode) { n.memWorkingSet = 2 * Gi; n.memInactiveFile = Gi })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.mgr.Start(ctx)

	waitFor(t, "the first check", func() bool { return h.summaries() == 1 && h.clock.HasWaiters() })
	armed := notifiers.all()
	if len(armed) != 1 {
		t.Fatalf("%d notifiers armed, want 1", len(armed))
	}
	// capacity 8Gi − threshold 1Gi + inactive file 1Gi.
	if n := armed[0]; n.cgroup != "/" || n.attribute != "memory.usage_in_bytes" || n.threshold != int64(8*Gi) {
		t.Errorf("armed %s %s at %d, want / memory.usage_in_bytes at %d", n.cgroup, n.attribute, n.threshold, 8*Gi)
	}

	h.step(9 * time.Second)
	time.Sleep(10 * time.Millisecond)
	if h.summaries() != 1 {
		t.Fatal("checked again before the 10s interval")
	}
	h.step(time.Second)
	waitFor(t, "the periodic check", func() bool { return h.summaries() == 2 && h.clock.HasWaiters() })

	<-armed[0].started
	armed[0].events <- struct{}{}
	waitFor(t, "the check on notification", func() bool { return h.summaries() == 3 })

	// Re-armed from fresh stats once older than 10s; the old one stopped.
	h.setNode(func(n *fakeNode) { n.memInactiveFile = 2 * Gi })
	h.step(10 * time.Second)
	waitFor(t, "the check re-arming the notifier", func() bool { return len(notifiers.all()) == 2 })
	<-armed[0].stopped
	if n := notifiers.all()[1]; n.threshold != int64(9*Gi) {
		t.Errorf("re-armed at %d, want %d", n.threshold, 9*Gi)
	}
}

func TestLoopWaitsForCleanupThenChecksAgain(t *testing.T) {
	h := newHarness(t, Config{Thresholds: mustThresholds(t, map[string]string{"memory.available": "1Gi"}, nil, nil, nil)})
	memoryPods(h)
	h.setNode(func(n *fakeNode) { n.memWorkingSet = n.memCapacity - 500*Mi })
	var mu sync.Mutex
	cleaned := false
	h.mgr.deps.PodCleanedUp = func(*v1.Pod) bool {
		mu.Lock()
		defer mu.Unlock()
		return cleaned
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.mgr.Start(ctx)
	waitFor(t, "the first eviction", func() bool { return len(h.killedNames()) == 1 && h.clock.HasWaiters() })
	h.step(time.Second)
	time.Sleep(10 * time.Millisecond)
	if h.summaries() != 1 {
		t.Fatal("checked again before the evicted pod was cleaned up")
	}
	mu.Lock()
	cleaned = true
	mu.Unlock()
	h.step(time.Second)
	// Checked again at once, without waiting for the 10s interval.
	waitFor(t, "the check after clean-up", func() bool { return len(h.killedNames()) == 2 })
}
