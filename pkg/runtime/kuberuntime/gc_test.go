package kuberuntime

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

type podStates struct{ deleted, terminated map[types.UID]bool }

func (p podStates) IsPodDeleted(uid types.UID) bool    { return p.deleted[uid] }
func (p podStates) IsPodTerminated(uid types.UID) bool { return p.terminated[uid] }

// gcCtr describes a fake container: pod, name, attempt, state, age.
type gcCtr struct {
	pod, name string
	attempt   uint32
	state     runtimeapi.ContainerState
	age       time.Duration
}

func (c gcCtr) id() string { return c.pod + "/" + c.name + "/" + string(rune('0'+c.attempt)) }

type gcSb struct {
	pod     string
	attempt uint32
	ready   bool
	age     time.Duration
}

func (s gcSb) id() string { return s.pod + "-sb" + string(rune('0'+s.attempt)) }

func TestGarbageCollect(t *testing.T) {
	exitedState, runningState, unknownState := runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_UNKNOWN
	old := time.Hour
	cases := []struct {
		name            string
		containers      []gcCtr
		sandboxes       []gcSb
		policy          container.GCPolicy
		allSourcesReady bool
		evictNonDeleted bool
		deleted         []string
		terminated      []string
		wantContainers  []string
		wantSandboxes   []string
	}{
		{
			name: "keep MaxPerPodContainer newest dead instances, never running ones",
			containers: []gcCtr{
				{"p", "a", 0, exitedState, old}, {"p", "a", 1, exitedState, old}, {"p", "a", 2, exitedState, old}, {"p", "a", 3, runningState, old},
			},
			policy:         container.GCPolicy{MaxPerPodContainer: 1, MaxContainers: -1},
			wantContainers: []string{"p/a/2", "p/a/3"},
		},
		{
			name:           "containers younger than MinAge stay",
			containers:     []gcCtr{{"p", "a", 0, exitedState, time.Second}, {"p", "a", 1, exitedState, time.Second}},
			policy:         container.GCPolicy{MinAge: time.Minute, MaxPerPodContainer: 0, MaxContainers: -1},
			wantContainers: []string{"p/a/0", "p/a/1"},
		},
		{
			name:           "negative limits keep everything",
			containers:     []gcCtr{{"p", "a", 0, exitedState, old}, {"p", "a", 1, exitedState, old}},
			policy:         container.GCPolicy{MaxPerPodContainer: -1, MaxContainers: -1},
			wantContainers: []string{"p/a/0", "p/a/1"},
		},
		{
			name: "MaxContainers overall: equal share per unit, then oldest first",
			containers: []gcCtr{
				{"p", "a", 0, exitedState, old}, {"p", "a", 1, exitedState, old},
				{"q", "b", 0, exitedState, old}, {"q", "b", 1, exitedState, old},
				{"r", "c", 0, exitedState, 2 * old},
			},
			policy:         container.GCPolicy{MaxPerPodContainer: -1, MaxContainers: 2},
			wantContainers: []string{"p/a/1", "q/b/1"},
		},
		{
			name:            "deleted pod loses every dead container once sources are ready",
			containers:      []gcCtr{{"p", "a", 0, exitedState, old}, {"q", "a", 0, exitedState, old}},
			policy:          container.GCPolicy{MaxPerPodContainer: 1, MaxContainers: -1},
			allSourcesReady: true, deleted: []string{"p"},
			wantContainers: []string{"q/a/0"},
		},
		{
			name:            "deleted pod kept while sources are not ready",
			containers:      []gcCtr{{"p", "a", 0, exitedState, old}},
			policy:          container.GCPolicy{MaxPerPodContainer: 1, MaxContainers: -1},
			allSourcesReady: false, deleted: []string{"p"},
			wantContainers: []string{"p/a/0"},
		},
		{
			name:            "terminated pod only with evictNonDeletedPods",
			containers:      []gcCtr{{"p", "a", 0, exitedState, old}, {"q", "a", 0, exitedState, old}},
			policy:          container.GCPolicy{MaxPerPodContainer: 1, MaxContainers: -1},
			allSourcesReady: true, evictNonDeleted: true, terminated: []string{"p"},
			wantContainers: []string{"q/a/0"},
		},
		{
			name:           "unknown containers are stopped, then removed",
			containers:     []gcCtr{{"p", "a", 0, unknownState, old}, {"p", "a", 1, exitedState, old}},
			policy:         container.GCPolicy{MaxPerPodContainer: 1, MaxContainers: -1},
			wantContainers: []string{"p/a/1"},
		},
		{
			name: "dead sandboxes: newest of a live pod stays, ready and non-empty ones stay",
			sandboxes: []gcSb{
				{"p", 0, false, old}, {"p", 1, false, old}, {"p", 2, true, old},
				{"q", 0, false, old}, {"q", 1, false, old},
				{"r", 0, false, old},
			},
			containers:     []gcCtr{{"r", "a", 0, exitedState, time.Second}},
			policy:         container.GCPolicy{MaxPerPodContainer: -1, MaxContainers: -1},
			wantContainers: []string{"r/a/0"},
			wantSandboxes:  []string{"p-sb2", "q-sb1", "r-sb0"},
		},
		{
			name:            "deleted pod loses even its newest dead sandbox",
			sandboxes:       []gcSb{{"p", 0, false, old}, {"p", 1, false, old}, {"q", 0, false, old}},
			policy:          container.GCPolicy{MaxPerPodContainer: -1, MaxContainers: -1},
			allSourcesReady: true, deleted: []string{"p"},
			wantSandboxes: []string{"q-sb0"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			states := podStates{deleted: set(c.deleted), terminated: set(c.terminated)}
			env := newTestEnv(t, func(o *Options) { o.PodState = states })
			now := time.Now()
			var sbs []*critest.FakePodSandbox
			for _, s := range c.sandboxes {
				state := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
				if s.ready {
					state = runtimeapi.PodSandboxState_SANDBOX_READY
				}
				sbs = append(sbs, &critest.FakePodSandbox{PodSandboxStatus: runtimeapi.PodSandboxStatus{
					Id: s.id(), State: state, CreatedAt: now.Add(-s.age).UnixNano(),
					Metadata: &runtimeapi.PodSandboxMetadata{Name: s.pod, Namespace: "ns", Uid: s.pod, Attempt: s.attempt},
				}})
			}
			env.rt.SetFakeSandboxes(sbs)
			var cs []*critest.FakeContainer
			for _, fc := range c.containers {
				cs = append(cs, &critest.FakeContainer{
					SandboxID: fc.pod + "-sb0",
					ContainerStatus: runtimeapi.ContainerStatus{
						Id: fc.id(), State: fc.state, CreatedAt: now.Add(-fc.age).UnixNano(),
						Metadata: &runtimeapi.ContainerMetadata{Name: fc.name, Attempt: fc.attempt},
						Labels:   map[string]string{"io.kubernetes.pod.uid": fc.pod, "io.kubernetes.pod.name": fc.pod, "io.kubernetes.container.name": fc.name},
						Image:    &runtimeapi.ImageSpec{Image: testImage},
					},
				})
			}
			env.rt.SetFakeContainers(cs)

			if err := env.m.GarbageCollect(context.Background(), c.policy, c.allSourcesReady, c.evictNonDeleted); err != nil {
				t.Fatal(err)
			}
			if got := ids(env.rt.Containers); !reflect.DeepEqual(got, sorted(c.wantContainers)) {
				t.Errorf("containers left %v, want %v", got, sorted(c.wantContainers))
			}
			if c.sandboxes != nil {
				if got := ids(env.rt.Sandboxes); !reflect.DeepEqual(got, sorted(c.wantSandboxes)) {
					t.Errorf("sandboxes left %v, want %v", got, sorted(c.wantSandboxes))
				}
			}
		})
	}
}

func TestGarbageCollectPodLogDirs(t *testing.T) {
	states := podStates{deleted: set([]string{"gone-uid"})}
	env := newTestEnv(t, func(o *Options) { o.PodState = states })
	logs := filepath.Join(env.dir, "pods")
	for _, d := range []string{"ns_gone_gone-uid", "ns_live_live-uid"} {
		if err := os.MkdirAll(filepath.Join(logs, d, "app"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A dangling legacy link of a container the runtime no longer knows.
	links := filepath.Join(env.dir, "containers")
	if err := os.MkdirAll(links, 0o755); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(links, "gone_ns_app-0123456789ab.log")
	if err := os.Symlink(filepath.Join(logs, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	gc := container.GCPolicy{MaxPerPodContainer: -1, MaxContainers: -1}

	if err := env.m.GarbageCollect(context.Background(), gc, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(logs, "ns_gone_gone-uid")); err != nil {
		t.Fatal("log dir removed before all sources were ready")
	}
	if err := env.m.GarbageCollect(context.Background(), gc, true, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(logs, "ns_gone_gone-uid")); !os.IsNotExist(err) {
		t.Error("log dir of the deleted pod kept")
	}
	if _, err := os.Stat(filepath.Join(logs, "ns_live_live-uid")); err != nil {
		t.Error("log dir of a live pod removed")
	}
	if _, err := os.Lstat(dangling); !os.IsNotExist(err) {
		t.Error("dangling legacy symlink kept")
	}
}

func TestRemoveContainerRemovesLogsAndSymlink(t *testing.T) {
	env := newTestEnv(t)
	pod := newPod("rm", ctr("app"))
	startPod(t, env, pod)
	id := containerID(t, env, pod, "app")
	logFile := filepath.Join(env.dir, "app.log")
	for _, f := range []string{logFile, logFile + ".20240101-000000"} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env.rt.Lock()
	env.rt.Containers[id].LogPath = logFile
	env.rt.Unlock()
	link := env.m.legacyLogSymlink(id, "app", pod.Name, pod.Namespace)
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(logFile, link); err != nil {
		t.Fatal(err)
	}
	env.exitContainer(t, pod, "app", 0, time.Now())
	if err := env.m.DeleteContainer(context.Background(), container.BuildContainerID(env.m.Type(), id)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{logFile, logFile + ".20240101-000000", link} {
		if _, err := os.Lstat(f); !os.IsNotExist(err) {
			t.Errorf("%s kept", f)
		}
	}
	if _, ok := env.rt.Containers[id]; ok {
		t.Error("container kept")
	}
}

func set(names []string) map[types.UID]bool {
	m := map[types.UID]bool{}
	for _, n := range names {
		m[types.UID(n)] = true
	}
	return m
}

func ids[T any](m map[string]T) []string {
	out := []string{}
	for id := range m {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func sorted(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}
