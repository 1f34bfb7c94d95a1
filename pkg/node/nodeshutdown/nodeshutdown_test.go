package nodeshutdown

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/node/nodeshutdown/logind"
)

var twoGroupConfig = Config{ShutdownGracePeriod: 30 * time.Second, ShutdownGracePeriodCriticalPods: 10 * time.Second}

// TestShutdownAndCancelThroughLogind runs the whole protocol against
// fakelogind on a private bus: the lock is taken at start, a shutdown kills
// the regular pods, then the critical ones, and releases the lock; a
// cancellation brings the node back and takes the lock again.
func TestShutdownAndCancelThroughLogind(t *testing.T) {
	address := startBus(t)
	fake := startFakelogind(t, address, "-inhibit-delay-max", "1m")
	clock := clocktesting.NewFakeClock(testStart)
	kills := newKillRecorder(t)
	recorder := record.NewFakeRecorder(10)
	synced := make(chan struct{}, 1)
	cfg := twoGroupConfig
	cfg.StateDir = t.TempDir()
	pods := []*v1.Pod{
		testPod("critical", ptr.To[int32](2000001000), nil),
		testPod("short", nil, ptr.To[int64](5)),
		testPod("long", ptr.To[int32](1000), ptr.To[int64](60)),
	}
	m, err := New(cfg, Deps{
		ActivePods:      func() []*v1.Pod { return pods },
		KillPod:         kills.KillPod,
		SyncNodeStatus:  func() { synced <- struct{}{} },
		Recorder:        recorder,
		NodeRef:         &v1.ObjectReference{Kind: "Node", Name: "node"},
		Clock:           clock,
		ConnectLogind:   connectTo(address),
		LogindConfigDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	fake.expect(`inhibit taken id=1 what=shutdown who=kubelet why="Kubelet needs time to handle node shutdown" mode=delay`)
	expectRunning(t, m)

	fake.send("shutdown")
	fake.expect("signal sent true")
	// The lock is released only once every group is done.
	fake.expect("inhibit released id=1")
	expectShuttingDown(t, m)
	expectKills(t, kills.calls(), map[string]int64{"short": 5, "long": 20}, map[string]int64{"critical": 10})
	for _, k := range kills.calls() {
		expectShutdownStatus(t, k.status)
	}
	select {
	case <-synced:
	case <-time.After(10 * time.Second):
		t.Error("node status was not synced")
	}
	expectEvent(t, recorder, "Normal Shutdown Shutdown manager detected shutdown event")
	expectStateFile(t, cfg.StateDir, `{"startTime":"2025-01-02T03:04:05Z","endTime":"2025-01-02T03:04:05Z"}`)
	if got, want := testutil.ToFloat64(GracefulShutdownEndTime), float64(testStart.Unix()); got != want {
		t.Errorf("end time metric = %v, want %v", got, want)
	}

	fake.send("cancel")
	fake.expectInAnyOrder("signal sent false", "inhibit taken id=2")
	expectRunning(t, m)
	expectEvent(t, recorder, "Normal Shutdown Shutdown manager detected shutdown cancellation")
}

func expectRunning(t *testing.T, m *Manager) {
	t.Helper()
	if err := m.ShutdownStatus(); err != nil {
		t.Errorf("ShutdownStatus() = %v, want nil", err)
	}
	if admit, reason, message := m.Admit(testPod("new", nil, nil)); !admit {
		t.Errorf("Admit() = false, %q, %q; want true", reason, message)
	}
}

func expectShuttingDown(t *testing.T, m *Manager) {
	t.Helper()
	if err := m.ShutdownStatus(); err == nil || err.Error() != "node is shutting down" {
		t.Errorf("ShutdownStatus() = %v, want node is shutting down", err)
	}
	admit, reason, message := m.Admit(testPod("new", nil, nil))
	if admit || reason != "NodeShutdown" || message != "Pod was rejected as the node is shutting down." {
		t.Errorf("Admit() = %v, %q, %q; want refused for NodeShutdown", admit, reason, message)
	}
}

// expectKills checks that the pods of each group got their grace period,
// and that all the pods of the first group were killed before the second.
func expectKills(t *testing.T, kills []kill, groups ...map[string]int64) {
	t.Helper()
	for _, group := range groups {
		if len(kills) < len(group) {
			t.Fatalf("kills %v, want %v next", kills, group)
		}
		for _, k := range kills[:len(group)] {
			if want, ok := group[k.pod]; !ok || k.grace != want {
				t.Errorf("killed %s with grace period %d, want group %v", k.pod, k.grace, group)
			}
		}
		kills = kills[len(group):]
	}
	if len(kills) > 0 {
		t.Errorf("unexpected kills %v", kills)
	}
}

func expectShutdownStatus(t *testing.T, status v1.PodStatus) {
	t.Helper()
	message := "Pod was terminated in response to imminent node shutdown."
	if status.Phase != v1.PodFailed || status.Reason != "Terminated" || status.Message != message {
		t.Errorf("status %s %q %q, want Failed Terminated %q", status.Phase, status.Reason, status.Message, message)
	}
	want := []v1.PodCondition{{
		Type: v1.DisruptionTarget, Status: v1.ConditionTrue, ObservedGeneration: 3,
		Reason: "TerminationByKubelet", Message: message, LastTransitionTime: metav1.NewTime(testStart),
	}}
	if !slices.EqualFunc(status.Conditions, want, conditionsEqual) {
		t.Errorf("conditions %+v, want %+v", status.Conditions, want)
	}
}

func conditionsEqual(a, b v1.PodCondition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.ObservedGeneration == b.ObservedGeneration &&
		a.Reason == b.Reason && a.Message == b.Message && a.LastTransitionTime.Equal(&b.LastTransitionTime)
}

func expectEvent(t *testing.T, recorder *record.FakeRecorder, want string) {
	t.Helper()
	select {
	case got := <-recorder.Events:
		if got != want {
			t.Errorf("event %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("no event, want %q", want)
	}
}

func expectStateFile(t *testing.T, dir, want string) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(dir, "graceful_node_shutdown_state"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("state file %s, want %s", got, want)
	}
}

// TestGroupWaitsAtMostItsGracePeriod: a pod that does not stop holds its
// group back for the group's grace period only.
func TestGroupWaitsAtMostItsGracePeriod(t *testing.T) {
	fake := newFakeLogind(time.Hour)
	kills := newKillRecorder(t, "stuck")
	pods := []*v1.Pod{testPod("stuck", nil, nil), testPod("critical", ptr.To[int32](2000000000), ptr.To[int64](30))}
	_, clock := startWithFake(t, twoGroupConfig, Deps{ActivePods: func() []*v1.Pod { return pods }, KillPod: kills.KillPod}, fake)

	fake.events <- true
	eventually(t, "the group's timer", clock.HasWaiters)
	clock.Step(19 * time.Second)
	time.Sleep(50 * time.Millisecond)
	if got := kills.killedPods(); !slices.Equal(got, []string{"stuck"}) {
		t.Fatalf("killed %v before the regular group's 20 s were over, want [stuck]", got)
	}
	clock.Step(time.Second)
	eventually(t, "the lock released", func() bool { return slices.Equal(fake.lockStates(), []bool{true}) })
	expectKills(t, kills.calls(), map[string]int64{"stuck": 20}, map[string]int64{"critical": 10})
}

// TestGroupsByPodPriority: with ShutdownGracePeriodByPodPriority, pods are
// killed range by range, lowest first, each with its range's period; a
// range without pods is skipped.
func TestGroupsByPodPriority(t *testing.T) {
	cfg := Config{ShutdownGracePeriodByPodPriority: []kubeletconfig.ShutdownGracePeriodByPodPriority{
		{Priority: 100000, ShutdownGracePeriodSeconds: 10},
		{Priority: 10000, ShutdownGracePeriodSeconds: 180},
		{Priority: 50000, ShutdownGracePeriodSeconds: 5},
		{Priority: 1000, ShutdownGracePeriodSeconds: 120},
		{Priority: 0, ShutdownGracePeriodSeconds: 60},
	}}
	pods := []*v1.Pod{
		testPod("top", ptr.To[int32](2000000000), nil),
		testPod("p10000", ptr.To[int32](10000), ptr.To[int64](200)),
		testPod("p1000", ptr.To[int32](1000), nil),
		testPod("p999", ptr.To[int32](999), nil),
		testPod("negative", ptr.To[int32](-5), nil),
		testPod("p5000", ptr.To[int32](5000), ptr.To[int64](7)),
		testPod("p100000", ptr.To[int32](100000), nil),
	}
	fake := newFakeLogind(time.Hour)
	kills := newKillRecorder(t)
	startWithFake(t, cfg, Deps{ActivePods: func() []*v1.Pod { return pods }, KillPod: kills.KillPod}, fake)

	fake.events <- true
	eventually(t, "the lock released", func() bool { return slices.Equal(fake.lockStates(), []bool{true}) })
	expectKills(t, kills.calls(),
		map[string]int64{"p999": 60, "negative": 60},
		map[string]int64{"p1000": 120, "p5000": 7},
		map[string]int64{"p10000": 180},
		map[string]int64{"top": 10, "p100000": 10})
}

func TestShutdownGroups(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []kubeletconfig.ShutdownGracePeriodByPodPriority
	}{
		{"off", Config{}, nil},
		{"critical pods only", Config{ShutdownGracePeriodCriticalPods: 10 * time.Second}, nil},
		{"critical longer than all", Config{ShutdownGracePeriod: 10 * time.Second, ShutdownGracePeriodCriticalPods: 20 * time.Second}, nil},
		{"no critical period", Config{ShutdownGracePeriod: 30 * time.Second},
			[]kubeletconfig.ShutdownGracePeriodByPodPriority{{Priority: 0, ShutdownGracePeriodSeconds: 30}, {Priority: 2000000000}}},
		{"two groups", twoGroupConfig,
			[]kubeletconfig.ShutdownGracePeriodByPodPriority{{Priority: 0, ShutdownGracePeriodSeconds: 20}, {Priority: 2000000000, ShutdownGracePeriodSeconds: 10}}},
		{"by priority wins", Config{ShutdownGracePeriod: time.Minute, ShutdownGracePeriodByPodPriority: []kubeletconfig.ShutdownGracePeriodByPodPriority{{Priority: 5, ShutdownGracePeriodSeconds: 1}}},
			[]kubeletconfig.ShutdownGracePeriodByPodPriority{{Priority: 5, ShutdownGracePeriodSeconds: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := shutdownGroups(tc.cfg); !slices.Equal(got, tc.want) {
				t.Errorf("shutdownGroups() = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestNoGracePeriodDoesNothing: the feature is off, logind is not asked.
func TestNoGracePeriodDoesNothing(t *testing.T) {
	m, err := New(Config{StateDir: t.TempDir()}, Deps{
		ActivePods: func() []*v1.Pod { return nil },
		KillPod:    newKillRecorder(t).KillPod,
		ConnectLogind: func() (Logind, error) {
			t.Error("logind was connected to")
			return nil, logind.ErrUnavailable
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	m.Stop()
	expectRunning(t, m)
}

// TestNoLogind: without logind on the bus, or without a bus, Start warns
// once and the node runs without graceful shutdown.
func TestNoLogind(t *testing.T) {
	for name, address := range map[string]string{
		"no logind on the bus": startBus(t),
		"no bus":               "unix:path=" + filepath.Join(t.TempDir(), "none"),
	} {
		t.Run(name, func(t *testing.T) {
			var logs logSink
			m, err := New(twoGroupConfig, Deps{
				ActivePods:    func() []*v1.Pod { return nil },
				KillPod:       newKillRecorder(t).KillPod,
				ConnectLogind: connectTo(address),
				Logger:        logs.logger(),
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Start(); err != nil {
				t.Fatalf("Start() = %v, want nil", err)
			}
			m.Stop()
			if warnings := logs.containing("logind is not reachable on the system bus"); len(warnings) != 1 {
				t.Errorf("logged %q, want one warning", warnings)
			}
			expectRunning(t, m)
		})
	}
}

// TestInhibitDelayRaised: when logind's InhibitDelayMaxUSec is shorter than
// the grace periods, the drop-in is written, logind reloaded, and the lock
// taken.
func TestInhibitDelayRaised(t *testing.T) {
	address := startBus(t)
	confDir := filepath.Join(t.TempDir(), "logind.conf.d")
	fake := startFakelogind(t, address, "-inhibit-delay-max", "5s", "-config-dir", confDir)
	m, err := New(twoGroupConfig, Deps{
		ActivePods:      func() []*v1.Pod { return nil },
		KillPod:         newKillRecorder(t).KillPod,
		ConnectLogind:   connectTo(address),
		LogindConfigDir: confDir,
		Clock:           clocktesting.NewFakeClock(testStart),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	fake.expect("reloaded InhibitDelayMaxUSec=30000000")
	fake.expect("inhibit taken id=1")
	got, err := os.ReadFile(filepath.Join(confDir, "99-kubelet.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=30\n"; string(got) != want {
		t.Errorf("drop-in %q, want %q", got, want)
	}
}

// TestInhibitDelayNotRaised: when the reload does not raise
// InhibitDelayMaxUSec, Start fails as upstream's and takes no lock.
func TestInhibitDelayNotRaised(t *testing.T) {
	address := startBus(t)
	fake := startFakelogind(t, address, "-inhibit-delay-max", "5s", "-config-dir", t.TempDir())
	clock := clocktesting.NewFakeClock(testStart)
	m, err := New(twoGroupConfig, Deps{
		ActivePods:      func() []*v1.Pod { return nil },
		KillPod:         newKillRecorder(t).KillPod,
		ConnectLogind:   connectTo(address),
		LogindConfigDir: t.TempDir(), // not where fakelogind reads
		Clock:           clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start()
	want := "node shutdown manager was timed out after 5 attempts waiting for logind InhibitDelayMaxSec to update to 30s (ShutdownGracePeriod), current value is 5s"
	if err == nil || err.Error() != want {
		t.Fatalf("Start() = %v, want %s", err, want)
	}
	m.Stop()
	fake.expect("reloaded InhibitDelayMaxUSec=5000000")
	fake.expectNothing(100 * time.Millisecond)
	// The polls waited 100, 200, 400 and 800 ms.
	if got := clock.Since(testStart); got != 1500*time.Millisecond {
		t.Errorf("polled for %v, want 1.5s", got)
	}
}

// TestCancelTakesTheLockAgain: after a cancelled shutdown the node is back
// and a new lock replaces the released one.
func TestCancelTakesTheLockAgain(t *testing.T) {
	fake := newFakeLogind(time.Hour)
	kills := newKillRecorder(t)
	m, _ := startWithFake(t, twoGroupConfig, Deps{ActivePods: func() []*v1.Pod { return nil }, KillPod: kills.KillPod}, fake)

	fake.events <- true
	eventually(t, "the lock released", func() bool { return slices.Equal(fake.lockStates(), []bool{true}) })
	expectShuttingDown(t, m)
	fake.events <- false
	eventually(t, "a new lock", func() bool { return slices.Equal(fake.lockStates(), []bool{true, false}) })
	expectRunning(t, m)
	// A cancellation without a shutdown before it swaps the lock too.
	fake.events <- false
	eventually(t, "the lock swapped", func() bool { return slices.Equal(fake.lockStates(), []bool{true, true, false}) })
}

// TestReconnects: when the connection ends, the manager connects again a
// second later, takes a new lock and releases the old one.
func TestReconnects(t *testing.T) {
	first, second := newFakeLogind(time.Hour), newFakeLogind(time.Hour)
	connections := make(chan *fakeLogind, 2)
	connections <- first
	connections <- second
	clock := clocktesting.NewFakeClock(testStart)
	m, err := New(twoGroupConfig, Deps{
		ActivePods:    func() []*v1.Pod { return nil },
		KillPod:       newKillRecorder(t).KillPod,
		Clock:         clock,
		ConnectLogind: func() (Logind, error) { return <-connections, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	close(first.events)
	eventually(t, "the reconnection timer", clock.HasWaiters)
	clock.Step(time.Second)
	eventually(t, "a lock on the new connection", func() bool { return slices.Equal(second.lockStates(), []bool{false}) })
	if !slices.Equal(first.lockStates(), []bool{true}) || !first.closed.Load() {
		t.Errorf("first connection: locks released %v, closed %v; want released and closed", first.lockStates(), first.closed.Load())
	}
	second.events <- true
	eventually(t, "the new lock released", func() bool { return slices.Equal(second.lockStates(), []bool{true}) })
}

// TestStatusKeepsSucceededAndTransitionTime: a pod that already succeeded
// stays Succeeded, and an existing DisruptionTarget keeps its transition
// time.
func TestStatusKeepsSucceededAndTransitionTime(t *testing.T) {
	m, err := New(twoGroupConfig, Deps{
		ActivePods: func() []*v1.Pod { return nil },
		KillPod:    newKillRecorder(t).KillPod,
		Clock:      clocktesting.NewFakeClock(testStart),
	})
	if err != nil {
		t.Fatal(err)
	}
	earlier := metav1.NewTime(testStart.Add(-time.Hour))
	status := v1.PodStatus{Phase: v1.PodSucceeded, Conditions: []v1.PodCondition{
		{Type: v1.PodReady, Status: v1.ConditionFalse},
		{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, LastTransitionTime: earlier},
	}}
	m.shutdownStatus(testPod("done", nil, nil))(&status)
	if status.Phase != v1.PodSucceeded || status.Reason != "Terminated" {
		t.Errorf("phase %s reason %q, want Succeeded Terminated", status.Phase, status.Reason)
	}
	if c := status.Conditions[1]; len(status.Conditions) != 2 || !c.LastTransitionTime.Equal(&earlier) || c.Reason != "TerminationByKubelet" {
		t.Errorf("conditions %+v, want DisruptionTarget updated in place since %v", status.Conditions, earlier)
	}
}

// TestMetricsRestoredFromState: Start reports the previous shutdown, as
// the state file recorded it before the reboot.
func TestMetricsRestoredFromState(t *testing.T) {
	dir := t.TempDir()
	state := `{"startTime":"2024-05-06T07:08:09Z","endTime":"2024-05-06T07:08:39Z"}`
	if err := os.WriteFile(filepath.Join(dir, StateFile), []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
	GracefulShutdownStartTime.Set(0)
	GracefulShutdownEndTime.Set(0)
	cfg := twoGroupConfig
	cfg.StateDir = dir
	startWithFake(t, cfg, Deps{ActivePods: func() []*v1.Pod { return nil }, KillPod: newKillRecorder(t).KillPod}, newFakeLogind(time.Hour))
	start := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	if got := testutil.ToFloat64(GracefulShutdownStartTime); got != float64(start.Unix()) {
		t.Errorf("start time %v, want %v", got, start.Unix())
	}
	if got := testutil.ToFloat64(GracefulShutdownEndTime); got != float64(start.Unix()+30) {
		t.Errorf("end time %v, want %v", got, start.Unix()+30)
	}
}

// TestStateDuringShutdown: while the pods are killed, the state file has
// the start time and a zero end time.
func TestStateDuringShutdown(t *testing.T) {
	dir := t.TempDir()
	cfg := twoGroupConfig
	cfg.StateDir = dir
	fake := newFakeLogind(time.Hour)
	kills := newKillRecorder(t, "stuck")
	pods := []*v1.Pod{testPod("stuck", nil, nil)}
	startWithFake(t, cfg, Deps{ActivePods: func() []*v1.Pod { return pods }, KillPod: kills.KillPod}, fake)
	fake.events <- true
	eventually(t, "the kill", func() bool { return len(kills.calls()) == 1 })
	expectStateFile(t, dir, `{"startTime":"2025-01-02T03:04:05Z","endTime":"0001-01-01T00:00:00Z"}`)
	if got := testutil.ToFloat64(GracefulShutdownEndTime); got != 0 {
		t.Errorf("end time metric %v during the shutdown, want 0", got)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}
