package prober

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
)

// waitFor polls cond for up to 5 s of real time.
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

// tick moves the fake clock by d once some worker waits on it.
func (r *rig) tick(d time.Duration) {
	r.t.Helper()
	waitFor(r.t, "a worker to wait on the clock", r.clk.HasWaiters)
	r.clk.Step(d)
}

// settled is past the manager's first period, so new workers start without jitter.
func (r *rig) settled() { r.clk.Step(time.Hour) }

func TestAddPodStartsOneWorkerPerProbe(t *testing.T) {
	r := newRig(t)
	r.settled()
	pod := testPod(v1.Container{LivenessProbe: execProbe(), ReadinessProbe: execProbe()})
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "noprobe"})
	always := v1.ContainerRestartPolicyAlways
	pod.Spec.InitContainers = []v1.Container{
		{Name: "sidecar", RestartPolicy: &always, StartupProbe: execProbe()},
		{Name: "init", ReadinessProbe: execProbe()}, // not restartable: never probed
	}
	r.m.AddPod(pod)
	r.m.AddPod(pod) // again: nothing new
	if n := r.m.workerCount(); n != 3 {
		t.Fatalf("%d workers, want 3 (liveness, readiness, sidecar startup)", n)
	}
	for _, k := range []probeKey{{testUID, testContainer, liveness}, {testUID, testContainer, readiness}, {testUID, "sidecar", startup}} {
		if _, ok := r.m.getWorker(k.podUID, k.containerName, k.kind); !ok {
			t.Errorf("no %s worker for %s", k.kind, k.containerName)
		}
	}

	r.m.StopLivenessAndStartup(pod)
	waitFor(t, "liveness and sidecar startup workers to stop", func() bool { return r.m.workerCount() == 1 })
	if _, ok := r.m.getWorker(testUID, testContainer, readiness); !ok {
		t.Error("StopLivenessAndStartup stopped readiness")
	}
	r.m.RemovePod(pod)
	waitFor(t, "all workers to stop", func() bool { return r.m.workerCount() == 0 })
}

func TestRemovePodForgetsResults(t *testing.T) {
	r := newRig(t)
	r.settled()
	pod := testPod(v1.Container{ReadinessProbe: execProbe()})
	r.statuses.set(testUID, running("c1", r.clk.Now(), true))
	r.m.AddPod(pod)
	waitFor(t, "a readiness result", func() bool { return result(r.readiness, "c1") == "Success" })
	r.m.RemovePod(pod)
	waitFor(t, "the worker to stop", func() bool { return r.m.workerCount() == 0 })
	if got := result(r.readiness, "c1"); got != "none" {
		t.Errorf("result %s left after RemovePod", got)
	}
}

func TestCleanupPodsKeepsDesiredPods(t *testing.T) {
	r := newRig(t)
	r.settled()
	keep, drop := testPod(v1.Container{ReadinessProbe: execProbe()}), testPod(v1.Container{ReadinessProbe: execProbe()})
	drop.UID = "other"
	r.m.AddPod(keep)
	r.m.AddPod(drop)
	r.m.CleanupPods(map[types.UID]sets.Empty{testUID: {}})
	waitFor(t, "the other pod's worker to stop", func() bool { return r.m.workerCount() == 1 })
	if _, ok := r.m.getWorker(testUID, testContainer, readiness); !ok {
		t.Error("the desired pod lost its worker")
	}
	r.m.CleanupPods(nil)
	waitFor(t, "all workers to stop", func() bool { return r.m.workerCount() == 0 })
}

func TestWorkerProbesEveryPeriod(t *testing.T) {
	r := newRig(t)
	r.settled()
	p := execProbe()
	p.PeriodSeconds = 5
	pod := testPod(v1.Container{ReadinessProbe: p})
	r.statuses.set(testUID, running("c1", r.clk.Now(), true))
	r.m.AddPod(pod)
	defer r.m.RemovePod(pod)
	waitFor(t, "the first probe", func() bool { return r.runner.callCount() == 1 })
	for want := 2; want <= 4; want++ {
		r.tick(4 * time.Second)
		time.Sleep(10 * time.Millisecond)
		if n := r.runner.callCount(); n != want-1 {
			t.Fatalf("probed %d times before the period ended, want %d", n, want-1)
		}
		r.tick(time.Second)
		waitFor(t, "the next probe", func() bool { return r.runner.callCount() == want })
	}
}

func TestWorkersStartWithJitterAfterRestart(t *testing.T) {
	r := newRig(t) // the manager just started
	p := execProbe()
	p.PeriodSeconds = 10
	pod := testPod(v1.Container{ReadinessProbe: p})
	r.statuses.set(testUID, running("c1", r.clk.Now(), true))
	r.m.AddPod(pod)
	defer r.m.RemovePod(pod)
	waitFor(t, "the worker to wait", r.clk.HasWaiters)
	time.Sleep(10 * time.Millisecond)
	if n := r.runner.callCount(); n != 0 {
		t.Fatalf("probed %d times at once right after start, want a random delay first", n)
	}
	r.clk.Step(10 * time.Second) // the delay is below one period
	waitFor(t, "the first probe", func() bool { return r.runner.callCount() == 1 })
}

// An unready running container with a readiness worker is probed at once; a ready one,
// one that is not running, and one without a worker are left alone.
func TestTriggerReadinessProbes(t *testing.T) {
	r := newRig(t)
	r.settled()
	pod := testPod(v1.Container{ReadinessProbe: execProbe()})
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "plain"})
	r.m.mu.Lock() // a worker registered, but not running: its trigger channel is read by hand
	w := newWorker(r.m, readiness, pod, pod.Spec.Containers[0])
	r.m.workers[probeKey{testUID, testContainer, readiness}] = w
	r.m.mu.Unlock()
	triggered := func(s v1.PodStatus) bool {
		t.Helper()
		plain := s.ContainerStatuses[0]
		plain.Name = "plain"
		s.ContainerStatuses = append(s.ContainerStatuses, plain)
		r.m.TriggerReadinessProbes(pod, &s)
		select {
		case <-w.triggerCh:
			return true
		default:
			return false
		}
	}
	if !triggered(running("c1", epoch, true)) {
		t.Error("an unready running container was not probed at once")
	}
	ready := running("c1", epoch, true)
	ready.ContainerStatuses[0].Ready = true
	if triggered(ready) {
		t.Error("a ready container was probed again")
	}
	if triggered(terminated("c1", 0)) {
		t.Error("a container that is not running was probed")
	}
}

func TestHTTPProbeThroughManager(t *testing.T) {
	var agent, host string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agent, host = r.UserAgent(), r.Host
		switch r.URL.Path {
		case "/moved":
			_, port, _ := net.SplitHostPort(r.Host)
			http.Redirect(w, r, "http://localhost:"+port+"/", http.StatusFound)
		case "/down":
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer s.Close()
	u, _ := url.Parse(s.URL)
	port, _ := strconv.Atoi(u.Port())

	r := newRig(t)
	probe := func(path string) *v1.Probe {
		p := execProbe()
		p.Exec = nil
		p.HTTPGet = &v1.HTTPGetAction{Path: path, Port: intstr.FromString("web")}
		return p
	}
	c := v1.Container{ReadinessProbe: probe("/"), Ports: []v1.ContainerPort{{Name: "web", ContainerPort: int32(port)}}}
	pod := testPod(c)
	r.statuses.set(testUID, running("c1", epoch, true)) // pod IP 127.0.0.1

	r.worker(readiness, pod).doProbe()
	if got := result(r.readiness, "c1"); got != "Success" || agent != "kube-probe/1.37" || host != u.Host {
		t.Errorf("result %s, User-Agent %q, Host %q", got, agent, host)
	}

	pod.Spec.Containers[0].ReadinessProbe = probe("/moved")
	r.worker(readiness, pod).doProbe()
	ev := r.recorder.all()
	if got := result(r.readiness, "c1"); got != "Success" || len(ev) != 1 || ev[0].reason != "ProbeWarning" ||
		!strings.HasPrefix(ev[0].message, "Readiness probe warning: Probe terminated redirects") {
		t.Errorf("redirect to another host: result %s, events %+v", got, ev)
	}

	pod.Spec.Containers[0].ReadinessProbe = probe("/down")
	r.worker(readiness, pod).doProbe()
	ev = r.recorder.all()
	if got := result(r.readiness, "c1"); got != "Failure" || ev[len(ev)-1].message != "Readiness probe failed: HTTP probe failed with statuscode: 503" {
		t.Errorf("503: result %s, events %+v", got, ev)
	}
}

func TestTCPProbeThroughManager(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	r := newRig(t)
	p := execProbe()
	p.Exec, p.TCPSocket = nil, &v1.TCPSocketAction{Port: intstr.FromInt(port)}
	pod := testPod(v1.Container{LivenessProbe: p})
	r.statuses.set(testUID, running("c1", epoch, true))
	w := r.worker(liveness, pod)
	w.doProbe()
	if got := result(r.liveness, "c1"); got != "Success" {
		t.Fatalf("open port: %s", got)
	}
	ln.Close()
	w.doProbe()
	ev := r.recorder.all()
	if got := result(r.liveness, "c1"); got != "Failure" || len(ev) != 1 || !strings.Contains(ev[0].message, "connection refused") {
		t.Errorf("closed port: result %s, events %+v", got, ev)
	}
}

func TestGRPCProbeThroughManager(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := health.NewServer()
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	r := newRig(t)
	p := execProbe()
	p.Exec, p.GRPC = nil, &v1.GRPCAction{Port: int32(ln.Addr().(*net.TCPAddr).Port), Service: ptr.To("")}
	pod := testPod(v1.Container{ReadinessProbe: p})
	r.statuses.set(testUID, running("c1", epoch, true))
	w := r.worker(readiness, pod)
	w.doProbe()
	if got := result(r.readiness, "c1"); got != "Success" {
		t.Fatalf("SERVING: %s", got)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	w.doProbe()
	ev := r.recorder.all()
	if got := result(r.readiness, "c1"); got != "Failure" || len(ev) != 1 ||
		ev[0].message != `Readiness probe failed: service unhealthy (responded with "NOT_SERVING")` {
		t.Errorf("NOT_SERVING: result %s, events %+v", got, ev)
	}
}

func TestExecCommandExpandsStaticEnv(t *testing.T) {
	got := expandStatic([]string{"check", "$(PORT)", "$(FROM_SECRET)", "$$(PORT)"}, []v1.EnvVar{
		{Name: "PORT", Value: "8080"},
		{Name: "FROM_SECRET", ValueFrom: &v1.EnvVarSource{}},
	})
	want := []string{"check", "8080", "", "$(PORT)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("expandStatic = %q, want %q", got, want)
	}
}

func TestMissingHandlerErrors(t *testing.T) {
	r := newRig(t)
	pod := testPod(v1.Container{ReadinessProbe: &v1.Probe{}})
	_, err := r.m.prober.probe(context.Background(), readiness, pod.Spec.Containers[0].ReadinessProbe, pod, &v1.PodStatus{}, &pod.Spec.Containers[0], cid("c1"))
	if err == nil || !strings.Contains(err.Error(), "missing probe handler") {
		t.Errorf("probe without handler: %v", err)
	}
}

func TestContainerDoneForGoodIsNotRepublishedOnEverySync(t *testing.T) {
	// The kubelet calls AddPod on every sync, and every readiness update makes it sync. A
	// worker that exited once its container would never run again would be made anew by the
	// next sync, publish Failure afresh and so cause another sync, for as long as the pod
	// lives.
	r := newRig(t)
	r.settled()
	pod := testPod(v1.Container{ReadinessProbe: execProbe()})
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	r.statuses.set(testUID, terminated("c1", 1)) // another container keeps the pod Running
	for range 3 {
		r.m.AddPod(pod)
		waitFor(t, "the worker to settle", func() bool { return r.m.workerCount() == 0 || r.clk.HasWaiters() })
	}
	waitFor(t, "the first update", func() bool { return r.readinessUpdates.Load() >= 1 })
	time.Sleep(20 * time.Millisecond) // let the drain goroutine count anything else sent
	if n := r.readinessUpdates.Load(); n != 1 {
		t.Errorf("%d readiness updates after 3 syncs of an unchanged pod, want 1", n)
	}
	if got := result(r.readiness, "c1"); got != "Failure" {
		t.Errorf("exited container's readiness is %s, want Failure until the pod is removed", got)
	}
	if n := r.runner.callCount(); n != 0 {
		t.Errorf("an exited container was probed %d times", n)
	}
	r.m.RemovePod(pod)
	waitFor(t, "the worker to stop", func() bool { return r.m.workerCount() == 0 })
	if got := result(r.readiness, "c1"); got != "none" {
		t.Errorf("result %s left after RemovePod", got)
	}
}

func TestStopLivenessAndStartupStopsSidecars(t *testing.T) {
	r := newRig(t)
	r.settled()
	always := v1.ContainerRestartPolicyAlways
	pod := testPod(v1.Container{LivenessProbe: execProbe(), ReadinessProbe: execProbe()})
	pod.Spec.InitContainers = []v1.Container{{Name: "sidecar", RestartPolicy: &always,
		StartupProbe: execProbe(), LivenessProbe: execProbe(), ReadinessProbe: execProbe()}}
	r.m.AddPod(pod)
	defer r.m.RemovePod(pod)
	if n := r.m.workerCount(); n != 5 {
		t.Fatalf("%d workers, want 5", n)
	}
	r.m.StopLivenessAndStartup(pod)
	waitFor(t, "liveness and startup workers to stop", func() bool { return r.m.workerCount() == 2 })
	for _, name := range []string{testContainer, "sidecar"} {
		if _, ok := r.m.getWorker(testUID, name, readiness); !ok {
			t.Errorf("%s: readiness worker stopped", name)
		}
	}
}

func TestRemovedPodsLeaveNoGoroutines(t *testing.T) {
	r := newRig(t)
	before := runtime.NumGoroutine()
	probes := v1.Container{StartupProbe: execProbe(), LivenessProbe: execProbe(), ReadinessProbe: execProbe()}
	var pods []*v1.Pod
	addPods := func(n int) {
		for range n {
			pod := testPod(probes)
			pod.UID = types.UID(fmt.Sprintf("pod-%d", len(pods)))
			r.statuses.set(pod.UID, running(string(pod.UID), r.clk.Now(), false))
			r.m.AddPod(pod)
			pods = append(pods, pod)
		}
	}
	addPods(10) // just after a kubelet start: these wait for their random first probe
	r.settled()
	addPods(10) // these probe at once, then wait for their period
	waitFor(t, "the startup probes", func() bool { return r.runner.callCount() >= 10 })
	if n := r.m.workerCount(); n != 60 {
		t.Fatalf("%d workers, want 60", n)
	}
	for _, pod := range pods[:10] {
		r.m.RemovePod(pod)
	}
	r.m.CleanupPods(nil)
	waitFor(t, "every worker to stop", func() bool { return r.m.workerCount() == 0 })
	waitFor(t, "every worker goroutine to end", func() bool { return runtime.NumGoroutine() <= before })
}
