//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/node/volumes"
	"github.com/nodelet/nodelet/pkg/pod/prober"
	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/pod/status"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/images"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

const (
	probeServerImage = "nodelet.local/probe-server:1.0"
	grpcHealthImage  = "nodelet.local/grpc-health:1.0"
)

// probeRig is the runtime manager and the probe manager on the real containerd, wired
// as the kubelet loop will wire them: liveness and startup results go to the runtime
// manager, and the probe workers read a pod status that is regenerated from the runtime
// every 200 ms (the status manager's job), with Started and Ready from UpdatePodStatus.
type probeRig struct {
	*rig
	pm                           prober.Manager
	liveness, readiness, startup results.Manager
	events                       *probeEventLog
	reg                          *prometheus.Registry
	statuses                     *probeStatusCache

	mu               sync.Mutex
	livenessFailures map[string]int // container ID -> Failure updates seen
}

func newProbeRig(t *testing.T) *probeRig {
	t.Helper()
	ctx := context.Background()
	rs, err := cri.NewRemoteRuntimeService(ctx, endpoint(t), 3*time.Second, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	is, err := cri.NewRemoteImageService(ctx, endpoint(t), 3*time.Second, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pr := &probeRig{
		liveness: results.NewManager(), readiness: results.NewManager(), startup: results.NewManager(),
		events: &probeEventLog{}, reg: prometheus.NewRegistry(),
		livenessFailures: map[string]int{},
	}
	root := t.TempDir()
	pr.rig = &rig{rs: rs, volumes: volumes.NewManager(root), recorder: record.NewFakeRecorder(1000), logsDir: t.TempDir()}
	pr.m, err = kuberuntime.NewManager(ctx, kuberuntime.Options{
		RuntimeService: rs, ImageService: is, Recorder: pr.recorder,
		LivenessManager: pr.liveness, StartupManager: pr.startup,
		Volumes: pr.volumes, RootDir: root, PodLogsDir: pr.logsDir,
		LegacyLogSymlinkDir: t.TempDir(), NodeName: "e2e-node", CPUCFSQuota: true,
		ImageOptions: images.Options{SerializeImagePulls: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	pr.statuses = &probeStatusCache{pods: map[types.UID]*v1.Pod{}, statuses: map[types.UID]v1.PodStatus{}}
	pr.pm = prober.NewManager(pr.m, pr.liveness, pr.readiness, pr.startup, pr.events, pr.statuses, pr.reg)

	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); wg.Wait() })
	wg.Add(2)
	go func() { defer wg.Done(); pr.consumeUpdates(done) }()
	go func() { defer wg.Done(); pr.refreshStatuses(done) }()
	return pr
}

// consumeUpdates reads the results managers' updates, as the kubelet loop does (a full
// channel would block the workers), and counts liveness failures.
func (pr *probeRig) consumeUpdates(done <-chan struct{}) {
	for {
		select {
		case u := <-pr.liveness.Updates():
			if u.Result == results.Failure {
				pr.mu.Lock()
				pr.livenessFailures[u.ContainerID.ID]++
				pr.mu.Unlock()
			}
		case <-pr.readiness.Updates():
		case <-pr.startup.Updates():
		case <-done:
			return
		}
	}
}

func (pr *probeRig) refreshStatuses(done <-chan struct{}) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			for _, pod := range pr.statuses.podList() {
				pr.refresh(pod)
			}
		case <-done:
			return
		}
	}
}

// refresh regenerates the pod's API status from the runtime and the probe results, as the
// kubelet does, and lets the probe manager probe an unready container at once.
func (pr *probeRig) refresh(pod *v1.Pod) {
	ps, err := pr.m.GetPodStatus(context.Background(), pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return
	}
	old, ok := pr.statuses.GetPodStatus(pod.UID)
	if !ok {
		old = pod.Status
	}
	s := status.GenerateAPIPodStatus(pod, ps, old, status.GenerateOptions{
		HostIPs: []string{"127.0.0.1"}, Readiness: pr.readiness, Startup: pr.startup})
	pr.pm.TriggerReadinessProbes(pod, &s)
	pr.statuses.set(pod.UID, s)
}

// start runs the pod until its containers run, then hands it to the probe manager. The
// pod and its probe workers are removed when the test ends.
func (pr *probeRig) start(t *testing.T, pod *v1.Pod) {
	t.Helper()
	pr.track(t, pod)
	names := make([]string, len(pod.Spec.Containers))
	for i, c := range pod.Spec.Containers {
		names[i] = c.Name
	}
	pr.syncUntil(t, pod, defaultBackOff(), 60*time.Second, func(s *container.PodStatus) bool { return running(s, names...) })
	// Workers first, as the kubelet adds them before it generates the pod's status: a
	// status made without them would count a container with a startup probe as started.
	pr.pm.AddPod(pod)
	pr.statuses.add(pod)
	pr.refresh(pod)
	t.Cleanup(func() {
		pr.pm.RemovePod(pod)
		pr.statuses.remove(pod.UID)
	})
}

// containerStatus is the probed container's current API status.
func (pr *probeRig) containerStatus(t *testing.T, pod *v1.Pod, name string) v1.ContainerStatus {
	t.Helper()
	s, _ := pr.statuses.GetPodStatus(pod.UID)
	for _, cs := range s.ContainerStatuses {
		if cs.Name == name {
			return cs
		}
	}
	t.Fatalf("no status for container %s", name)
	return v1.ContainerStatus{}
}

// result is the container's current result in rm, or "none".
func (pr *probeRig) result(t *testing.T, rm results.Manager, pod *v1.Pod, name string) string {
	t.Helper()
	r, ok := rm.Get(container.ParseContainerID(pr.containerStatus(t, pod, name).ContainerID))
	if !ok {
		return "none"
	}
	return r.String()
}

// exec runs a command in the container, as a test step.
func (pr *probeRig) exec(t *testing.T, pod *v1.Pod, name string, cmd ...string) {
	t.Helper()
	id := container.ParseContainerID(pr.containerStatus(t, pod, name).ContainerID)
	if out, err := pr.m.RunInContainer(context.Background(), id, cmd, 10*time.Second); err != nil {
		t.Fatalf("exec %v: %v: %s", cmd, err, out)
	}
}

// probeCount is prober_probe_total for the pod's probes of one type and result.
func (pr *probeRig) probeCount(t *testing.T, pod *v1.Pod, probeType, result string) float64 {
	t.Helper()
	families, err := pr.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != "prober_probe_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["pod_uid"] == string(pod.UID) && labels["probe_type"] == probeType && labels["result"] == result {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// probeWait polls cond every 50 ms for up to d.
func probeWait(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// probeStatusCache is the StatusProvider: the last status generated per pod.
type probeStatusCache struct {
	mu       sync.Mutex
	pods     map[types.UID]*v1.Pod
	statuses map[types.UID]v1.PodStatus
}

func (c *probeStatusCache) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.statuses[uid]
	return *s.DeepCopy(), ok
}

func (c *probeStatusCache) set(uid types.UID, s v1.PodStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, tracked := c.pods[uid]; tracked {
		c.statuses[uid] = s
	}
}

func (c *probeStatusCache) add(pod *v1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pods[pod.UID] = pod
}

func (c *probeStatusCache) remove(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pods, uid)
	delete(c.statuses, uid)
}

func (c *probeStatusCache) podList() []*v1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*v1.Pod
	for _, p := range c.pods {
		out = append(out, p)
	}
	return out
}

// probeEventLog records the probe manager's events.
type probeEventLog struct {
	mu       sync.Mutex
	messages []string
}

func (l *probeEventLog) Event(_ runtime.Object, eventType, reason, message string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.messages = append(l.messages, eventType+" "+reason+" "+message)
}

func (l *probeEventLog) Eventf(obj runtime.Object, eventType, reason, format string, args ...any) {
	l.Event(obj, eventType, reason, fmt.Sprintf(format, args...))
}

func (l *probeEventLog) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventType, reason, format string, args ...any) {
	l.Event(obj, eventType, reason, fmt.Sprintf(format, args...))
}

// has reports an event containing s.
func (l *probeEventLog) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.messages {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

func (l *probeEventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.messages, "\n")
}

// imagePod is a one-container pod running image.
func imagePod(name, image string, ports ...v1.ContainerPort) *v1.Pod {
	pod := newPod(name, v1.RestartPolicyAlways, nil)
	c := &pod.Spec.Containers[0]
	c.Image, c.Command, c.Ports = image, nil, ports
	return pod
}

func execProbeSpec(cmd ...string) *v1.Probe {
	return &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: cmd}},
		PeriodSeconds: 1, TimeoutSeconds: 2, SuccessThreshold: 1, FailureThreshold: 1,
	}
}

func handlerProbeSpec(h v1.ProbeHandler) *v1.Probe {
	return &v1.Probe{ProbeHandler: h, PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1}
}

// A shell that exits at once on SIGTERM, so kills do not wait for the grace period.
const probeShellPrelude = `trap "exit 0" TERM; `

func TestProbeHTTPReadinessFlipsWhenReadyFileAppears(t *testing.T) {
	pr := newProbeRig(t)
	pod := imagePod("probe-http", probeServerImage, v1.ContainerPort{Name: "http", ContainerPort: 8080})
	pod.Spec.Containers[0].ReadinessProbe = handlerProbeSpec(v1.ProbeHandler{
		HTTPGet: &v1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")},
	})
	pr.start(t, pod)

	probeWait(t, 10*time.Second, "a failed readiness probe", func() bool {
		return pr.events.has("Warning Unhealthy Readiness probe failed: HTTP probe failed with statuscode: 503")
	})
	if cs := pr.containerStatus(t, pod, "c0"); cs.Ready || !ptr.Deref(cs.Started, false) {
		t.Fatalf("before /tmp/ready: ready=%v started=%v, want not ready but started", cs.Ready, ptr.Deref(cs.Started, false))
	}
	pr.exec(t, pod, "c0", "touch", "/tmp/ready")
	probeWait(t, 5*time.Second, "readiness after touching /tmp/ready", func() bool {
		return pr.containerStatus(t, pod, "c0").Ready
	})
	if got := pr.result(t, pr.readiness, pod, "c0"); got != "Success" {
		t.Errorf("readiness result %s, want Success", got)
	}
}

func TestProbeExecLivenessFailureRestartsContainerOncePerCycle(t *testing.T) {
	pr := newProbeRig(t)
	pod := newPod("probe-live", v1.RestartPolicyAlways, []string{"sh", "-c", probeShellPrelude + "touch /tmp/healthy; while true; do sleep 1; done"})
	p := execProbeSpec("cat", "/tmp/healthy")
	p.FailureThreshold = 2
	pod.Spec.Containers[0].LivenessProbe = p
	pr.start(t, pod)
	backOff := flowcontrol.NewBackOff(time.Second, 2*time.Second)
	restarts := func(s *container.PodStatus) int { return s.FindContainerStatusByName("c0").RestartCount }

	passes := 0.0 // liveness passes counted so far
	for cycle := 1; cycle <= 2; cycle++ {
		probeWait(t, 10*time.Second, "a passed liveness probe of the current container", func() bool {
			return pr.probeCount(t, pod, "Liveness", "successful") > passes
		})
		before := pr.containerStatus(t, pod, "c0").ContainerID
		pr.exec(t, pod, "c0", "rm", "/tmp/healthy")
		probeWait(t, 10*time.Second, "a liveness Failure", func() bool {
			pr.mu.Lock()
			defer pr.mu.Unlock()
			return pr.livenessFailures[container.ParseContainerID(before).ID] == 1
		})
		pr.syncUntil(t, pod, backOff, 30*time.Second, func(s *container.PodStatus) bool {
			return running(s, "c0") && restarts(s) == cycle
		})
		// Keep syncing: the new container passes, so nothing more is restarted.
		deadline := time.Now().Add(4 * time.Second)
		pr.syncUntil(t, pod, backOff, 10*time.Second, func(*container.PodStatus) bool { return time.Now().After(deadline) })
		if n := restarts(pr.status(t, pod)); n != cycle {
			t.Fatalf("cycle %d: %d restarts, want %d", cycle, n, cycle)
		}
		if got := pr.result(t, pr.liveness, pod, "c0"); got != "Success" {
			t.Errorf("cycle %d: the restarted container's liveness is %s, want Success", cycle, got)
		}
		passes = pr.probeCount(t, pod, "Liveness", "successful")
	}
	kills := 0
	for len(pr.recorder.Events) > 0 {
		if strings.Contains(<-pr.recorder.Events, "Container c0 failed liveness probe, will be restarted") {
			kills++
		}
	}
	if kills != 2 {
		t.Errorf("%d liveness kills recorded, want 2", kills)
	}
	if !pr.events.has("Warning Unhealthy Liveness probe failed: cat: can't open '/tmp/healthy'") {
		t.Errorf("no liveness failure event with the command's output; events:\n%s", pr.events)
	}
}

func TestProbeStartupDelaysLiveness(t *testing.T) {
	pr := newProbeRig(t)
	pod := newPod("probe-startup", v1.RestartPolicyAlways, []string{"sh", "-c", "sleep 4; touch /tmp/started; " + probeShellPrelude + "while true; do sleep 1; done"})
	c := &pod.Spec.Containers[0]
	c.StartupProbe = execProbeSpec("cat", "/tmp/started")
	c.StartupProbe.FailureThreshold = 30
	// Liveness fails at once without /tmp/started: it must not run before startup passed.
	c.LivenessProbe = execProbeSpec("cat", "/tmp/started")
	pr.start(t, pod)

	if cs := pr.containerStatus(t, pod, "c0"); ptr.Deref(cs.Started, false) {
		t.Fatal("started before the startup probe passed")
	}
	probeWait(t, 15*time.Second, "the startup probe to pass", func() bool {
		return ptr.Deref(pr.containerStatus(t, pod, "c0").Started, false)
	})
	startedAt := pr.containerStatus(t, pod, "c0").State.Running.StartedAt.Time
	if took := time.Since(startedAt); took < 3500*time.Millisecond {
		t.Errorf("started %v after the container started, want the 4 s the startup probe waits", took)
	}
	probeWait(t, 5*time.Second, "liveness probes after startup", func() bool {
		return pr.probeCount(t, pod, "Liveness", "successful") >= 2
	})
	if n := pr.probeCount(t, pod, "Liveness", "failed"); n != 0 {
		t.Errorf("liveness failed %v times: it ran before startup passed", n)
	}
	if n := pr.probeCount(t, pod, "Startup", "failed"); n < 2 {
		t.Errorf("startup failed %v times, want a few during the first 4 s", n)
	}
}

func TestProbeHangingExecTimesOutAsFailure(t *testing.T) {
	pr := newProbeRig(t)
	pod := newPod("probe-hang", v1.RestartPolicyAlways, []string{"sh", "-c", probeShellPrelude + "while true; do sleep 1; done"})
	p := execProbeSpec("sleep", "30")
	p.TimeoutSeconds, p.PeriodSeconds = 1, 2
	pod.Spec.Containers[0].LivenessProbe = p
	pr.start(t, pod)
	began := time.Now()
	probeWait(t, 15*time.Second, "a liveness Failure from the timeout", func() bool {
		return pr.result(t, pr.liveness, pod, "c0") == "Failure"
	})
	if took := time.Since(began); took > 8*time.Second {
		t.Errorf("failure after %v: the probe waited for the command, not the 1 s timeout", took)
	}
	if !pr.events.has(`Warning Unhealthy Liveness probe failed: command "sleep 30" timed out`) {
		t.Errorf("no timeout event; events:\n%s", pr.events)
	}
}

func TestProbeTCPOpenAndClosedPorts(t *testing.T) {
	pr := newProbeRig(t)
	pod := imagePod("probe-tcp", probeServerImage, v1.ContainerPort{Name: "tcp", ContainerPort: 9000})
	c := &pod.Spec.Containers[0]
	c.ReadinessProbe = handlerProbeSpec(v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromString("tcp")}})
	c.LivenessProbe = handlerProbeSpec(v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(9001)}})
	pr.start(t, pod)
	probeWait(t, 10*time.Second, "ready through the open TCP port", func() bool {
		return pr.containerStatus(t, pod, "c0").Ready
	})
	probeWait(t, 10*time.Second, "a liveness Failure on the closed port", func() bool {
		return pr.result(t, pr.liveness, pod, "c0") == "Failure"
	})
	if !pr.events.has("Warning Unhealthy Liveness probe failed: dial tcp") || !pr.events.has("connection refused") {
		t.Errorf("no connection-refused event; events:\n%s", pr.events)
	}
}

func TestProbeGRPCServingThenNotServing(t *testing.T) {
	pr := newProbeRig(t)
	pod := imagePod("probe-grpc", grpcHealthImage)
	pod.Spec.Containers[0].ReadinessProbe = handlerProbeSpec(v1.ProbeHandler{
		GRPC: &v1.GRPCAction{Port: 9090, Service: ptr.To("probe")},
	})
	pr.start(t, pod)
	probeWait(t, 10*time.Second, "ready through gRPC SERVING", func() bool {
		return pr.containerStatus(t, pod, "c0").Ready
	})
	pr.exec(t, pod, "c0", "touch", "/tmp/not-serving")
	probeWait(t, 5*time.Second, "unready after NOT_SERVING", func() bool {
		return !pr.containerStatus(t, pod, "c0").Ready
	})
	if !pr.events.has(`Warning Unhealthy Readiness probe failed: service unhealthy (responded with "NOT_SERVING")`) {
		t.Errorf("no NOT_SERVING event; events:\n%s", pr.events)
	}
}
