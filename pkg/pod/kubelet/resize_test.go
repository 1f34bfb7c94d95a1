package kubelet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/nodelet/nodelet/pkg/pod/podworkers"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// cpuAdmitter admits pods while their CPU requests fit in capacity millicores, with
// upstream's message.
type cpuAdmitter struct{ capacity int64 }

func podCPU(p *v1.Pod) int64 {
	requests := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	return requests.Cpu().MilliValue()
}

func (a cpuAdmitter) Admit(pod *v1.Pod, others []*v1.Pod) (bool, string, string) {
	var used int64
	for _, p := range others {
		if p.UID != pod.UID {
			used += podCPU(p)
		}
	}
	requested := podCPU(pod)
	if used+requested > a.capacity {
		return false, "OutOfcpu", fmt.Sprintf("Node didn't have enough resource: cpu, requested: %d, used: %d, capacity: %d", requested, used, a.capacity)
	}
	return true, "", ""
}

func (a cpuAdmitter) AdmitResize(pod *v1.Pod, allocated []*v1.Pod) (bool, string, string) {
	return a.Admit(pod, allocated)
}

// fakeResize says whether a resize is in progress.
type fakeResize struct {
	mu         sync.Mutex
	inProgress bool
}

func (f *fakeResize) IsPodResizeInProgress(*v1.Pod, *container.PodStatus) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inProgress
}

func (f *fakeResize) ActuatedContainerResources(types.UID, string) (v1.ResourceRequirements, bool) {
	return v1.ResourceRequirements{}, false
}

func resizeKubelet(t *testing.T) (*Kubelet, *fakeRuntime, *fakeResize, *record.FakeRecorder) {
	t.Helper()
	rt := &fakeRuntime{}
	ready := true
	deps := newTestKubelet(rt, &fakeVolumes{}, &ready).deps
	resize := &fakeResize{}
	rec := record.NewFakeRecorder(100)
	deps.Admitter, deps.Resize, deps.Recorder, deps.Pods = cpuAdmitter{capacity: 2000}, resize, rec, nil
	k := New(Config{SyncFrequency: time.Minute, HousekeepingPeriod: time.Second, GCPeriod: time.Minute}, deps)
	return k, rt, resize, rec
}

func cpuTestPod(uid, cpu string, generation int64) *v1.Pod {
	p := testPod(uid, uid)
	p.Generation = generation
	q := resource.MustParse(cpu)
	p.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: q}, Limits: v1.ResourceList{v1.ResourceCPU: q}}
	return p
}

// syncedCPU is the CPU limit of the pod the runtime was last asked to sync.
func syncedCPU(rt *fakeRuntime, uid types.UID) int64 {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	p, ok := rt.lastSynced[uid]
	if !ok {
		return -1
	}
	return p.Spec.Containers[0].Resources.Limits.Cpu().MilliValue()
}

func condition(k *Kubelet, uid types.UID, t v1.PodConditionType) *v1.PodCondition {
	st, _ := k.PodStatus(uid)
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func hasEventPrefix(events []string, prefix string) bool {
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			return true
		}
	}
	return false
}

// A resize reaches the runtime only once allocated: at once when it fits, after other
// pods go when it does not (PodResizePending Deferred meanwhile).
func TestResizeIsActuatedOnlyOnceAllocated(t *testing.T) {
	k, rt, resize, rec := resizeKubelet(t)
	pod, filler := cpuTestPod("a", "500m", 1), cpuTestPod("filler", "1400m", 1)
	k.handlePodAdditions([]*v1.Pod{pod, filler})
	eventually(t, "the pods synced", func() bool { return syncedCPU(rt, "a") == 500 && syncedCPU(rt, "filler") == 1400 })

	k.handlePodUpdates([]*v1.Pod{cpuTestPod("a", "800m", 2)})
	eventually(t, "the resize pending in the status", func() bool {
		c := condition(k, "a", v1.PodResizePending)
		return c != nil && c.Reason == v1.PodReasonDeferred && c.ObservedGeneration == 2 &&
			c.Message == "Node didn't have enough resource: cpu, requested: 800, used: 1400, capacity: 2000"
	})
	if got := syncedCPU(rt, "a"); got != 500 {
		t.Fatalf("a deferred resize reached the runtime: %dm", got)
	}
	if ev := drain(rec); !hasEventPrefix(ev, "Warning ResizeDeferred Pod resize OutOfcpu: ") {
		t.Fatalf("events %q", ev)
	}

	resize.mu.Lock()
	resize.inProgress = true // the runtime has not applied it yet
	resize.mu.Unlock()
	k.handlePodRemoves([]*v1.Pod{filler})
	eventually(t, "the resize actuated", func() bool { return syncedCPU(rt, "a") == 800 })
	eventually(t, "the conditions moved on", func() bool {
		c := condition(k, "a", v1.PodResizeInProgress)
		return condition(k, "a", v1.PodResizePending) == nil && c != nil && c.ObservedGeneration == 2
	})
	if ev := drain(rec); !hasEventPrefix(ev, "Normal ResizeStarted Pod resize started: ") {
		t.Fatalf("events %q", ev)
	}
}

// A failed resize shows PodResizeInProgress with reason Error until the runtime says the
// resize is done; then the condition goes, with a ResizeCompleted event.
func TestResizeErrorThenCompletion(t *testing.T) {
	k, rt, resize, rec := resizeKubelet(t)
	pod := cpuTestPod("a", "500m", 2)
	k.pods.AddPod(pod)
	k.resizes.SetInProgress(pod.UID, "", "", 2)
	resize.inProgress = true
	failed := container.NewSyncResult(container.ResizePodInPlace, "a_ns")
	failed.Fail(container.ErrResizePodInPlace, "cannot decrease memory limits: boom")
	rt.result = container.PodSyncResult{SyncResults: []*container.SyncResult{failed}}
	ps := &container.PodStatus{ID: "a", Name: "a", Namespace: "ns"}

	if _, _, err := k.SyncPod(context.Background(), podworkers.SyncPodSync, pod, ps); err == nil {
		t.Fatal("a failed resize is not a sync error")
	}
	if cached, _ := k.deps.Cache.Get("a"); cached.Name != "a" {
		t.Fatal("the pod's status was not read again after a failed resize")
	}
	c := k.resizes.InProgress(pod.UID)
	if c == nil || c.Reason != v1.PodReasonError || c.Message != "cannot decrease memory limits: boom" || c.ObservedGeneration != 2 {
		t.Fatalf("in progress %+v", c)
	}
	if ev := drain(rec); len(ev) != 1 || !strings.HasPrefix(ev[0], `Warning ResizeError Pod resize error: {"containers":[{"name":"c"`) ||
		!strings.HasSuffix(ev[0], `"generation":2,"error":"cannot decrease memory limits: boom"}`) {
		t.Fatalf("events %q", ev)
	}
	// The same error again is no news.
	if _, _, err := k.SyncPod(context.Background(), podworkers.SyncPodSync, pod, ps); err == nil || len(drain(rec)) != 0 {
		t.Fatal("a repeated error was reported again")
	}
	if c := condition(k, pod.UID, v1.PodResizeInProgress); c == nil || c.Reason != v1.PodReasonError {
		t.Fatalf("status condition %+v", c)
	}

	resize.inProgress = false
	rt.result = container.PodSyncResult{}
	if _, _, err := k.SyncPod(context.Background(), podworkers.SyncPodSync, pod, ps); err != nil {
		t.Fatal(err)
	}
	if condition(k, pod.UID, v1.PodResizeInProgress) != nil {
		t.Fatal("PodResizeInProgress left after the resize completed")
	}
	if ev := drain(rec); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal ResizeCompleted Pod resize completed: ") {
		t.Fatalf("events %q", ev)
	}
}

// A resize refreshes the pod's cached status (no container event would), and a
// successful one syncs the pod again, which finds it done and clears the condition.
func TestSuccessfulResizeSyncsAgain(t *testing.T) {
	k, rt, _, _ := resizeKubelet(t)
	pod := cpuTestPod("a", "500m", 1)
	k.pods.AddPod(pod)
	done := container.NewSyncResult(container.ResizePodInPlace, "a_ns")
	rt.result = container.PodSyncResult{SyncResults: []*container.SyncResult{done}}
	if cached, _ := k.deps.Cache.Get("a"); cached.Name != "" {
		t.Fatalf("cache holds %+v before the sync", cached)
	}
	_, postSync, err := k.SyncPod(context.Background(), podworkers.SyncPodSync, pod, &container.PodStatus{ID: "a", Name: "a", Namespace: "ns"})
	if err != nil || postSync == nil {
		t.Fatalf("err %v, postSync set %v", err, postSync != nil)
	}
	before := rt.syncCount("a")
	postSync()
	if cached, _ := k.deps.Cache.Get("a"); cached.Name != "a" {
		t.Fatalf("the pod's status was not read again after the resize: cache holds %+v", cached)
	}
	eventually(t, "the pod synced again", func() bool { return rt.syncCount("a") > before })
}
