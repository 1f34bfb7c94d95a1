package kubelet

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/pod/pleg"
	"github.com/nodelet/nodelet/pkg/pod/podcache"
	"github.com/nodelet/nodelet/pkg/pod/podworkers"
	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/pod/sources"
	"github.com/nodelet/nodelet/pkg/pod/status"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// fakeRuntime implements what the loop calls; the embedded interface panics on the rest.
type fakeRuntime struct {
	container.Runtime
	mu      sync.Mutex
	running []*container.Pod
	killed  []types.UID
	synced  []types.UID
	// lastSynced is the pod each SyncPod was last given, by UID.
	lastSynced map[types.UID]*v1.Pod
	// lastStatus is the runtime status the last SyncPod was given.
	lastStatus *container.PodStatus
	// result is what SyncPod returns.
	result container.PodSyncResult
	// onSync, when set, is called with each SyncPod's context.
	onSync func(ctx context.Context)
	// lists counts GetPods calls.
	lists int
}

func (f *fakeRuntime) Type() string { return "fake" }

func (f *fakeRuntime) GetPods(context.Context, bool) ([]*container.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	return f.running, nil
}

func (f *fakeRuntime) listCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

func (f *fakeRuntime) GetPodStatus(_ context.Context, uid types.UID, name, ns string) (*container.PodStatus, error) {
	return &container.PodStatus{ID: uid, Name: name, Namespace: ns}, nil
}

func (f *fakeRuntime) SyncPod(ctx context.Context, pod *v1.Pod, ps *container.PodStatus, _ []v1.Secret, _ *flowcontrol.Backoff) container.PodSyncResult {
	if f.onSync != nil {
		f.onSync(ctx)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.synced = append(f.synced, pod.UID)
	if f.lastSynced == nil {
		f.lastSynced = map[types.UID]*v1.Pod{}
	}
	f.lastSynced[pod.UID] = pod
	f.lastStatus = ps
	return f.result
}

func (f *fakeRuntime) syncCount(uid types.UID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, u := range f.synced {
		if u == uid {
			n++
		}
	}
	return n
}

func (f *fakeRuntime) KillPod(_ context.Context, _ *v1.Pod, rp container.Pod, _ *int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = append(f.killed, rp.ID)
	var keep []*container.Pod
	for _, p := range f.running {
		if p.ID != rp.ID {
			keep = append(keep, p)
		}
	}
	f.running = keep
	return nil
}

func (f *fakeRuntime) killedUIDs() []types.UID {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]types.UID(nil), f.killed...)
}

type fakeVolumes struct {
	mu       sync.Mutex
	dirs     []types.UID
	cleaned  []types.UID
	listings int
}

func (v *fakeVolumes) SetUpPod(context.Context, *v1.Pod) error { return nil }
func (v *fakeVolumes) CleanupPod(uid types.UID) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.cleaned = append(v.cleaned, uid)
	v.dirs = slices.DeleteFunc(v.dirs, func(d types.UID) bool { return d == uid })
	return nil
}
func (v *fakeVolumes) TearDownPod(types.UID) error { return nil }
func (v *fakeVolumes) PodDirs() ([]types.UID, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.listings++
	return append([]types.UID(nil), v.dirs...), nil
}

type fakeCgroups struct{}

func (fakeCgroups) EnsurePod(*v1.Pod) error  { return nil }
func (fakeCgroups) UpdateQOSCgroups() error  { return nil }
func (fakeCgroups) Pods() map[types.UID]bool { return nil }
func (fakeCgroups) Remove(types.UID) error   { return nil }

// fakeProber tracks which pods are being probed.
type fakeProber struct {
	mu     sync.Mutex
	probed sets.Set[types.UID]
}

func (p *fakeProber) AddPod(pod *v1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probed.Insert(pod.UID)
}
func (p *fakeProber) StopLivenessAndStartup(*v1.Pod)                {}
func (p *fakeProber) TriggerReadinessProbes(*v1.Pod, *v1.PodStatus) {}
func (p *fakeProber) RemovePod(pod *v1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.probed.Delete(pod.UID)
}
func (p *fakeProber) CleanupPods(map[types.UID]sets.Empty) {}
func (p *fakeProber) isProbed(uid types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probed.Has(uid)
}

// fakePLEG records on-demand relist requests; with runningKnown set it answers
// RunningPods with running.
type fakePLEG struct {
	mu           sync.Mutex
	relisted     []types.UID
	eventChan    chan *pleg.PodLifecycleEvent
	runningKnown bool
	running      []*container.Pod
}

func (p *fakePLEG) RunningPods() ([]*container.Pod, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running, p.runningKnown
}

func (p *fakePLEG) Start()                                              {}
func (p *fakePLEG) Stop()                                               {}
func (p *fakePLEG) Watch() chan *pleg.PodLifecycleEvent                 { return p.eventChan }
func (p *fakePLEG) Healthy() (bool, error)                              { return true, nil }
func (p *fakePLEG) UpdateCache(*container.Pod, types.UID) (error, bool) { return nil, true }
func (p *fakePLEG) RequestRelist(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.relisted = append(p.relisted, uid)
}

func (p *fakePLEG) relistRequests(uid types.UID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, u := range p.relisted {
		if u == uid {
			n++
		}
	}
	return n
}

func newTestKubelet(rt *fakeRuntime, vols *fakeVolumes, ready *bool) *Kubelet {
	cache := podcache.New()
	cache.UpdateTime(time.Now().Add(time.Hour))
	return New(Config{SyncFrequency: time.Minute, HousekeepingPeriod: time.Second, MaxPods: 2, GCPeriod: time.Minute}, Deps{
		Runtime: rt, PLEG: &fakePLEG{}, Cache: cache, Status: status.NewManager(nil, nil), Volumes: vols, Cgroups: fakeCgroups{},
		Recorder: record.NewFakeRecorder(100), Liveness: results.NewManager(), Readiness: results.NewManager(),
		Startup: results.NewManager(), Prober: &fakeProber{probed: sets.New[types.UID]()}, SourcesReady: func(sets.Set[string]) bool { return *ready },
	})
}

func testPod(uid, name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: name, Namespace: "ns"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "busybox"}}}}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestHousekeepingWaitsForSourcesThenKillsOrphans(t *testing.T) {
	rt := &fakeRuntime{running: []*container.Pod{
		{ID: "orphan", Name: "old", Namespace: "ns"},
		{ID: "wanted", Name: "keep", Namespace: "ns"},
	}}
	vols := &fakeVolumes{dirs: []types.UID{"gone", "wanted"}}
	ready := false
	k := newTestKubelet(rt, vols, &ready)
	k.handlePodAdditions([]*v1.Pod{testPod("wanted", "keep")})

	k.housekeeper.run(context.Background())
	time.Sleep(50 * time.Millisecond)
	if got := rt.killedUIDs(); len(got) != 0 {
		t.Fatalf("killed %v before every source was seen", got)
	}

	ready = true
	k.housekeeper.run(context.Background())
	eventually(t, "the orphan killed", func() bool { return len(rt.killedUIDs()) == 1 })
	if got := rt.killedUIDs(); got[0] != "orphan" {
		t.Fatalf("killed %v, want only the orphan", got)
	}
	vols.mu.Lock()
	defer vols.mu.Unlock()
	if len(vols.cleaned) != 1 || vols.cleaned[0] != "gone" {
		t.Errorf("cleaned pod dirs %v, want only the unknown pod's", vols.cleaned)
	}
}

func TestAdmissionRejectsPodsBeyondMaxPods(t *testing.T) {
	rt := &fakeRuntime{}
	ready := true
	k := newTestKubelet(rt, &fakeVolumes{}, &ready)
	k.handlePodAdditions([]*v1.Pod{testPod("a", "a"), testPod("b", "b"), testPod("c", "c")})
	st, ok := k.deps.Status.GetPodStatus("c")
	if !ok || st.Phase != v1.PodFailed || st.Reason != "OutOfpods" {
		t.Fatalf("third pod with maxPods 2: status %+v", st)
	}
	eventually(t, "the admitted pods synced", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return len(rt.synced) >= 2
	})
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, uid := range rt.synced {
		if uid == "c" {
			t.Fatal("the rejected pod was synced")
		}
	}
}

func TestRemovedPodIsKilledAndItsDirectoryCleaned(t *testing.T) {
	rt := &fakeRuntime{}
	vols := &fakeVolumes{}
	ready := true
	k := newTestKubelet(rt, vols, &ready)
	pod := testPod("r", "r")
	k.handlePodAdditions([]*v1.Pod{pod})
	eventually(t, "synced", func() bool { rt.mu.Lock(); defer rt.mu.Unlock(); return len(rt.synced) == 1 })
	k.handlePodRemoves([]*v1.Pod{pod})
	eventually(t, "killed", func() bool { return len(rt.killedUIDs()) == 1 })
	eventually(t, "volumes cleaned", func() bool { vols.mu.Lock(); defer vols.mu.Unlock(); return len(vols.cleaned) == 1 })
	if _, ok := k.pods.GetPodByUID("r"); ok {
		t.Error("removed pod still desired")
	}
}

func TestStaticPodRemovedAndRestoredWithSameUIDComesBack(t *testing.T) {
	rt := &fakeRuntime{}
	ready := true
	k := newTestKubelet(rt, &fakeVolumes{}, &ready)
	pod := testPod("static", "web")
	k.handlePodAdditions([]*v1.Pod{pod})
	eventually(t, "first sync", func() bool { return rt.syncCount("static") == 1 })

	// The manifest is removed and restored unchanged: REMOVE then ADD of the same UID.
	k.handlePodRemoves([]*v1.Pod{pod})
	k.handlePodAdditions([]*v1.Pod{pod.DeepCopy()})
	eventually(t, "the old pod killed", func() bool { return len(rt.killedUIDs()) == 1 })
	eventually(t, "the pod running again", func() bool {
		k.housekeeper.run(context.Background())
		return rt.syncCount("static") >= 2
	})
	st, _ := k.PodStatus("static")
	if isTerminalPhase(st.Phase) {
		t.Errorf("the restored pod inherited the old pod's terminal phase %s", st.Phase)
	}
	if !k.deps.Prober.(*fakeProber).isProbed("static") {
		t.Error("the restored pod is not probed")
	}
}

func TestLeftoverContainersOfRejectedPodAreKilled(t *testing.T) {
	rt := &fakeRuntime{running: []*container.Pod{{ID: "c", Name: "c", Namespace: "ns"}}}
	ready := true
	k := newTestKubelet(rt, &fakeVolumes{}, &ready)
	// maxPods is 2: c, left running by a previous nodelet, is rejected this time.
	k.handlePodAdditions([]*v1.Pod{testPod("a", "a"), testPod("b", "b"), testPod("c", "c")})
	if st, _ := k.PodStatus("c"); st.Phase != v1.PodFailed {
		t.Fatalf("c not rejected: %+v", st)
	}
	k.housekeeper.run(context.Background())
	eventually(t, "the rejected pod's containers killed", func() bool { return len(rt.killedUIDs()) == 1 })
	if rt.syncCount("c") != 0 {
		t.Error("the rejected pod was started")
	}
}

func TestSyncPodReportsBackOffOnlyResultsAsBackOffWait(t *testing.T) {
	rt := &fakeRuntime{}
	ready := true
	k := newTestKubelet(rt, &fakeVolumes{}, &ready)
	pod := testPod("b", "b")
	k.pods.AddPod(pod)
	ps := &container.PodStatus{ID: "b", Name: "b", Namespace: "ns"}

	backOff := container.NewSyncResult(container.StartContainer, "c")
	backOff.Fail(container.ErrCrashLoopBackOff, "back-off 10s restarting failed container")
	rt.result = container.PodSyncResult{SyncResults: []*container.SyncResult{backOff}}
	if _, _, err := k.SyncPod(context.Background(), podworkers.SyncPodSync, pod, ps); !errors.Is(err, podworkers.ErrBackOffWait) {
		t.Errorf("back-off only: err %v, want ErrBackOffWait", err)
	}

	failed := container.NewSyncResult(container.StartContainer, "c")
	failed.Fail(container.ErrRunContainer, "boom")
	rt.result = container.PodSyncResult{SyncResults: []*container.SyncResult{backOff, failed}}
	if _, _, err := k.SyncPod(context.Background(), podworkers.SyncPodSync, pod, ps); err == nil || errors.Is(err, podworkers.ErrBackOffWait) {
		t.Errorf("a real failure: err %v, want a sync error", err)
	}
}

// A source counts as ready only once the loop has handled what it sent: the merge marks a
// source seen before its pods reach the loop, and housekeeping in between would kill the
// pods a restarted nodelet is about to adopt (e.g. when the runtime was down and updates
// queued up).
func TestHousekeepingWaitsUntilTheLoopHasHandledEverySource(t *testing.T) {
	rt := &fakeRuntime{running: []*container.Pod{
		{ID: "orphan", Name: "old", Namespace: "ns"},
		{ID: "wanted", Name: "keep", Namespace: "ns"},
	}}
	ready := true
	k := newTestKubelet(rt, &fakeVolumes{}, &ready)
	podConfig := sources.NewConfig(nil)
	k.deps.SourcesReady = podConfig.SeenAllSources
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	podConfig.Channel(ctx, kubetypes.FileSource) <- sources.PodUpdate{
		Op: sources.SET, Source: kubetypes.FileSource, Pods: []*v1.Pod{testPod("wanted", "keep")},
	}
	eventually(t, "the source merged", func() bool { return podConfig.SeenAllSources(sets.New(kubetypes.FileSource)) })

	// The ADD is still queued for the loop.
	k.housekeeper.run(ctx)
	time.Sleep(50 * time.Millisecond)
	if got := rt.killedUIDs(); len(got) != 0 {
		t.Fatalf("killed %v before the loop handled the source's pods", got)
	}

	k.handleConfigUpdate(<-podConfig.Updates())
	k.housekeeper.run(ctx)
	eventually(t, "the orphan killed", func() bool { return len(rt.killedUIDs()) == 1 })
	time.Sleep(50 * time.Millisecond)
	if got := rt.killedUIDs(); len(got) != 1 || got[0] != "orphan" {
		t.Fatalf("killed %v, want only the orphan", got)
	}
}
