package pleg

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// runningIDs maps each pod RunningPods returned to its container and sandbox IDs.
func runningIDs(pods []*container.Pod) map[types.UID][]string {
	out := map[types.UID][]string{}
	for _, p := range pods {
		ids := []string{}
		for _, c := range append(append([]*container.Container{}, p.Sandboxes...), p.Containers...) {
			ids = append(ids, c.ID.ID)
		}
		out[p.ID] = ids
	}
	return out
}

func assertRunning(t *testing.T, src RunningPodsSource, want map[types.UID][]string) {
	t.Helper()
	// It declines while a relist holds the records: the one an event asked for may
	// still be finishing after it sent its lifecycle event.
	var pods []*container.Pod
	waitFor(t, "RunningPods to answer", func() bool {
		var ok bool
		pods, ok = src.RunningPods()
		return ok
	})
	got := runningIDs(pods)
	if len(got) != len(want) {
		t.Fatalf("running pods %v, want %v", got, want)
	}
	for uid, ids := range want {
		if g := got[uid]; len(g) != len(ids) || (len(ids) > 0 && g[0] != ids[0]) {
			t.Fatalf("running pods %v, want %v", got, want)
		}
	}
}

func TestGenericRunningPodsFromAFreshRelistOnly(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	if _, ok := p.RunningPods(); ok {
		t.Fatal("RunningPods answered before any relist")
	}
	sb := ctr("sb", running)
	p.runtime.setPods(
		&container.Pod{ID: "a", Sandboxes: []*container.Container{sb}, Containers: []*container.Container{ctr("c1", running), ctr("c0", exited)}},
		pod("b", ctr("c2", exited)), // nothing of it runs: left out, as GetPods(false) does
		sandboxPod("c", ctr("sb2", exited)),
	)
	p.Relist()
	assertRunning(t, p, map[types.UID][]string{"a": {"sb", "c1"}})

	// Upstream's runtime cache is refreshed when older than two seconds.
	p.clock.Step(RuntimeCachePeriod + time.Millisecond)
	if _, ok := p.RunningPods(); ok {
		t.Fatal("RunningPods answered from a listing older than the runtime cache period")
	}
	p.runtime.setPods(pod("b", ctr("c2", running)))
	p.Relist()
	assertRunning(t, p, map[types.UID][]string{"b": {"c2"}})
}

func TestGenericRunningPodsDoesNotWaitForARelist(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("c1", running)))
	p.Relist()
	p.relistMu.Lock()
	defer p.relistMu.Unlock()
	if _, ok := p.RunningPods(); ok {
		t.Fatal("RunningPods answered while a relist held the records")
	}
}

func TestEventedRunningPodsFollowEventsWhileStreaming(t *testing.T) {
	p := newTestEvented(t, ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("c1", running)))
	p.Start()
	p.waitStreaming(t, true)
	p.nextEvents(t, 1)
	lists := p.runtime.lists()
	// Long after the last full relist (the relisting PLEG would decline), the records
	// still answer: events keep them current.
	time.Sleep(RuntimeCachePeriod / 20)
	p.relister.lastRelist.Store(&time.Time{})
	assertRunning(t, p, map[types.UID][]string{"a": {"c1"}})

	// A new pod starts: its event relists it, and it is running at once.
	p.runtime.setPods(pod("a", ctr("c1", running)), sandboxPod("b", ctr("sb", running)))
	p.source.send(containerEvent("b", "sb", runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT))
	p.nextEvents(t, 1)
	assertRunning(t, p, map[types.UID][]string{"a": {"c1"}, "b": {"sb"}})
	// a's container exits.
	p.runtime.setPods(pod("a", ctr("c1", exited)), sandboxPod("b", ctr("sb", running)))
	p.source.send(containerEvent("a", "c1", runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT))
	p.nextEvents(t, 1)
	assertRunning(t, p, map[types.UID][]string{"b": {"sb"}})
	if n := p.runtime.lists() - lists; n != 2 {
		t.Errorf("%d runtime listings, want the 2 one-pod relists the events asked for", n)
	}

	// The stream breaks: back to relisting, and to the runtime cache's rule.
	p.source.breakStream(errors.New("broken"))
	p.waitStreaming(t, false)
	p.Stop()
	time.Sleep(20 * time.Millisecond) // a relist in progress ends
	p.relister.lastRelist.Store(&time.Time{})
	if _, ok := p.RunningPods(); ok {
		t.Fatal("RunningPods answered from stale records after the stream broke")
	}
}
