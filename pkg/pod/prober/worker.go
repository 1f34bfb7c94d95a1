package prober

import (
	"context"
	"math/rand/v2"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/outage"
	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// probeType is the kind of a probe.
type probeType int

const (
	liveness probeType = iota
	readiness
	startup
)

// String is the kind as events and metrics name it.
func (t probeType) String() string {
	switch t {
	case liveness:
		return "Liveness"
	case readiness:
		return "Readiness"
	case startup:
		return "Startup"
	default:
		return "UNKNOWN"
	}
}

// spec returns the container's probe of this kind, nil if it has none.
func (t probeType) spec(c *v1.Container) *v1.Probe {
	switch t {
	case liveness:
		return c.LivenessProbe
	case readiness:
		return c.ReadinessProbe
	case startup:
		return c.StartupProbe
	default:
		return nil
	}
}

// restartGracePeriod: a container that started this long before the manager did was
// already running when the kubelet restarted.
const restartGracePeriod = 10 * time.Second

// worker probes one container with one probe on its period, until stopped or until the pod
// has finished. It follows the container across restarts: a new container ID starts the
// counting afresh.
type worker struct {
	m         *manager
	kind      probeType
	pod       *v1.Pod
	container v1.Container
	// spec is the worker's own copy of the probe, as it is run: API defaults applied and
	// the exec command expanded, once, since neither the probe nor the env can change.
	spec    *v1.Probe
	results results.Manager
	// initialValue is the result a new container has until its first verdict: readiness
	// starts failed, liveness passed, startup unknown.
	initialValue results.Result
	metrics      *workerMetrics
	ctx          context.Context

	stopCh    chan struct{} // buffered: stop never blocks
	triggerCh chan struct{} // buffered: trigger never blocks

	// Owned by the worker goroutine.
	containerID container.ContainerID
	lastResult  results.Result
	resultRun   int // how many probes in a row returned lastResult
	// onHold pauses probing until the container is replaced: set after a liveness failure
	// (the container is about to be killed; probing a dying container is pointless), once
	// the startup probe reached a verdict, and when the container exited for good.
	onHold bool
}

func newWorker(m *manager, kind probeType, pod *v1.Pod, c v1.Container) *worker {
	w := &worker{
		m:         m,
		kind:      kind,
		pod:       pod,
		container: c,
		spec:      runnableSpec(kind.spec(&c), c.Env),
		stopCh:    make(chan struct{}, 1),
		triggerCh: make(chan struct{}, 1),
		ctx:       klog.NewContext(context.Background(), klog.Background().WithValues("pod", klog.KObj(pod), "containerName", c.Name, "probeType", kind)),
	}
	switch kind {
	case liveness:
		w.results, w.initialValue = m.liveness, results.Success
	case readiness:
		w.results, w.initialValue = m.readiness, results.Failure
	case startup:
		w.results, w.initialValue = m.startup, results.Unknown
	}
	w.metrics = m.metrics.forWorker(w)
	return w
}

// runnableSpec copies p with the defaults filled in and the exec command expanded with the
// container's literal env values (as upstream: no downward API, config maps or secrets).
func runnableSpec(p *v1.Probe, env []v1.EnvVar) *v1.Probe {
	p = withDefaults(p.DeepCopy())
	if p.Exec != nil {
		p.Exec.Command = expandStatic(p.Exec.Command, env)
	}
	return p
}

// withDefaults fills in what API defaulting would have, so a pod that skipped it still
// probes sanely (a zero timeout would be no timeout at all).
func withDefaults(p *v1.Probe) *v1.Probe {
	if p.PeriodSeconds <= 0 {
		p.PeriodSeconds = 10
	}
	if p.TimeoutSeconds <= 0 {
		p.TimeoutSeconds = 1
	}
	if p.SuccessThreshold <= 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold <= 0 {
		p.FailureThreshold = 3
	}
	return p
}

// run probes on every tick until doProbe says to stop or stop is called.
func (w *worker) run() {
	period := time.Duration(w.spec.PeriodSeconds) * time.Second
	defer w.cleanUp()

	// After a kubelet restart every worker starts at once; spread their first probes over
	// one period instead of probing everything in the same instant.
	if w.m.clock.Since(w.m.start) < period {
		select {
		case <-w.stopCh:
			return
		case <-w.m.clock.After(time.Duration(rand.Float64() * float64(period))):
		}
	}

	// A timer reset as it fires ticks like a ticker; unlike a ticker it can also be moved
	// when a manual run happens.
	timer := w.m.clock.NewTimer(period)
	defer timer.Stop()
	for w.doProbe() {
		select {
		case <-w.stopCh:
			return
		case <-timer.C():
			timer.Reset(period)
		case <-w.triggerCh:
			// The next periodic probe comes one period after this manual one.
			if !timer.Stop() {
				drain(timer.C())
			}
			timer.Reset(period)
		}
	}
}

func drain(c <-chan time.Time) {
	select {
	case <-c:
	default:
	}
}

// cleanUp forgets everything the worker published. Leaving the manager comes last: a
// successor with the same key can only start after that, and must find nothing of ours.
func (w *worker) cleanUp() {
	w.metrics.delete()
	if !w.containerID.IsEmpty() {
		w.results.Remove(w.containerID)
	}
	w.m.removeWorker(w)
}

// stop asks the worker to exit; it is safe to call more than once.
func (w *worker) stop() {
	select {
	case w.stopCh <- struct{}{}:
	default:
	}
}

// trigger asks for a probe now instead of at the next tick.
func (w *worker) trigger() {
	select {
	case w.triggerCh <- struct{}{}:
	default:
	}
}

// doProbe probes the container once, if it should be probed now, and records the result.
// It returns whether the worker should keep going.
func (w *worker) doProbe() (keepGoing bool) {
	logger := klog.FromContext(w.ctx)
	defer func() {
		// A bug in one probe must not take the node agent down; try again next period.
		if r := recover(); r != nil {
			logger.Error(nil, "Probe worker panicked", "panic", r)
			keepGoing = true
		}
	}()
	status, ok := w.m.statusProvider.GetPodStatus(w.pod.UID)
	if !ok {
		logger.V(3).Info("No status for pod")
		return true // not created yet, or already gone
	}
	if status.Phase == v1.PodFailed || status.Phase == v1.PodSucceeded {
		logger.V(3).Info("Pod is terminated, exiting probe worker", "phase", status.Phase)
		return false
	}
	c, ok := w.containerStatus(&status)
	if !ok {
		logger.V(3).Info("Probe target container not found")
		return true // not created yet
	}
	w.followContainer(c)
	if w.onHold {
		return true
	}
	if c.State.Running == nil {
		w.notRunning(c)
		return true
	}
	if w.pod.DeletionTimestamp != nil && (w.kind == liveness || w.kind == startup) {
		// The pod is going away: pass quietly so nothing restarts it, and stop.
		logger.V(3).Info("Pod deletion requested, setting probe result to success")
		w.results.Set(w.containerID, results.Success, w.pod)
		return false
	}
	if !w.shouldProbe(c) {
		return true
	}
	if w.spec.Exec != nil && outage.Down() {
		// An exec probe runs in the runtime, which is down: no verdict either way, as for
		// a probe that could not run. Network probes go on: they reach the pod directly.
		logger.V(3).Info("Container runtime is down, exec probe skipped")
		return true
	}
	start := w.m.clock.Now()
	result, err := w.m.prober.probe(w.ctx, w.kind, w.spec, w.pod, &status, &w.container, w.containerID)
	if err != nil {
		return true // the probe could not run: no verdict either way
	}
	w.metrics.observe(result, w.m.clock.Since(start))
	w.record(result)
	return true
}

// containerStatus finds the probed container's status with a container ID.
func (w *worker) containerStatus(s *v1.PodStatus) (*v1.ContainerStatus, bool) {
	for _, list := range [][]v1.ContainerStatus{s.ContainerStatuses, s.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == w.container.Name && list[i].ContainerID != "" {
				return &list[i], true
			}
		}
	}
	return nil, false
}

// followContainer switches to a new container instance: the old one's result goes, the
// new one starts from the initial value and a fresh count, and a hold is lifted.
func (w *worker) followContainer(c *v1.ContainerStatus) {
	if w.containerID.String() == c.ContainerID {
		return
	}
	if !w.containerID.IsEmpty() {
		w.results.Remove(w.containerID)
	}
	w.containerID = container.ParseContainerID(c.ContainerID)
	w.lastResult, w.resultRun, w.onHold = results.Unknown, 0, false
	// A container found running from before a kubelet restart keeps whatever it had
	// (nothing, for a fresh results manager) instead of turning unready until probed.
	if !w.runningSinceBeforeRestart(c) {
		w.results.Set(w.containerID, w.initialValue, w.pod)
	}
}

func (w *worker) runningSinceBeforeRestart(c *v1.ContainerStatus) bool {
	if c.State.Running == nil || c.State.Running.StartedAt.IsZero() {
		return false
	}
	return c.State.Running.StartedAt.Time.Before(w.m.start.Add(-restartGracePeriod))
}

// notRunning handles a container that is not running: it fails the probe. A container
// that will not run again puts the worker on hold rather than ending it: the kubelet calls
// AddPod on every sync, so an ended worker would be made anew, publish Failure afresh
// (its predecessor removed the result) and so cause another sync, for as long as the pod
// lives. The held worker ends with the pod.
//
// A container created but not started yet (Waiting) keeps its initial liveness and startup
// result: a status read between CreateContainer and StartContainer must not leave a Failure
// that gets the container killed the moment it runs. Readiness fails, as it should.
func (w *worker) notRunning(c *v1.ContainerStatus) {
	klog.FromContext(w.ctx).V(3).Info("Non-running container probed")
	if c.State.Waiting != nil && w.kind != readiness {
		return
	}
	if !w.containerID.IsEmpty() {
		w.results.Set(w.containerID, results.Failure, w.pod)
	}
	if c.State.Terminated != nil && !container.ContainerShouldRestart(&w.container, &w.pod.Spec, c.State.Terminated.ExitCode) {
		w.onHold = true
	}
}

// shouldProbe applies the initial delay and the startup gate: the startup probe runs until
// the container has started, the others only after.
func (w *worker) shouldProbe(c *v1.ContainerStatus) bool {
	// Durations, not int32 seconds: a start time long ago must not overflow into "not yet".
	if w.m.clock.Since(c.State.Running.StartedAt.Time) < time.Duration(w.spec.InitialDelaySeconds)*time.Second {
		return false
	}
	started := c.Started != nil && *c.Started
	if w.kind == startup {
		return !started
	}
	return started
}

// record counts result and publishes it once the threshold of its kind is reached.
func (w *worker) record(result results.Result) {
	if w.lastResult == result {
		w.resultRun++
	} else {
		w.lastResult, w.resultRun = result, 1
	}
	if (result == results.Failure && w.resultRun < int(w.spec.FailureThreshold)) ||
		(result == results.Success && w.resultRun < int(w.spec.SuccessThreshold)) {
		return // below the threshold: the published result stands
	}
	w.results.Set(w.containerID, result, w.pod)
	if (w.kind == liveness && result == results.Failure) || w.kind == startup {
		// A liveness failure gets the container killed, and a startup verdict is final
		// for this container: probe again only once it has been replaced.
		w.onHold = true
		w.resultRun = 0
	}
}
