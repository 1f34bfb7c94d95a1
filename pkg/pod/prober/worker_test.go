package prober

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
)

// step runs one doProbe with the runner passing or failing, and returns the published
// result.
func (r *rig) step(w *worker, pass bool) string {
	r.t.Helper()
	if pass {
		r.runner.pass()
	} else {
		r.runner.fail("bad")
	}
	if !w.doProbe() {
		r.t.Fatal("worker wants to stop")
	}
	return result(w.results, "c1")
}

func TestThresholds(t *testing.T) {
	r := newRig(t)
	p := execProbe()
	p.SuccessThreshold, p.FailureThreshold = 2, 3
	pod := testPod(v1.Container{ReadinessProbe: p})
	r.statuses.set(testUID, running("c1", epoch, true))
	w := r.worker(readiness, pod)

	// Readiness starts as Failure; two passes in a row are needed, then three failures.
	for i, s := range []struct {
		pass bool
		want string
	}{
		{true, "Failure"}, {true, "Success"}, {true, "Success"},
		{false, "Success"}, {false, "Success"}, {true, "Success"},
		{false, "Success"}, {false, "Success"}, {false, "Failure"},
		{true, "Failure"}, {false, "Failure"}, {true, "Failure"}, {true, "Success"},
	} {
		if got := r.step(w, s.pass); got != s.want {
			t.Fatalf("probe %d (pass=%v): result %s, want %s", i+1, s.pass, got, s.want)
		}
	}
}

func TestInitialValues(t *testing.T) {
	for _, tc := range []struct {
		kind probeType
		want string
	}{{readiness, "Failure"}, {liveness, "Success"}, {startup, "UNKNOWN"}} {
		r := newRig(t)
		pod := testPod(v1.Container{LivenessProbe: execProbe(), ReadinessProbe: execProbe(), StartupProbe: execProbe()})
		p := tc.kind.spec(&pod.Spec.Containers[0])
		p.InitialDelaySeconds = 100 // only the initial value, no probe
		r.statuses.set(testUID, running("c1", epoch, tc.kind != startup))
		w := r.worker(tc.kind, pod)
		w.doProbe()
		if got := result(w.results, "c1"); got != tc.want {
			t.Errorf("%s: initial result %s, want %s", tc.kind, got, tc.want)
		}
		if r.runner.callCount() != 0 {
			t.Errorf("%s: probed during the initial delay", tc.kind)
		}
	}
}

func TestInitialDelayCountsFromStartedAt(t *testing.T) {
	r := newRig(t)
	p := execProbe()
	p.InitialDelaySeconds = 10
	pod := testPod(v1.Container{ReadinessProbe: p})
	r.clk.Step(time.Minute) // the container started a minute after epoch, the manager at epoch
	r.statuses.set(testUID, running("c1", r.clk.Now(), true))
	w := r.worker(readiness, pod)

	r.clk.Step(9 * time.Second)
	w.doProbe()
	if n := r.runner.callCount(); n != 0 {
		t.Fatalf("probed %d times 9s after start with a 10s initial delay", n)
	}
	r.clk.Step(time.Second)
	w.doProbe()
	if n := r.runner.callCount(); n != 1 {
		t.Fatalf("probed %d times 10s after start, want 1", n)
	}
	if got := result(r.readiness, "c1"); got != "Success" {
		t.Errorf("result %s, want Success", got)
	}
}

func TestStartupProbeGatesLivenessAndReadiness(t *testing.T) {
	r := newRig(t)
	pod := testPod(v1.Container{StartupProbe: execProbe(), LivenessProbe: execProbe(), ReadinessProbe: execProbe()})
	r.statuses.set(testUID, running("c1", epoch, false))
	live, ready, start := r.worker(liveness, pod), r.worker(readiness, pod), r.worker(startup, pod)
	r.runner.fail("not yet")

	live.doProbe()
	ready.doProbe()
	if n := r.runner.callCount(); n != 0 {
		t.Fatalf("liveness/readiness probed %d times before the container started", n)
	}
	start.doProbe()
	if n := r.runner.callCount(); n != 1 {
		t.Fatalf("startup probed %d times, want 1", n)
	}
	if got := result(r.startup, "c1"); got != "Failure" {
		t.Errorf("startup result %s, want Failure", got)
	}

	// Once started (the status manager sets Started from the startup result), startup
	// probing stops and the others begin.
	r.statuses.set(testUID, running("c1", epoch, true))
	start.onHold = false
	start.doProbe()
	if n := r.runner.callCount(); n != 1 {
		t.Fatalf("startup probed a started container")
	}
	live.doProbe()
	ready.doProbe()
	if n := r.runner.callCount(); n != 3 {
		t.Fatalf("after start: %d probes, want 3", n)
	}
}

func TestStartupVerdictHoldsUntilNewContainer(t *testing.T) {
	r := newRig(t)
	p := execProbe()
	p.FailureThreshold = 2
	pod := testPod(v1.Container{StartupProbe: p})
	r.statuses.set(testUID, running("c1", epoch, false))
	w := r.worker(startup, pod)
	if got := r.step(w, true); got != "Success" {
		t.Fatalf("startup result %s, want Success", got)
	}
	// The status still says not started (the status manager has not caught up yet):
	// the verdict is final for this container, so no more probes.
	r.step(w, false)
	r.step(w, false)
	if n := r.runner.callCount(); n != 1 {
		t.Fatalf("startup probed %d times after its verdict, want 1", n)
	}
	r.statuses.set(testUID, running("c2", epoch, false))
	w.doProbe()
	if n := r.runner.callCount(); n != 2 {
		t.Errorf("startup did not probe the new container")
	}
}

func TestExecTimeoutIsAFailure(t *testing.T) {
	r := newRig(t)
	p := execProbe()
	p.Exec.Command = []string{"sleep", "5"}
	pod := testPod(v1.Container{LivenessProbe: p})
	r.statuses.set(testUID, running("c1", epoch, true))
	w := r.worker(liveness, pod)
	r.runner.set("", fmt.Errorf("%w: after 1s", cri.ErrCommandTimedOut))
	w.doProbe()
	if got := result(r.liveness, "c1"); got != "Failure" {
		t.Errorf("result %s, want Failure", got)
	}
	ev := r.recorder.all()
	if len(ev) != 1 || ev[0].message != `Liveness probe failed: command "sleep 5" timed out` {
		t.Errorf("events %+v", ev)
	}
}

func TestFailureEventKeeps10KiBOfOutput(t *testing.T) {
	r := newRig(t)
	pod := testPod(v1.Container{ReadinessProbe: execProbe()})
	r.statuses.set(testUID, running("c1", epoch, true))
	w := r.worker(readiness, pod)
	r.runner.fail(strings.Repeat("e", 20<<10))
	w.doProbe()
	ev := r.recorder.all()
	if len(ev) != 1 {
		t.Fatalf("events %d, want 1", len(ev))
	}
	want := "Readiness probe failed: " + strings.Repeat("e", 10<<10)
	if ev[0].message != want {
		t.Errorf("message is %d bytes, want %d", len(ev[0].message), len(want))
	}
}

func TestEvents(t *testing.T) {
	r := newRig(t)
	pod := testPod(v1.Container{StartupProbe: execProbe(), LivenessProbe: execProbe(), ReadinessProbe: execProbe()})
	pod.ResourceVersion = "7"
	r.statuses.set(testUID, running("c1", epoch, false))
	r.runner.fail("boom\n")
	r.worker(startup, pod).doProbe()
	r.statuses.set(testUID, running("c1", epoch, true))
	r.worker(liveness, pod).doProbe()
	r.worker(readiness, pod).doProbe()
	r.runner.set("", errors.New("rpc error: container gone"))
	r.worker(readiness, pod).doProbe()

	want := []string{
		"Startup probe failed: boom\n",
		"Liveness probe failed: boom\n",
		"Readiness probe failed: boom\n",
		"Readiness probe errored and resulted in unknown state: rpc error: container gone",
	}
	ev := r.recorder.all()
	if len(ev) != len(want) {
		t.Fatalf("got %d events %+v, want %d", len(ev), ev, len(want))
	}
	for i, e := range ev {
		if e.message != want[i] || e.eventType != v1.EventTypeWarning || e.reason != "Unhealthy" {
			t.Errorf("event %d = %s %s %q, want Warning Unhealthy %q", i, e.eventType, e.reason, e.message, want[i])
		}
		wantRef := v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Name: "web", Namespace: "ns", UID: testUID, ResourceVersion: "7", FieldPath: "spec.containers{app}"}
		if e.ref == nil || *e.ref != wantRef {
			t.Errorf("event %d is about %+v, want %+v", i, e.ref, wantRef)
		}
	}
}

func TestProbeErrorIsRetriedThenIgnored(t *testing.T) {
	r := newRig(t)
	pod := testPod(v1.Container{LivenessProbe: execProbe()})
	r.statuses.set(testUID, running("c1", epoch, true))
	w := r.worker(liveness, pod)
	r.runner.set("", errors.New("runtime unavailable"))
	w.doProbe()
	if n := r.runner.callCount(); n != 3 {
		t.Errorf("errored probe ran %d times, want 3", n)
	}
	if got := result(r.liveness, "c1"); got != "Success" {
		t.Errorf("an errored probe changed the result to %s", got)
	}
	if n := testutil.CollectAndCount(r.reg, "prober_probe_total"); n != 0 {
		t.Errorf("an errored probe was counted (%d series)", n)
	}
}

func TestLivenessFailureHoldsUntilNewContainer(t *testing.T) {
	r := newRig(t)
	pod := testPod(v1.Container{LivenessProbe: execProbe()})
	r.statuses.set(testUID, running("c1", epoch, true))
	w := r.worker(liveness, pod)
	if got := r.step(w, false); got != "Failure" {
		t.Fatalf("result %s, want Failure", got)
	}
	r.step(w, true)
	r.step(w, true)
	if n := r.runner.callCount(); n != 1 {
		t.Fatalf("probed %d times after the liveness failure, want 1 (on hold)", n)
	}

	// The runtime manager restarted the container: probing resumes on the new one, the
	// old container's result is gone and the new one starts passed.
	r.statuses.set(testUID, running("c2", epoch, true))
	r.runner.pass()
	w.doProbe()
	if n := r.runner.callCount(); n != 2 {
		t.Fatalf("did not probe the new container")
	}
	if got := result(r.liveness, "c1"); got != "none" {
		t.Errorf("old container still has result %s", got)
	}
	if got := result(r.liveness, "c2"); got != "Success" {
		t.Errorf("new container result %s, want Success", got)
	}
}

func TestNewContainerRestartsTheCount(t *testing.T) {
	r := newRig(t)
	p := execProbe()
	p.FailureThreshold = 2
	pod := testPod(v1.Container{LivenessProbe: p})
	r.statuses.set(testUID, running("c1", epoch, true))
	w := r.worker(liveness, pod)
	r.step(w, false) // one failure of two on c1
	r.statuses.set(testUID, running("c2", epoch, true))
	r.runner.fail("bad")
	w.doProbe() // first failure of c2
	if got := result(r.liveness, "c2"); got != "Success" {
		t.Errorf("c2 failed after one failure: the count of c1 carried over")
	}
	w.doProbe()
	if got := result(r.liveness, "c2"); got != "Failure" {
		t.Errorf("c2 result %s after two failures, want Failure", got)
	}
}

func TestTerminatedContainer(t *testing.T) {
	// The worker keeps going either way (it ends with the pod); a container that will not
	// run again puts it on hold.
	for _, tc := range []struct {
		policy   v1.RestartPolicy
		exitCode int32
		onHold   bool
	}{
		{v1.RestartPolicyAlways, 0, false},
		{v1.RestartPolicyOnFailure, 1, false},
		{v1.RestartPolicyOnFailure, 0, true},
		{v1.RestartPolicyNever, 1, true},
	} {
		r := newRig(t)
		pod := testPod(v1.Container{ReadinessProbe: execProbe()})
		pod.Spec.RestartPolicy = tc.policy
		r.statuses.set(testUID, running("c1", epoch, true))
		w := r.worker(readiness, pod)
		r.step(w, true)
		r.statuses.set(testUID, terminated("c1", tc.exitCode))
		if !w.doProbe() || w.onHold != tc.onHold {
			t.Errorf("%s exit %d: worker stopped, or onHold %v, want %v", tc.policy, tc.exitCode, w.onHold, tc.onHold)
		}
		if got := result(r.readiness, "c1"); got != "Failure" {
			t.Errorf("%s: terminated container result %s, want Failure", tc.policy, got)
		}
	}
}

func TestPodFinishedStopsWorker(t *testing.T) {
	r := newRig(t)
	pod := testPod(v1.Container{ReadinessProbe: execProbe()})
	s := running("c1", epoch, true)
	s.Phase = v1.PodSucceeded
	r.statuses.set(testUID, s)
	if r.worker(readiness, pod).doProbe() {
		t.Error("worker keeps going in a succeeded pod")
	}
}

func TestNoStatusOrContainerYetKeepsWaiting(t *testing.T) {
	r := newRig(t)
	pod := testPod(v1.Container{ReadinessProbe: execProbe()})
	w := r.worker(readiness, pod)
	if !w.doProbe() {
		t.Error("worker stopped for a pod without status")
	}
	r.statuses.set(testUID, v1.PodStatus{Phase: v1.PodPending, ContainerStatuses: []v1.ContainerStatus{{Name: testContainer}}})
	if !w.doProbe() || r.runner.callCount() != 0 {
		t.Error("worker stopped or probed a container without ID")
	}
}

func TestDeletedPodPassesLivenessAndStops(t *testing.T) {
	r := newRig(t)
	pod := testPod(v1.Container{LivenessProbe: execProbe()})
	now := metav1.NewTime(epoch)
	pod.DeletionTimestamp = &now
	r.statuses.set(testUID, running("c1", epoch, true))
	r.runner.fail("bad")
	w := r.worker(liveness, pod)
	if w.doProbe() {
		t.Error("liveness worker of a deleted pod keeps going")
	}
	if got := result(r.liveness, "c1"); got != "Success" || r.runner.callCount() != 0 {
		t.Errorf("result %s after %d probes, want Success without probing", got, r.runner.callCount())
	}
}

func TestContainerFromBeforeRestartKeepsItsResult(t *testing.T) {
	r := newRig(t)
	pod := testPod(v1.Container{ReadinessProbe: func() *v1.Probe { p := execProbe(); p.InitialDelaySeconds = 7200; return p }()})
	// Started long before the manager (a kubelet restart): no initial Failure is
	// published, so a ready container does not flap to unready.
	r.statuses.set(testUID, running("c1", epoch.Add(-time.Hour), true))
	r.worker(readiness, pod).doProbe()
	if got := result(r.readiness, "c1"); got != "none" {
		t.Errorf("result %s for a container running before the restart, want none", got)
	}
}

func TestMetrics(t *testing.T) {
	r := newRig(t)
	pod := testPod(v1.Container{ReadinessProbe: execProbe()})
	r.statuses.set(testUID, running("c1", epoch, true))
	w := r.worker(readiness, pod)
	r.step(w, true)
	r.step(w, true)
	r.step(w, false)
	const want = `
# HELP prober_probe_total [BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.
# TYPE prober_probe_total counter
prober_probe_total{container="app",namespace="ns",pod="web",pod_uid="pod-uid",probe_type="Readiness",result="failed"} 1
prober_probe_total{container="app",namespace="ns",pod="web",pod_uid="pod-uid",probe_type="Readiness",result="successful"} 2
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "prober_probe_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(r.reg, "prober_probe_duration_seconds"); n != 1 {
		t.Errorf("duration series %d, want 1", n)
	}
	w.cleanUp()
	if n := testutil.CollectAndCount(r.reg, "prober_probe_total"); n != 0 {
		t.Errorf("%d series left after the worker stopped", n)
	}
}

func TestRunningWithoutStartTimeIsProbed(t *testing.T) {
	// A zero start time is far enough back for any initial delay; it must not overflow
	// into "not yet".
	r := newRig(t)
	p := execProbe()
	p.InitialDelaySeconds = 5
	pod := testPod(v1.Container{ReadinessProbe: p})
	r.statuses.set(testUID, running("c1", time.Time{}, true))
	r.worker(readiness, pod).doProbe()
	if n := r.runner.callCount(); n != 1 {
		t.Errorf("probed %d times, want 1", n)
	}
}

func TestUndefaultedProbeRunsWithDefaults(t *testing.T) {
	// A pod that skipped API defaulting: a zero timeout would mean no timeout at all.
	r := newRig(t)
	p := &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"check", "$(PORT)"}}}}
	pod := testPod(v1.Container{LivenessProbe: p, Env: []v1.EnvVar{{Name: "PORT", Value: "8080"}}})
	r.statuses.set(testUID, running("c1", epoch, true))
	r.worker(liveness, pod).doProbe()
	cmd, timeout := r.runner.last()
	if timeout != time.Second || strings.Join(cmd, " ") != "check 8080" {
		t.Errorf("ran %q with timeout %v, want `check 8080` with the default 1s", cmd, timeout)
	}
}

func TestCreatedNotStartedContainerKeepsLiveness(t *testing.T) {
	// A status caught between CreateContainer and StartContainer shows the new container
	// Waiting: liveness and startup keep their initial values (a Failure would get the
	// container killed as soon as it runs), readiness is not ready.
	for _, kind := range []probeType{liveness, startup, readiness} {
		r := newRig(t)
		pod := testPod(v1.Container{LivenessProbe: execProbe(), StartupProbe: execProbe(), ReadinessProbe: execProbe()})
		s := running("c1", epoch, false)
		s.ContainerStatuses[0].State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}
		r.statuses.set(testUID, s)
		w := r.worker(kind, pod)
		w.doProbe()
		want := map[probeType]string{liveness: "Success", startup: "UNKNOWN", readiness: "Failure"}[kind]
		rm := map[probeType]results.Manager{liveness: r.liveness, startup: r.startup, readiness: r.readiness}[kind]
		if got := result(rm, "c1"); got != want {
			t.Errorf("%v of a created container: %s, want %s", kind, got, want)
		}
		if n := r.runner.callCount(); n != 0 {
			t.Errorf("%v: probed a container that is not running", kind)
		}
	}
}
