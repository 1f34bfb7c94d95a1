// Package podstartup traces each pod's start-up. The loop starts a trace when it admits a
// pod and passes it down through the sync's context; the runtime and image managers mark
// where each phase begins and ends (admission, volume set-up, sandbox creation, image
// pulls, container creation and start, init containers) and the trace ends when the pod
// is first ready (readiness is the last phase), or has finished without becoming ready.
// A finished trace of a pod whose sandbox this nodelet created is exported as
// nodelet_pod_startup_* histograms and one "Pod started" log line.
//
// The same bookkeeping gives upstream's start-up SLI for API pods (pod creation to all
// containers running as seen on the watch, less image pulls and init containers):
// kubelet_pod_start_sli_duration_seconds and kubelet_pod_start_total_duration_seconds.
//
// A trace lives only while its pod starts: it goes when both its start-up and its SLI are
// recorded, when the pod is forgotten, or when housekeeping finds the pod no longer desired.
package podstartup

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/metrics"
)

// Phase is one part of a pod's start-up; its value is the histogram's phase label.
type Phase string

const (
	Admission       Phase = "admission"
	Volumes         Phase = "volumes"
	Sandbox         Phase = "sandbox"
	ImagePull       Phase = "image_pull"
	ContainerCreate Phase = "container_create"
	ContainerStart  Phase = "container_start"
	// InitContainers is the time init containers (not sidecars) ran, as the runtime saw it.
	InitContainers Phase = "init_containers"
	// Readiness runs from the last container start to the pod's Ready condition.
	Readiness Phase = "readiness"
)

// phases lists the phases in start-up order, with their key in the log line.
var phases = []struct {
	phase  Phase
	logKey string
}{
	{Admission, "admission"}, {Volumes, "volumes"}, {Sandbox, "sandbox"}, {ImagePull, "imagePull"},
	{ContainerCreate, "containerCreate"}, {ContainerStart, "containerStart"},
	{InitContainers, "initContainers"}, {Readiness, "readiness"},
}

// Tracker holds the traces of the pods that are starting, by UID. It is safe for
// concurrent use.
type Tracker struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	pods  map[types.UID]*Trace
	// firstNetworkPodSeen: kubelet_first_network_pod_start_sli_duration_seconds is set once.
	firstNetworkPodSeen bool
}

// NewTracker returns an empty tracker reading time from c.
func NewTracker(c clock.PassiveClock) *Tracker {
	return &Tracker{clock: c, pods: map[types.UID]*Trace{}}
}

// Trace is one pod's start-up. All its methods do nothing on a nil *Trace, so code that
// marks phases needs no checks when no trace is running.
type Trace struct {
	t   *Tracker
	pod klog.ObjectRef
	uid types.UID
	// seen is when the kubelet first saw the pod (its config.seen annotation).
	seen  time.Time
	spent map[Phase]time.Duration
	// sandboxCreated: this nodelet created the pod's sandbox, so this is a pod start (a
	// pod adopted after a restart of nodelet is not traced).
	sandboxCreated bool
	// lastStart is when the latest container start ended; readiness is counted from there.
	lastStart time.Time
	// startupDone: the start-up has been recorded (or was not one to record).
	startupDone bool

	// The SLI of an API pod (upstream's pod start-up latency tracker).
	sliDone  bool
	pulls    []interval
	inits    map[string]interval
	created  time.Time
	hostNet  bool
	stateful bool
}

type interval struct{ start, end time.Time }

// Start begins tracing pod's start-up, from when the kubelet first saw it; a pod already
// traced keeps its trace. It returns the trace.
func (t *Tracker) Start(pod *v1.Pod) *Trace {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr, ok := t.pods[pod.UID]; ok {
		return tr
	}
	tr := &Trace{
		t: t, pod: klog.KObj(pod), uid: pod.UID, seen: firstSeen(pod, now),
		spent: map[Phase]time.Duration{}, inits: map[string]interval{},
		created: pod.CreationTimestamp.Time, hostNet: pod.Spec.HostNetwork, stateful: isStateful(pod),
		// Upstream measures the SLI of API pods that are schedulable and not started yet; a
		// pod without a source annotation is not one (unlike kubetypes.IsStaticPod's view).
		sliDone: pod.Annotations[kubetypes.ConfigSourceAnnotationKey] != kubetypes.APIServerSource ||
			!pod.Status.StartTime.IsZero() || isUnschedulable(pod),
	}
	t.pods[pod.UID] = tr
	return tr
}

// firstSeen is the pod's FirstSeen time; now when it has none.
func firstSeen(pod *v1.Pod, now time.Time) time.Time {
	if ts, ok := FirstSeen(pod); ok {
		return ts
	}
	return now
}

// Forget drops the pod's trace (the pod was rejected, removed or is being stopped).
func (t *Tracker) Forget(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.pods, uid)
}

// Retain drops the traces of pods keep does not list.
func (t *Tracker) Retain(keep map[types.UID]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for uid := range t.pods {
		if !keep[uid] {
			delete(t.pods, uid)
		}
	}
}

// Len is how many traces are held.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pods)
}

// starting returns the pod's trace while its start-up is being traced.
func (t *Tracker) starting(uid types.UID) *Trace {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tr := t.pods[uid]; tr != nil && !tr.startupDone {
		return tr
	}
	return nil
}

// Starting reports whether the pod's start-up is being traced.
func (t *Tracker) Starting(uid types.UID) bool { return t.starting(uid) != nil }

type ctxKey struct{}

// WithTrace returns ctx carrying the pod's trace while its start-up is traced, else ctx.
func (t *Tracker) WithTrace(ctx context.Context, uid types.UID) context.Context {
	if tr := t.starting(uid); tr != nil {
		return context.WithValue(ctx, ctxKey{}, tr)
	}
	return ctx
}

// FromContext returns the trace ctx carries, or nil.
func FromContext(ctx context.Context) *Trace {
	tr, _ := ctx.Value(ctxKey{}).(*Trace)
	return tr
}

// Begin marks the start of a phase; calling the returned function marks its end. A
// phase that happens several times (one image pull per container) adds up.
func (tr *Trace) Begin(p Phase) (end func()) {
	if tr == nil {
		return func() {}
	}
	start := tr.t.clock.Now()
	return func() {
		now := tr.t.clock.Now()
		tr.t.mu.Lock()
		defer tr.t.mu.Unlock()
		tr.spent[p] += now.Sub(start)
		switch p {
		case Sandbox:
			tr.sandboxCreated = true
		case ImagePull:
			tr.pulls = append(tr.pulls, interval{start, now})
		case ContainerStart:
			tr.lastStart = now
		}
	}
}

// InitContainerRan records an init container (not a sidecar) that ran from started to
// finished, as the runtime reports it; each container instance counts once.
func (tr *Trace) InitContainerRan(containerID string, started, finished time.Time) {
	if tr == nil || started.IsZero() || !finished.After(started) {
		return
	}
	tr.t.mu.Lock()
	defer tr.t.mu.Unlock()
	if _, ok := tr.inits[containerID]; ok {
		return
	}
	tr.inits[containerID] = interval{started, finished}
	tr.spent[InitContainers] += finished.Sub(started)
}

// StatusChanged ends the pod's start-up when status shows it ready, or finished without
// becoming ready; the kubelet calls it with the pod's status as the status manager holds it.
func (t *Tracker) StatusChanged(uid types.UID, status *v1.PodStatus) {
	ready := isReady(status)
	if !ready && status.Phase != v1.PodSucceeded && status.Phase != v1.PodFailed {
		return
	}
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := t.pods[uid]
	if tr == nil || tr.startupDone {
		return
	}
	tr.startupDone = true
	if ready && !tr.lastStart.IsZero() && now.After(tr.lastStart) {
		tr.spent[Readiness] = now.Sub(tr.lastStart)
	}
	if status.Phase == v1.PodSucceeded || status.Phase == v1.PodFailed {
		tr.sliDone = true // upstream stops tracking terminal pods
	}
	tr.record(now, ready)
	t.dropIfDone(tr)
}

// record exports a finished start-up: histograms and one log line. Callers hold t.mu.
func (tr *Trace) record(end time.Time, ready bool) {
	if !tr.sandboxCreated {
		klog.V(4).InfoS("Pod start-up not recorded: its sandbox was not created by this nodelet", "pod", tr.pod, "podUID", tr.uid)
		return
	}
	total := end.Sub(tr.seen)
	metrics.PodStartupDuration.Observe(total.Seconds())
	kv := []any{"pod", tr.pod, "podUID", tr.uid, "ready", ready, "total", round(total)}
	accounted := time.Duration(0)
	for _, ph := range phases {
		d := tr.spent[ph.phase]
		accounted += d
		kv = append(kv, ph.logKey, round(d))
		if ph.phase != Readiness || ready {
			metrics.PodStartupPhaseDuration.WithLabelValues(string(ph.phase)).Observe(d.Seconds())
		}
	}
	// other is what no phase covers: waiting for the pod worker, the PLEG, the API.
	kv = append(kv, "other", round(max(total-accounted, 0)))
	klog.InfoS("Pod started", kv...)
}

func round(d time.Duration) time.Duration { return d.Round(time.Microsecond) }

// dropIfDone forgets a trace once nothing more is to be recorded. Callers hold t.mu.
func (t *Tracker) dropIfDone(tr *Trace) {
	if tr.startupDone && tr.sliDone {
		delete(t.pods, tr.uid)
	}
}

func isReady(status *v1.PodStatus) bool {
	for _, c := range status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// FirstSeen is when the kubelet first saw the pod, from its config.seen annotation.
func FirstSeen(pod *v1.Pod) (time.Time, bool) {
	s, ok := pod.Annotations[kubetypes.ConfigFirstSeenAnnotationKey]
	if !ok {
		return time.Time{}, false
	}
	ts, err := time.Parse(time.RFC3339Nano, s)
	return ts, err == nil
}
