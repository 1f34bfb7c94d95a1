package kuberuntime

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/pod/allocation"
	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

const testImage = "docker.io/library/busybox:1.36"

// fakeRuntime wraps the cri-api fake to script ExecSync and record StopContainer timeouts.
type fakeRuntime struct {
	*critest.FakeRuntimeService

	mu           sync.Mutex
	stopTimeouts map[string]int64
	// execSync, when set, replaces the fake's ExecSync.
	execSync func(ctx context.Context, id string, cmd []string) ([]byte, []byte, error)
	// updates records UpdateContainerResources calls, in order; log, when set, gets a
	// line per call too. updateErr fails them.
	updates   []containerUpdate
	log       *[]string
	updateErr error
}

// containerUpdate is one UpdateContainerResources call.
type containerUpdate struct {
	id        string
	resources *runtimeapi.LinuxContainerResources
}

func (f *fakeRuntime) UpdateContainerResources(ctx context.Context, id string, r *runtimeapi.ContainerResources) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.updateErr != nil {
		return f.updateErr
	}
	f.updates = append(f.updates, containerUpdate{id: id, resources: r.GetLinux()})
	if f.log != nil {
		*f.log = append(*f.log, fmt.Sprintf("update %s mem=%d quota=%d shares=%d", id, r.GetLinux().GetMemoryLimitInBytes(), r.GetLinux().GetCpuQuota(), r.GetLinux().GetCpuShares()))
	}
	return f.FakeRuntimeService.UpdateContainerResources(ctx, id, r)
}

func (f *fakeRuntime) takeUpdates() []containerUpdate {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.updates
	f.updates = nil
	return out
}

func (f *fakeRuntime) StopContainer(ctx context.Context, id string, timeout int64) error {
	f.mu.Lock()
	f.stopTimeouts[id] = timeout
	f.mu.Unlock()
	return f.FakeRuntimeService.StopContainer(ctx, id, timeout)
}

func (f *fakeRuntime) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	if f.execSync != nil {
		return f.execSync(ctx, id, cmd)
	}
	return f.FakeRuntimeService.ExecSync(ctx, id, cmd, timeout)
}

func (f *fakeRuntime) stopTimeout(id string) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.stopTimeouts[id]
	return t, ok
}

type testEnv struct {
	m     *Manager
	rt    *fakeRuntime
	img   *critest.FakeImageService
	rec   *record.FakeRecorder
	clock *testingclock.FakeClock
	dir   string
}

func newTestEnv(t *testing.T, mutate ...func(*Options)) *testEnv {
	t.Helper()
	dir := t.TempDir()
	env := &testEnv{
		rt:    &fakeRuntime{FakeRuntimeService: critest.NewFakeRuntimeService(), stopTimeouts: map[string]int64{}},
		img:   critest.NewFakeImageService(),
		rec:   record.NewFakeRecorder(1000),
		clock: testingclock.NewFakeClock(time.Now()),
		dir:   dir,
	}
	env.img.SetFakeImages([]string{testImage})
	opts := Options{
		RuntimeService:      env.rt,
		ImageService:        env.img,
		Recorder:            env.rec,
		RootDir:             dir + "/root",
		PodLogsDir:          dir + "/pods",
		LegacyLogSymlinkDir: dir + "/containers",
		NodeName:            "node1",
		Clock:               env.clock,
	}
	for _, f := range mutate {
		f(&opts)
	}
	m, err := NewManager(context.Background(), opts)
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	env.m = m
	return env
}

// events drains the recorded events.
func (e *testEnv) events() []string {
	var out []string
	for {
		select {
		case ev := <-e.rec.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func hasEvent(events []string, prefix string) bool {
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			return true
		}
	}
	return false
}

func (e *testEnv) podStatus(t *testing.T, pod *v1.Pod) *container.PodStatus {
	t.Helper()
	s, err := e.m.GetPodStatus(context.Background(), pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		t.Fatalf("GetPodStatus: %v", err)
	}
	return s
}

// exitContainer marks the newest instance of the named container exited with code.
func (e *testEnv) exitContainer(t *testing.T, pod *v1.Pod, name string, code int32, finishedAt time.Time) {
	t.Helper()
	e.rt.Lock()
	defer e.rt.Unlock()
	var newest *critest.FakeContainer
	for _, c := range e.rt.Containers {
		if c.Labels["io.kubernetes.pod.uid"] == string(pod.UID) && c.Metadata.Name == name &&
			(newest == nil || c.CreatedAt > newest.CreatedAt) {
			newest = c
		}
	}
	if newest == nil {
		t.Fatalf("no container %q", name)
	}
	newest.State = runtimeapi.ContainerState_CONTAINER_EXITED
	newest.ExitCode = code
	newest.FinishedAt = finishedAt.UnixNano()
}

func newPod(name string, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid")},
		Spec:       v1.PodSpec{Containers: containers, RestartPolicy: v1.RestartPolicyAlways},
	}
}

func ctr(name string) v1.Container {
	return v1.Container{Name: name, Image: testImage, ImagePullPolicy: v1.PullIfNotPresent}
}

// pureManager is a Manager good enough for computePodActions.
func pureManager() *Manager {
	return &Manager{runtimeName: "fake", liveness: results.NewManager(), startup: results.NewManager(), actuated: allocation.NewMemoryStore()}
}
