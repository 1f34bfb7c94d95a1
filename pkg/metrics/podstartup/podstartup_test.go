package podstartup

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/metrics"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// logLines captures klog's lines (message and key/values) while a test runs.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func captureLogs(t *testing.T) *logLines {
	l := &logLines{}
	klog.SetLogger(funcr.New(func(_, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{}))
	t.Cleanup(klog.ClearLogger)
	return l
}

func (l *logLines) matching(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

func newPod(uid, source string, seen time.Time) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "default", UID: types.UID(uid),
			CreationTimestamp: metav1.NewTime(seen.Add(-time.Second)),
			Annotations: map[string]string{
				kubetypes.ConfigFirstSeenAnnotationKey: seen.Format(time.RFC3339Nano), kubetypes.ConfigSourceAnnotationKey: source,
			},
		},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}},
	}
}

// phase runs p on trace for d of fake time.
func phase(clock *clocktesting.FakeClock, trace *Trace, p Phase, d time.Duration) {
	end := trace.Begin(p)
	clock.Step(d)
	end()
}

func readyStatus() *v1.PodStatus {
	return &v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}
}

// histogram reads the count and sum of an observer.
func histogram(t *testing.T, o prometheus.Observer) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// phaseDeltas returns a function that reports, per phase, how many observations and
// how many seconds were added since it was made.
func phaseDeltas(t *testing.T) func() map[Phase][2]float64 {
	before := map[Phase][2]float64{}
	for _, ph := range phases {
		n, sum := histogram(t, metrics.PodStartupPhaseDuration.WithLabelValues(string(ph.phase)))
		before[ph.phase] = [2]float64{float64(n), sum}
	}
	return func() map[Phase][2]float64 {
		out := map[Phase][2]float64{}
		for _, ph := range phases {
			n, sum := histogram(t, metrics.PodStartupPhaseDuration.WithLabelValues(string(ph.phase)))
			out[ph.phase] = [2]float64{float64(n) - before[ph.phase][0], sum - before[ph.phase][1]}
		}
		return out
	}
}

func TestStartupPhasesAndOneLogLine(t *testing.T) {
	logs := captureLogs(t)
	clock := clocktesting.NewFakeClock(t0.Add(5 * time.Millisecond))
	tr := NewTracker(clock)
	deltas := phaseDeltas(t)
	totalN, _ := histogram(t, metrics.PodStartupDuration)

	trace := tr.Start(newPod("uid-1", "file", t0))
	phase(clock, trace, Admission, time.Millisecond)
	phase(clock, trace, Volumes, 2*time.Millisecond)
	phase(clock, trace, Sandbox, 300*time.Millisecond)
	phase(clock, trace, ImagePull, 500*time.Millisecond)
	phase(clock, trace, ContainerCreate, 20*time.Millisecond)
	phase(clock, trace, ContainerStart, 30*time.Millisecond) // the init container
	trace.InitContainerRan("init-1", clock.Now(), clock.Now().Add(400*time.Millisecond))
	trace.InitContainerRan("init-1", clock.Now(), clock.Now().Add(400*time.Millisecond)) // same instance: once
	clock.Step(450 * time.Millisecond)
	phase(clock, trace, ContainerCreate, 10*time.Millisecond)
	phase(clock, trace, ContainerStart, 40*time.Millisecond)
	clock.Step(200 * time.Millisecond)

	tr.StatusChanged("uid-1", &v1.PodStatus{Phase: v1.PodRunning}) // not ready yet: nothing
	if n := len(logs.matching(`"msg"="Pod started"`)); n != 0 {
		t.Fatalf("%d lines before the pod is ready", n)
	}
	tr.StatusChanged("uid-1", readyStatus())
	tr.StatusChanged("uid-1", readyStatus())

	lines := logs.matching(`"msg"="Pod started"`)
	if len(lines) != 1 {
		t.Fatalf("got %d \"Pod started\" lines, want 1: %q", len(lines), logs.lines)
	}
	for _, kv := range []string{
		`"pod"={"name"="web" "namespace"="default"}`, `"ready"=true`, `"total"="1.558s"`,
		`"admission"="1ms"`, `"volumes"="2ms"`, `"sandbox"="300ms"`, `"imagePull"="500ms"`,
		`"containerCreate"="30ms"`, `"containerStart"="70ms"`, `"initContainers"="400ms"`,
		`"readiness"="200ms"`, `"other"="55ms"`,
	} {
		if !strings.Contains(lines[0], kv) {
			t.Errorf("log line lacks %s: %s", kv, lines[0])
		}
	}
	want := map[Phase]float64{Admission: .001, Volumes: .002, Sandbox: .3, ImagePull: .5,
		ContainerCreate: .03, ContainerStart: .07, InitContainers: .4, Readiness: .2}
	for p, d := range deltas() {
		if d[0] != 1 || !near(d[1], want[p]) {
			t.Errorf("phase %s: %v observations adding %vs, want 1 adding %vs", p, d[0], d[1], want[p])
		}
	}
	if n, _ := histogram(t, metrics.PodStartupDuration); n != totalN+1 {
		t.Errorf("pod start-up duration observed %d times, want 1", n-totalN)
	}
	if tr.Len() != 0 {
		t.Errorf("%d traces left after a static pod started", tr.Len())
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestFinishedWithoutReadiness(t *testing.T) {
	logs := captureLogs(t)
	clock := clocktesting.NewFakeClock(t0)
	tr := NewTracker(clock)
	deltas := phaseDeltas(t)
	trace := tr.Start(newPod("uid-job", "file", t0))
	phase(clock, trace, Sandbox, time.Second)
	tr.StatusChanged("uid-job", &v1.PodStatus{Phase: v1.PodSucceeded})
	lines := logs.matching(`"msg"="Pod started"`)
	if len(lines) != 1 || !strings.Contains(lines[0], `"ready"=false`) {
		t.Fatalf("lines %q, want one with ready=false", lines)
	}
	if d := deltas(); d[Readiness][0] != 0 || d[Sandbox][0] != 1 {
		t.Errorf("observations %v: want no readiness and one sandbox", d)
	}
}

// A pod whose sandbox this nodelet did not create (adopted after a restart) did not start
// here: nothing is recorded, and its trace goes.
func TestAdoptedPodNotRecorded(t *testing.T) {
	logs := captureLogs(t)
	clock := clocktesting.NewFakeClock(t0)
	tr := NewTracker(clock)
	deltas := phaseDeltas(t)
	phase(clock, tr.Start(newPod("uid-2", "file", t0)), Admission, time.Millisecond)
	tr.StatusChanged("uid-2", readyStatus())
	if n := len(logs.matching("Pod started")); n != 0 {
		t.Errorf("%d lines for an adopted pod", n)
	}
	if d := deltas(); d[Admission][0] != 0 {
		t.Errorf("adopted pod observed: %v", d)
	}
	if tr.Len() != 0 {
		t.Errorf("%d traces left", tr.Len())
	}
}

// The SLI is upstream's: creation to all containers running on the watch, less the
// time spent pulling images (overlaps counted once) and running init containers.
func TestSLIExcludesImagePullsAndInitContainers(t *testing.T) {
	clock := clocktesting.NewFakeClock(t0)
	tr := NewTracker(clock)
	pod := newPod("uid-3", "api", t0)
	created := pod.CreationTimestamp.Time
	sliN, sliSum := histogram(t, metrics.PodStartSLIDuration.WithLabelValues())
	totN, totSum := histogram(t, metrics.PodStartTotalDuration.WithLabelValues())

	trace := tr.Start(pod)
	phase(clock, trace, Sandbox, time.Second)
	// Two pulls overlapping by one second: 3 s of pulling, not 4.
	endA := trace.Begin(ImagePull)
	clock.Step(time.Second)
	endB := trace.Begin(ImagePull)
	clock.Step(time.Second)
	endA()
	clock.Step(time.Second)
	endB()
	trace.InitContainerRan("init", created.Add(5*time.Second), created.Add(7*time.Second))
	phase(clock, trace, ContainerStart, time.Second)

	waiting := pod.DeepCopy()
	waiting.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{}}}}
	tr.ObservedOnWatch(waiting, created.Add(9*time.Second))
	if n, _ := histogram(t, metrics.PodStartSLIDuration.WithLabelValues()); n != sliN {
		t.Fatal("SLI recorded before the containers run")
	}
	running := pod.DeepCopy()
	running.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", State: v1.ContainerState{
		Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(created.Add(9 * time.Second))}}}}
	tr.ObservedOnWatch(running, created.Add(10*time.Second))
	tr.ObservedOnWatch(running, created.Add(11*time.Second)) // recorded once

	if n, sum := histogram(t, metrics.PodStartSLIDuration.WithLabelValues()); n != sliN+1 || !near(sum-sliSum, 5) {
		t.Errorf("SLI: %d observations adding %vs, want 1 adding 5s (10 - 3 pulling - 2 init)", n-sliN, sum-sliSum)
	}
	if n, sum := histogram(t, metrics.PodStartTotalDuration.WithLabelValues()); n != totN+1 || !near(sum-totSum, 10) {
		t.Errorf("total: %d observations adding %vs, want 1 adding 10s", n-totN, sum-totSum)
	}
	var g dto.Metric
	_ = metrics.FirstNetworkPodStartSLIDuration.Write(&g)
	if g.GetGauge().GetValue() != 5 {
		t.Errorf("first network pod SLI %v, want 5", g.GetGauge().GetValue())
	}
	// The start-up itself is still traced until the pod is ready; then the trace goes.
	if tr.Len() != 1 {
		t.Fatalf("%d traces, want the pod's until it is ready", tr.Len())
	}
	tr.StatusChanged("uid-3", readyStatus())
	if tr.Len() != 0 {
		t.Errorf("%d traces left", tr.Len())
	}
}

func TestSLIOnlyForFreshSchedulableStatelessAPIPods(t *testing.T) {
	sliN, _ := histogram(t, metrics.PodStartSLIDuration.WithLabelValues())
	totN, _ := histogram(t, metrics.PodStartTotalDuration.WithLabelValues())
	clock := clocktesting.NewFakeClock(t0)
	tr := NewTracker(clock)

	static := newPod("static", "file", t0)
	started := newPod("started", "api", t0)
	started.Status.StartTime = &metav1.Time{Time: t0}
	stateful := newPod("stateful", "api", t0)
	stateful.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/d"}}}}
	unschedulable := newPod("unschedulable", "api", t0)
	for _, pod := range []*v1.Pod{static, started, stateful, unschedulable} {
		tr.Start(pod)
	}
	unschedulable.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse}}
	for _, pod := range []*v1.Pod{static, started, stateful, unschedulable} {
		running := pod.DeepCopy()
		running.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", State: v1.ContainerState{
			Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(t0)}}}}
		tr.ObservedOnWatch(running, t0.Add(time.Second))
	}
	if n, _ := histogram(t, metrics.PodStartSLIDuration.WithLabelValues()); n != sliN {
		t.Errorf("%d SLI observations, want none", n-sliN)
	}
	if n, _ := histogram(t, metrics.PodStartTotalDuration.WithLabelValues()); n != totN+1 {
		t.Errorf("%d total observations, want 1 (the stateful pod)", n-totN)
	}
}

func TestTracesDoNotOutliveTheirPods(t *testing.T) {
	tr := NewTracker(clocktesting.NewFakeClock(t0))
	for _, uid := range []string{"a", "b", "c"} {
		tr.Start(newPod(uid, "api", t0))
	}
	tr.Forget("a")
	tr.Retain(map[types.UID]bool{"b": true})
	if tr.Len() != 1 || !tr.Starting("b") || tr.Starting("c") {
		t.Errorf("after Forget(a) and Retain(b): %d traces, b traced %v, c traced %v", tr.Len(), tr.Starting("b"), tr.Starting("c"))
	}
}

func TestContext(t *testing.T) {
	clock := clocktesting.NewFakeClock(t0)
	tr := NewTracker(clock)
	ctx := context.Background()
	if FromContext(tr.WithTrace(ctx, "none")) != nil {
		t.Error("a context carries a trace for an untraced pod")
	}
	var nilTrace *Trace
	nilTrace.Begin(Sandbox)() // no trace: nothing happens
	nilTrace.InitContainerRan("x", t0, t0.Add(time.Second))

	trace := tr.Start(newPod("uid-4", "file", t0))
	if got := FromContext(tr.WithTrace(ctx, "uid-4")); got != trace {
		t.Fatalf("FromContext = %p, want the pod's trace %p", got, trace)
	}
	phase(clock, trace, Sandbox, time.Second)
	tr.StatusChanged("uid-4", readyStatus())
	if FromContext(tr.WithTrace(ctx, "uid-4")) != nil {
		t.Error("a started pod's syncs still carry its trace")
	}
}
