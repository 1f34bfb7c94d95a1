package prober

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
)

const (
	testUID       = types.UID("pod-uid")
	testContainer = "app"
)

// fakeRunner answers RunInContainer with whatever was last set, and counts calls.
type fakeRunner struct {
	mu    sync.Mutex
	out   []byte
	err   error
	calls int

	lastCmd     []string
	lastTimeout time.Duration
}

func (r *fakeRunner) RunInContainer(_ context.Context, _ container.ContainerID, cmd []string, timeout time.Duration) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	r.lastCmd, r.lastTimeout = cmd, timeout
	return r.out, r.err
}

// last returns the command and timeout of the last call.
func (r *fakeRunner) last() ([]string, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastCmd, r.lastTimeout
}

func (r *fakeRunner) set(out string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.out, r.err = []byte(out), err
}

// pass and fail make the next exec probes exit 0 or 1.
func (r *fakeRunner) pass()              { r.set("ok", nil) }
func (r *fakeRunner) fail(output string) { r.set(output, &cri.ExecExitError{Code: 1}) }

func (r *fakeRunner) callCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// fakeStatuses is a StatusProvider holding one status per pod.
type fakeStatuses struct {
	mu sync.Mutex
	m  map[types.UID]v1.PodStatus
}

func (f *fakeStatuses) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.m[uid]
	return *s.DeepCopy(), ok
}

func (f *fakeStatuses) set(uid types.UID, s v1.PodStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[uid] = s
}

// event is one recorded event with the object it is about.
type event struct {
	ref                        *v1.ObjectReference
	eventType, reason, message string
}

// fakeRecorder keeps every event.
type fakeRecorder struct {
	mu     sync.Mutex
	events []event
}

func (r *fakeRecorder) Event(obj runtime.Object, eventType, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref, _ := obj.(*v1.ObjectReference)
	r.events = append(r.events, event{ref, eventType, reason, message})
}

func (r *fakeRecorder) Eventf(obj runtime.Object, eventType, reason, format string, args ...any) {
	r.Event(obj, eventType, reason, fmt.Sprintf(format, args...))
}

func (r *fakeRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventType, reason, format string, args ...any) {
	r.Event(obj, eventType, reason, fmt.Sprintf(format, args...))
}

func (r *fakeRecorder) all() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

// rig is a manager on a fake clock, runner, status provider and recorder.
type rig struct {
	t                            *testing.T
	clk                          *testingclock.FakeClock
	runner                       *fakeRunner
	statuses                     *fakeStatuses
	recorder                     *fakeRecorder
	liveness, readiness, startup results.Manager
	reg                          *prometheus.Registry
	m                            *manager
	// readinessUpdates counts the updates the readiness results manager sent.
	readinessUpdates atomic.Int64
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newRig(t *testing.T) *rig {
	r := &rig{
		t:         t,
		clk:       testingclock.NewFakeClock(epoch),
		runner:    &fakeRunner{},
		statuses:  &fakeStatuses{m: map[types.UID]v1.PodStatus{}},
		recorder:  &fakeRecorder{},
		liveness:  results.NewManager(),
		readiness: results.NewManager(),
		startup:   results.NewManager(),
		reg:       prometheus.NewRegistry(),
	}
	r.runner.pass()
	r.m = newManager(r.runner, r.liveness, r.readiness, r.startup, r.recorder, r.statuses, r.reg, r.clk)
	// Nothing else reads the updates in these tests; keep the channels from filling up.
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	for _, rm := range []results.Manager{r.liveness, r.readiness, r.startup} {
		go func() {
			for {
				select {
				case <-rm.Updates():
					if rm == r.readiness {
						r.readinessUpdates.Add(1)
					}
				case <-done:
					return
				}
			}
		}()
	}
	return r
}

// execProbe is an exec probe with thresholds of 1 unless changed.
func execProbe() *v1.Probe {
	return &v1.Probe{
		ProbeHandler:     v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"check"}}},
		PeriodSeconds:    1,
		TimeoutSeconds:   1,
		SuccessThreshold: 1,
		FailureThreshold: 1,
	}
}

func testPod(c v1.Container) *v1.Pod {
	c.Name = testContainer
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: testUID},
		Spec:       v1.PodSpec{Containers: []v1.Container{c}, RestartPolicy: v1.RestartPolicyAlways},
	}
}

// running is the pod's status with the container running since startedAt.
func running(id string, startedAt time.Time, started bool) v1.PodStatus {
	return v1.PodStatus{
		Phase: v1.PodRunning,
		PodIP: "127.0.0.1",
		ContainerStatuses: []v1.ContainerStatus{{
			Name:        testContainer,
			ContainerID: "containerd://" + id,
			State:       v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(startedAt)}},
			Started:     &started,
		}},
	}
}

func terminated(id string, exitCode int32) v1.PodStatus {
	return v1.PodStatus{
		Phase: v1.PodRunning,
		ContainerStatuses: []v1.ContainerStatus{{
			Name:        testContainer,
			ContainerID: "containerd://" + id,
			State:       v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: exitCode}},
		}},
	}
}

func cid(id string) container.ContainerID { return container.ContainerID{Type: "containerd", ID: id} }

// worker returns a worker for the pod's container without starting its goroutine.
func (r *rig) worker(kind probeType, pod *v1.Pod) *worker {
	return newWorker(r.m, kind, pod, pod.Spec.Containers[0])
}

// result returns the published result of the container, or "none".
func result(rm results.Manager, id string) string {
	res, ok := rm.Get(cid(id))
	if !ok {
		return "none"
	}
	return res.String()
}
