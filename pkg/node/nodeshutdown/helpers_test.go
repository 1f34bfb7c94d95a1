package nodeshutdown

import (
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
)

var testStart = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func testPod(name string, priority *int32, gracePeriod *int64) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Generation: 3},
		Spec:       v1.PodSpec{Priority: priority, TerminationGracePeriodSeconds: gracePeriod},
	}
}

// kill is one KillPod call: the pod, its grace period and the status its
// statusFn made of a running pod's.
type kill struct {
	pod    string
	grace  int64
	status v1.PodStatus
}

// killRecorder is a KillPod that records its calls; the kills of the pods
// in stuck block until the test ends.
type killRecorder struct {
	mu    sync.Mutex
	kills []kill
	stuck map[string]bool
	end   chan struct{}
}

func newKillRecorder(t *testing.T, stuck ...string) *killRecorder {
	r := &killRecorder{stuck: map[string]bool{}, end: make(chan struct{})}
	for _, name := range stuck {
		r.stuck[name] = true
	}
	t.Cleanup(func() { close(r.end) })
	return r
}

func (r *killRecorder) KillPod(pod *v1.Pod, statusFn func(*v1.PodStatus), grace int64) error {
	status := v1.PodStatus{Phase: v1.PodRunning}
	statusFn(&status)
	r.mu.Lock()
	r.kills = append(r.kills, kill{pod: pod.Name, grace: grace, status: status})
	stuck := r.stuck[pod.Name]
	r.mu.Unlock()
	if stuck {
		<-r.end
	}
	return nil
}

func (r *killRecorder) calls() []kill {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.kills)
}

// killedPods returns the names of the pods killed, in order.
func (r *killRecorder) killedPods() []string {
	var names []string
	for _, k := range r.calls() {
		names = append(names, k.pod)
	}
	return names
}

// fakeLogind is a Logind in memory; the test sends its shutdown events.
type fakeLogind struct {
	delay  time.Duration
	events chan bool
	closed atomic.Bool

	mu    sync.Mutex
	locks []*fakeLock
}

func newFakeLogind(delay time.Duration) *fakeLogind {
	return &fakeLogind{delay: delay, events: make(chan bool)}
}

func (f *fakeLogind) InhibitDelayMax() (time.Duration, error) { return f.delay, nil }
func (f *fakeLogind) ReloadConfig() error                     { return errors.New("no reload in fakeLogind") }
func (f *fakeLogind) WatchShutdown() (<-chan bool, error)     { return f.events, nil }
func (f *fakeLogind) Close() error                            { f.closed.Store(true); return nil }

func (f *fakeLogind) InhibitShutdown() (io.Closer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	lock := &fakeLock{}
	f.locks = append(f.locks, lock)
	return lock, nil
}

// lockStates returns, for each lock taken, whether it is released.
func (f *fakeLogind) lockStates() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	var released []bool
	for _, l := range f.locks {
		released = append(released, l.released.Load())
	}
	return released
}

type fakeLock struct{ released atomic.Bool }

func (l *fakeLock) Close() error {
	if l.released.Swap(true) {
		return errors.New("lock released twice")
	}
	return nil
}

// eventually fails the test unless cond turns true within 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// logSink collects log lines.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) logger() klog.Logger {
	return funcr.New(func(prefix, args string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lines = append(s.lines, args)
	}, funcr.Options{})
}

func (s *logSink) containing(substr string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var found []string
	for _, l := range s.lines {
		if strings.Contains(l, substr) {
			found = append(found, l)
		}
	}
	return found
}

// startWithFake starts a manager on fake logind with a fake clock.
func startWithFake(t *testing.T, cfg Config, deps Deps, fake *fakeLogind) (*Manager, *clocktesting.FakeClock) {
	t.Helper()
	clock := clocktesting.NewFakeClock(testStart)
	deps.Clock = clock
	deps.ConnectLogind = func() (Logind, error) { return fake, nil }
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	m, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m, clock
}
