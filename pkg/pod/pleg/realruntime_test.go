//go:build e2e

// Tests against a real containerd. Run with, for containerd 2.x (container events):
//
//	CONTAINER_RUNTIME_ENDPOINT=unix:///run/nodelet-dev2/containerd.sock go test -tags e2e -run Real -v ./pkg/pod/pleg/
//
// and with the containerd 1.6 rig (no events: relisting only) the same way. The tests
// only touch the pods they create.
package pleg

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pod/podcache"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

type realPLEG struct {
	rs     internalapi.RuntimeService
	m      *kuberuntime.Manager
	cache  podcache.Cache
	events chan *PodLifecycleEvent
}

func newReal(t *testing.T) *realPLEG {
	t.Helper()
	ep := os.Getenv("CONTAINER_RUNTIME_ENDPOINT")
	if ep == "" {
		t.Skip("CONTAINER_RUNTIME_ENDPOINT not set")
	}
	ctx := context.Background()
	rs, err := cri.NewRemoteRuntimeService(ctx, ep, 10*time.Second, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	is, err := cri.NewRemoteImageService(ctx, ep, 10*time.Second, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m, err := kuberuntime.NewManager(ctx, kuberuntime.Options{
		RuntimeService: rs, ImageService: is, Recorder: record.NewFakeRecorder(1000),
		RootDir: dir + "/root", PodLogsDir: dir + "/pods", LegacyLogSymlinkDir: dir + "/containers",
		NodeName: "plegtest",
	})
	if err != nil {
		t.Fatal(err)
	}
	return &realPLEG{rs: rs, m: m, cache: podcache.New(), events: make(chan *PodLifecycleEvent, ChannelCapacity)}
}

func (r *realPLEG) pod(t *testing.T) *v1.Pod {
	uid := types.UID(fmt.Sprintf("pleg-real-%d", time.Now().UnixNano()))
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "killed", Namespace: "pleg-real", UID: uid},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyAlways, TerminationGracePeriodSeconds: new(int64),
			Containers: []v1.Container{{Name: "app", Image: "docker.io/library/busybox:1.36",
				ImagePullPolicy: v1.PullIfNotPresent, Command: []string{"sleep", "3600"},
				TerminationMessagePolicy: v1.TerminationMessageReadFile, TerminationMessagePath: "/dev/termination-log"}},
		},
	}
}

func (r *realPLEG) cleanup(t *testing.T, pod *v1.Pod) {
	ctx := context.Background()
	status, err := r.m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	zero := int64(0)
	_ = r.m.KillPod(ctx, pod, container.ConvertPodStatusToRunningPod(r.m.Type(), status), &zero)
	for _, c := range status.ContainerStatuses {
		_ = r.m.DeleteContainer(ctx, c.ID)
	}
	for _, s := range status.SandboxStatuses {
		_ = r.rs.RemovePodSandbox(ctx, s.Id)
	}
}

// sync runs SyncPod on the cached status, as a pod worker woken by the PLEG would.
func (r *realPLEG) sync(t *testing.T, pod *v1.Pod) {
	t.Helper()
	status, err := r.cache.Get(pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	if res := r.m.SyncPod(context.Background(), pod, status, nil, flowcontrol.NewBackOff(10*time.Second, time.Minute)); res.Error() != nil {
		t.Fatal(res.Error())
	}
}

// waitEvent waits for an event of typ for uid, skipping others (the runtime may hold
// other pods).
func (r *realPLEG) waitEvent(t *testing.T, uid types.UID, typ PodLifeCycleEventType, within time.Duration) (*PodLifecycleEvent, time.Time) {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case e := <-r.events:
			if e.ID == uid && e.Type == typ {
				return e, time.Now()
			}
		case <-timeout:
			t.Fatalf("no %s event for pod %s within %v", typ, uid, within)
		}
	}
}

// pidOf reads the container's main process from the runtime's verbose status.
func (r *realPLEG) pidOf(t *testing.T, id string) int {
	t.Helper()
	resp, err := r.rs.ContainerStatus(context.Background(), id, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("no pid in the container's info: %v", err)
	}
	return info.Pid
}

// killAndRestart starts a pod, kills its container from outside and measures how long
// the PLEG takes to report it dead, and a sync on that to start it again.
// afterStop, if set, says how long after the runtime's stop event for the container the
// PLEG reported it dead.
func (r *realPLEG) killAndRestart(t *testing.T, rounds int, afterStop func(id string, seenAt time.Time)) (seen, restarted []time.Duration) {
	pod := r.pod(t)
	t.Cleanup(func() { r.cleanup(t, pod) })
	status, err := r.m.GetPodStatus(context.Background(), pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if res := r.m.SyncPod(context.Background(), pod, status, nil, nil); res.Error() != nil {
		t.Fatal(res.Error())
	}
	r.waitAppRunning(t, pod)
	for range rounds {
		id := r.appContainer(t, pod)
		pid := r.pidOf(t, id)
		killed := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, at := r.waitEvent(t, pod.UID, ContainerDied, 5*time.Second)
		seen = append(seen, at.Sub(killed))
		if afterStop != nil {
			afterStop(id, at)
		}
		r.sync(t, pod)
		restarted = append(restarted, time.Since(killed))
		r.waitEvent(t, pod.UID, ContainerStarted, 5*time.Second)
		r.waitAppRunning(t, pod)
	}
	return seen, restarted
}

// waitAppRunning waits until the cache shows the app container running.
func (r *realPLEG) waitAppRunning(t *testing.T, pod *v1.Pod) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.runningApp(pod) == "" {
		if time.Now().After(deadline) {
			t.Fatal("the app container is not running in the cache after 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *realPLEG) runningApp(pod *v1.Pod) string {
	s, err := r.cache.Get(pod.UID)
	if err != nil {
		return ""
	}
	for _, c := range s.ContainerStatuses {
		if c.Name == "app" && c.State == container.ContainerStateRunning {
			return c.ID.ID
		}
	}
	return ""
}

// appContainer returns the running app container's ID from the cache.
func (r *realPLEG) appContainer(t *testing.T, pod *v1.Pod) string {
	t.Helper()
	id := r.runningApp(pod)
	if id == "" {
		t.Fatal("no running app container in the cache")
	}
	return id
}

func TestRealEventedSeesKilledContainer(t *testing.T) {
	r := newReal(t)
	stamps := &stopStamps{RuntimeService: r.rs, stopped: map[string]time.Time{}}
	p := NewEventedPLEG(r.m, stamps, r.events, r.cache, clock.RealClock{})
	p.Start()
	defer p.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for !p.streaming.Load() {
		if time.Now().After(deadline) {
			t.Skip("the runtime's container events did not flow within 5s (containerd 1.6 has none)")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var fromStop []time.Duration
	seen, restarted := r.killAndRestart(t, 5, func(id string, at time.Time) {
		fromStop = append(fromStop, at.Sub(stamps.stoppedAt(id)))
	})
	t.Logf("evented: kill → ContainerDied %v; runtime's stop event → ContainerDied %v; kill → restarted %v", seen, fromStop, restarted)
	// The time from the kill to the runtime's stop event is containerd's; what nodelet
	// adds after it must be small.
	for i, d := range fromStop {
		if d > 100*time.Millisecond {
			t.Errorf("round %d: ContainerDied %v after the runtime's stop event, want within 100ms", i, d)
		}
	}
}

func TestRealRelistingSeesKilledContainer(t *testing.T) {
	r := newReal(t)
	p := NewGenericPLEG(r.m, r.events, DefaultRelistDuration(), r.cache, clock.RealClock{})
	p.Start()
	defer p.Stop()
	seen, restarted := r.killAndRestart(t, 3, nil)
	t.Logf("relisting: kill → ContainerDied %v; kill → restarted %v", seen, restarted)
}

// stopStamps passes the runtime's events on, noting when the runtime stamped each
// container's stop event.
type stopStamps struct {
	internalapi.RuntimeService
	mu      sync.Mutex
	stopped map[string]time.Time
}

func (s *stopStamps) GetContainerEvents(ctx context.Context, ch chan *runtimeapi.ContainerEventResponse, connected func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	mid := make(chan *runtimeapi.ContainerEventResponse)
	go func() {
		for ev := range mid {
			if ev.ContainerEventType == runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT {
				s.mu.Lock()
				s.stopped[ev.ContainerId] = time.Unix(0, ev.CreatedAt)
				s.mu.Unlock()
			}
			ch <- ev
		}
	}()
	defer close(mid)
	return s.RuntimeService.GetContainerEvents(ctx, mid, connected)
}

func (s *stopStamps) stoppedAt(id string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped[id]
}
