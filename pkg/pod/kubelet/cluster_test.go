package kubelet

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/pod/podmanager"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// fakeMirror records mirror pod calls.
type fakeMirror struct {
	mu      sync.Mutex
	created []string
	deleted []string
}

func (f *fakeMirror) CreateMirrorPod(_ context.Context, pod *v1.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, pod.Annotations[kubetypes.ConfigHashAnnotationKey])
	return nil
}

func (f *fakeMirror) DeleteMirrorPod(_ context.Context, name string, _ *types.UID) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, name)
	return true, nil
}

func (f *fakeMirror) calls() (created, deleted []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.created...), append([]string(nil), f.deleted...)
}

func staticTestPod(hash string) *v1.Pod {
	p := testPod(hash, "etcd")
	p.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: kubetypes.FileSource, kubetypes.ConfigHashAnnotationKey: hash}
	return p
}

func mirrorTestPod(uid, hash string) *v1.Pod {
	p := testPod(uid, "etcd")
	p.Annotations = map[string]string{kubetypes.ConfigSourceAnnotationKey: kubetypes.APIServerSource, kubetypes.ConfigMirrorAnnotationKey: hash}
	return p
}

func TestStaticPodGetsMirrorAndOutdatedMirrorIsReplaced(t *testing.T) {
	ready := true
	k := newTestKubelet(&fakeRuntime{}, &fakeVolumes{}, &ready)
	m := &fakeMirror{}
	k.deps.Mirror = m
	static := staticTestPod("h1")

	k.handlePodAdditions([]*v1.Pod{static})
	eventually(t, "mirror created", func() bool { c, _ := m.calls(); return len(c) == 1 })

	// A mirror pod from the API with another hash is deleted and made again.
	outdated := mirrorTestPod("mirror-old", "h0")
	k.handlePodAdditions([]*v1.Pod{outdated})
	if pods := k.pods.GetPods(); len(pods) != 1 || pods[0].UID != static.UID {
		t.Fatalf("the mirror pod became a pod to run: %v", pods)
	}
	eventually(t, "outdated mirror deleted and re-created", func() bool {
		c, d := m.calls()
		return len(d) == 1 && d[0] == podmanager.FullName(static) && len(c) == 2
	})

	// The static pod's manifest is gone: housekeeping deletes its orphaned mirror.
	current := mirrorTestPod("mirror-new", "h1")
	k.pods.AddPod(current)
	k.handlePodRemoves([]*v1.Pod{static})
	eventually(t, "static pod stopped", func() bool {
		return k.workers.IsPodKnownTerminated(static.UID) || !k.workers.CouldHaveRunningContainers(static.UID)
	})
	k.housekeeper.run(context.Background())
	eventually(t, "orphaned mirror deleted", func() bool { _, d := m.calls(); return len(d) == 2 })
}

func TestPodPastActiveDeadlineFailsWithDeadlineExceeded(t *testing.T) {
	ready := true
	k := newTestKubelet(&fakeRuntime{}, &fakeVolumes{}, &ready)
	pod := testPod("d", "deadline")
	pod.Spec.ActiveDeadlineSeconds = ptr.To[int64](1)
	// The start time is kept to the second (RFC 3339), so on the real clock it may already
	// be up to a second old: the deadline's clock is driven by hand instead.
	clk := testingclock.NewFakePassiveClock(time.Now())
	k.deadlines.clock = clk
	k.handlePodAdditions([]*v1.Pod{pod})
	eventually(t, "first status", func() bool { _, ok := k.deps.Status.GetPodStatus(pod.UID); return ok })
	st, _ := k.deps.Status.GetPodStatus(pod.UID)
	clk.SetTime(st.StartTime.Add(999 * time.Millisecond))
	if k.deadlines.pastDeadline(pod) {
		t.Fatal("deadline passed before its second was up")
	}
	if got := k.podsToSync(); containsPod(got, pod.UID) {
		t.Errorf("pod synced before its deadline")
	}
	clk.SetTime(st.StartTime.Add(time.Second))
	if !containsPod(k.podsToSync(), pod.UID) {
		t.Fatal("pod past its deadline is not synced")
	}
	k.handlePodSyncs([]*v1.Pod{pod})
	eventually(t, "Failed with DeadlineExceeded", func() bool {
		st, _ := k.deps.Status.GetPodStatus(pod.UID)
		return st.Phase == v1.PodFailed && st.Reason == deadlineExceededReason && st.Message == deadlineExceededMessage
	})
	eventually(t, "pod terminated", func() bool { return k.workers.IsPodKnownTerminated(pod.UID) })
}

func containsPod(pods []*v1.Pod, uid types.UID) bool {
	for _, p := range pods {
		if p.UID == uid {
			return true
		}
	}
	return false
}

func TestSyncThatChangedThePodRelistsIt(t *testing.T) {
	ready := true
	rt := &fakeRuntime{}
	k := newTestKubelet(rt, &fakeVolumes{}, &ready)
	plegs := k.deps.PLEG.(*fakePLEG)
	// What the runtime manager returns for a pod with nothing to do: no result. (Building
	// the sandbox config, which a sync that starts something reports, changes nothing.)
	rt.result = container.PodSyncResult{}
	quiet := testPod("quiet", "quiet")
	k.handlePodAdditions([]*v1.Pod{quiet})
	eventually(t, "first sync", func() bool { return rt.syncCount(quiet.UID) == 1 })
	time.Sleep(20 * time.Millisecond)
	if n := plegs.relistRequests(quiet.UID); n != 0 {
		t.Errorf("a sync that did nothing asked for %d relists", n)
	}

	rt.mu.Lock()
	rt.result = container.PodSyncResult{SyncResults: []*container.SyncResult{container.NewSyncResult(container.StartContainer, "c")}}
	rt.mu.Unlock()
	busy := testPod("busy", "busy")
	k.handlePodAdditions([]*v1.Pod{busy})
	eventually(t, "a relist asked for after the sync that started a container", func() bool { return plegs.relistRequests(busy.UID) == 1 })
}
