package kuberuntime

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

func runningPodOf(t *testing.T, env *testEnv, pod *v1.Pod) container.Pod {
	t.Helper()
	return container.ConvertPodStatusToRunningPod(env.m.Type(), env.podStatus(t, pod))
}

func startPod(t *testing.T, env *testEnv, pod *v1.Pod) {
	t.Helper()
	if r := syncPod(t, env, pod, nil); r.Error() != nil {
		t.Fatalf("SyncPod: %v", r.Error())
	}
}

func containerID(t *testing.T, env *testEnv, pod *v1.Pod, name string) string {
	t.Helper()
	cs := env.podStatus(t, pod).FindContainerStatusByName(name)
	if cs == nil {
		t.Fatalf("no container %s", name)
	}
	return cs.ID.ID
}

func TestKillPodPreStopConsumesGrace(t *testing.T) {
	env := newTestEnv(t)
	app := ctr("app")
	app.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"drain"}}}}
	pod := newPod("grace", app, ctr("plain"))
	pod.Spec.TerminationGracePeriodSeconds = ptrInt64(30)
	startPod(t, env, pod)

	var hookCalls atomic.Int32
	env.rt.execSync = func(_ context.Context, _ string, cmd []string) ([]byte, []byte, error) {
		hookCalls.Add(1)
		env.clock.Step(7 * time.Second) // the hook takes 7 s
		return nil, nil, nil
	}
	if err := env.m.KillPod(context.Background(), pod, runningPodOf(t, env, pod), nil); err != nil {
		t.Fatalf("KillPod: %v", err)
	}
	if hookCalls.Load() != 1 {
		t.Fatalf("preStop ran %d times", hookCalls.Load())
	}
	if got, _ := env.rt.stopTimeout(containerID(t, env, pod, "app")); got != 23 {
		t.Errorf("app stopped with grace %d, want 30-7=23", got)
	}
	if got, _ := env.rt.stopTimeout(containerID(t, env, pod, "plain")); got != 30 {
		t.Errorf("plain stopped with grace %d, want 30", got)
	}
	status := env.podStatus(t, pod)
	if len(status.RunningContainerStatuses()) != 0 || status.SandboxStatuses[0].State.String() != "SANDBOX_NOTREADY" {
		t.Errorf("pod not stopped: %+v", status)
	}
	if !hasEvent(env.events(), "Normal Killing Stopping container app") {
		t.Error("no Killing event")
	}
}

func TestKillPodPreStopOverrunsGrace(t *testing.T) {
	env := newTestEnv(t)
	app := ctr("app")
	app.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"hang"}}}}
	pod := newPod("overrun", app)
	pod.Spec.TerminationGracePeriodSeconds = ptrInt64(10)
	startPod(t, env, pod)

	hookCancelled := make(chan struct{})
	env.rt.execSync = func(ctx context.Context, _ string, _ []string) ([]byte, []byte, error) {
		<-ctx.Done() // hangs until the grace period runs out
		close(hookCancelled)
		return nil, nil, ctx.Err()
	}
	done := make(chan error)
	go func() { done <- env.m.KillPod(context.Background(), pod, runningPodOf(t, env, pod), nil) }()
	waitUntil(t, env.clock.HasWaiters)
	env.clock.Step(10 * time.Second)
	if err := <-done; err != nil {
		t.Fatalf("KillPod: %v", err)
	}
	<-hookCancelled
	if got, _ := env.rt.stopTimeout(containerID(t, env, pod, "app")); got != minimumGracePeriodInSeconds {
		t.Errorf("stopped with grace %d, want the %d s minimum", got, minimumGracePeriodInSeconds)
	}
	// The cancelled hook reports its failure in the background.
	var events []string
	waitUntil(t, func() bool {
		events = append(events, env.events()...)
		return hasEvent(events, "Warning FailedPreStopHook PreStopHook failed")
	})
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestKillContainerGracePeriods(t *testing.T) {
	probeGrace := ptrInt64(4)
	cases := []struct {
		name     string
		mutate   func(p *v1.Pod)
		reason   killReason
		override *int64
		want     int64
	}{
		{name: "pod terminationGracePeriodSeconds", mutate: func(p *v1.Pod) {}, want: 30},
		{name: "deletion grace period wins", mutate: func(p *v1.Pod) { p.DeletionGracePeriodSeconds = ptrInt64(12) }, want: 12},
		{name: "liveness probe grace period", reason: reasonLivenessProbe, mutate: func(p *v1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &v1.Probe{TerminationGracePeriodSeconds: probeGrace}
		}, want: 4},
		{name: "startup probe grace period", reason: reasonStartupProbe, mutate: func(p *v1.Pod) {
			p.Spec.Containers[0].StartupProbe = &v1.Probe{TerminationGracePeriodSeconds: probeGrace}
		}, want: 4},
		{name: "probe grace ignored for other reasons", reason: reasonUnknown, mutate: func(p *v1.Pod) {
			p.Spec.Containers[0].LivenessProbe = &v1.Probe{TerminationGracePeriodSeconds: probeGrace}
		}, want: 30},
		{name: "no grace period set: minimum", mutate: func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = nil }, want: 2},
		{name: "override", mutate: func(p *v1.Pod) {}, override: ptrInt64(7), want: 7},
		{name: "override below minimum", mutate: func(p *v1.Pod) {}, override: ptrInt64(0), want: 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := newTestEnv(t)
			pod := newPod("g", ctr("app"))
			pod.Spec.TerminationGracePeriodSeconds = ptrInt64(30)
			startPod(t, env, pod)
			c.mutate(pod)
			id := container.BuildContainerID(env.m.Type(), containerID(t, env, pod, "app"))
			if err := env.m.killContainer(context.Background(), pod, id, "app", "", c.reason, c.override, nil); err != nil {
				t.Fatal(err)
			}
			if got, _ := env.rt.stopTimeout(id.ID); got != c.want {
				t.Errorf("grace %d, want %d", got, c.want)
			}
		})
	}
}

func TestKillPodWithoutSpecRestoresFromLabels(t *testing.T) {
	env := newTestEnv(t)
	app := ctr("app")
	app.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"bye"}}}}
	pod := newPod("orphan", app)
	pod.Spec.TerminationGracePeriodSeconds = ptrInt64(20)
	startPod(t, env, pod)
	var ran []string
	env.rt.execSync = func(_ context.Context, _ string, cmd []string) ([]byte, []byte, error) {
		ran = append(ran, cmd...)
		return nil, nil, nil
	}
	if err := env.m.KillPod(context.Background(), nil, runningPodOf(t, env, pod), nil); err != nil {
		t.Fatalf("KillPod(nil pod): %v", err)
	}
	if len(ran) != 1 || ran[0] != "bye" {
		t.Errorf("preStop restored from annotations did not run: %v", ran)
	}
	if got, _ := env.rt.stopTimeout(containerID(t, env, pod, "app")); got != 20 {
		t.Errorf("grace %d, want 20 from the annotations", got)
	}
}

func TestKillPodSidecarsStopLast(t *testing.T) {
	env := newTestEnv(t)
	always := v1.ContainerRestartPolicyAlways
	side := ctr("side")
	side.RestartPolicy = &always
	pod := newPod("sidecars", ctr("app"))
	pod.Spec.InitContainers = []v1.Container{side}
	pod.Spec.TerminationGracePeriodSeconds = ptrInt64(30)
	startPod(t, env, pod) // starts the sidecar
	startPod(t, env, pod) // sidecar running: starts app

	var order []string
	stopped := map[string]string{
		containerID(t, env, pod, "app"):  "app",
		containerID(t, env, pod, "side"): "side",
	}
	ordered := &orderRecorder{fakeRuntime: env.rt, onStop: func(id string) { order = append(order, stopped[id]) }}
	env.m.runtime = ordered
	if err := env.m.KillPod(context.Background(), pod, runningPodOf(t, env, pod), nil); err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != "app" || order[1] != "side" {
		t.Fatalf("stop order %v, want [app side]", order)
	}
}

// orderRecorder notes StopContainer calls in order.
type orderRecorder struct {
	*fakeRuntime
	onStop func(id string)
}

func (o *orderRecorder) StopContainer(ctx context.Context, id string, timeout int64) error {
	o.fakeRuntime.Lock()
	o.onStop(id)
	o.fakeRuntime.Unlock()
	return o.fakeRuntime.StopContainer(ctx, id, timeout)
}

func ptrInt64(v int64) *int64 { return &v }
