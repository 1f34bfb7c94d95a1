package pleg

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

func stretched() *RelistDuration {
	return &RelistDuration{RelistPeriod: EventedRelistPeriod, RelistThreshold: EventedRelistThreshold}
}

// A burst of requests (an evented PLEG asks once per container event) costs one listing
// and one inspection per pod.
func TestAskedRelistsAreCoalesced(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("c1", running)), pod("b", ctr("c2", running)), pod("c", ctr("c3", running)))
	p.Relist()
	p.drain()
	p.runtime.inspections()
	lists := p.runtime.lists()

	p.clock.Step(time.Millisecond)
	p.runtime.setPods(pod("a", ctr("c1", exited)), pod("b", ctr("c2", exited)), pod("c", ctr("c3", exited)))
	for range 50 {
		p.RequestRelist("a")
	}
	p.RequestRelist("b")
	p.serveAsked()
	if n := p.runtime.lists() - lists; n != 2 {
		t.Errorf("%d listings for two pods' requests, want one of each pod", n)
	}
	assertInspections(t, p.runtime.inspections(), map[types.UID]int{"a": 1, "b": 1})
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev("a", ContainerDied, "c1"), ev("b", ContainerDied, "c2")})

	// A request made before the pod's last relist started was served by it.
	p.ask(func(w *askedWork) { w.pods = map[types.UID]time.Time{"a": p.clock.Now().Add(-time.Nanosecond)} })
	p.serveAsked()
	if n := p.runtime.lists() - lists; n != 2 {
		t.Errorf("a served request relisted again")
	}
	// The next full relist still finds c's change, and not a's or b's again.
	p.relistAgain()
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev("c", ContainerDied, "c3")})
}

// While full relists are minutes apart, a pod relist that failed is retried after the
// normal period; at the normal period the next full relist does it.
func TestFailedPodRelistIsRetriedWhenStretched(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("c1", running)))
	p.Relist()
	p.drain()

	p.clock.Step(time.Millisecond)
	p.runtime.setPodsErr(errors.New("runtime busy"))
	p.RequestRelist("a")
	p.serveAsked()
	if p.clock.HasWaiters() {
		t.Fatal("a retry was scheduled although the next full relist is a second away")
	}

	p.Update(stretched())
	p.clock.Step(time.Millisecond)
	p.RequestRelist("a")
	p.serveAsked()
	waitFor(t, "the retry timer", p.clock.HasWaiters)
	p.runtime.setPodsErr(nil)
	p.runtime.setPods(pod("a", ctr("c1", exited)))
	p.clock.Step(RelistPeriod)
	waitFor(t, "the retry to ask", func() bool { return p.askedPods() == 1 })
	p.serveAsked()
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev("a", ContainerDied, "c1")})

	// A status that cannot be read is retried the same way.
	p.runtime.setPods(pod("a", ctr("c1", exited), ctr("c2", running)))
	p.runtime.setStatusErr("a", errors.New("sandbox busy"))
	p.clock.Step(time.Millisecond)
	p.RequestRelist("a")
	p.serveAsked()
	assertEvents(t, p.drain(), nil)
	waitFor(t, "the retry timer", p.clock.HasWaiters)
	p.runtime.setStatusErr("a", nil)
	p.clock.Step(RelistPeriod)
	waitFor(t, "the retry to ask", func() bool { return p.askedPods() == 1 })
	p.serveAsked()
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev("a", ContainerStarted, "c2")})
}

// askedPods counts the pods asked for and not yet served.
func (p *testPLEG) askedPods() int {
	p.askMu.Lock()
	defer p.askMu.Unlock()
	return len(p.asked.pods)
}

// The fresh mark wakes pod workers without a listing, only after the relists asked for
// before it, and never moves the cache's time back behind a full relist.
func TestFreshMarkFollowsAskedRelists(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("c1", running)))
	p.Relist()
	p.drain()
	lists := p.runtime.lists()

	p.clock.Step(time.Millisecond)
	waiting := newerThan(p.cache, "b", p.clock.Now())
	p.clock.Step(time.Millisecond)
	p.requestFresh(p.clock.Now())
	p.serveAsked()
	assertWoken(t, waiting, "b")
	if p.runtime.lists() != lists {
		t.Error("a fresh mark listed the runtime")
	}

	// a's change was asked for before the mark: a worker woken by the mark sees it.
	p.runtime.setPods(pod("a", ctr("c1", exited)))
	p.runtime.setStatus(exitedStatus("a", "c1", 1))
	p.clock.Step(time.Millisecond)
	p.RequestRelist("a")
	waiting = newerThan(p.cache, "a", p.clock.Now())
	p.clock.Step(time.Millisecond)
	p.requestFresh(p.clock.Now())
	p.serveAsked()
	select {
	case s := <-waiting:
		if len(s.ContainerStatuses) != 1 || s.ContainerStatuses[0].State != exited {
			t.Errorf("woken with %+v, before the relist asked for ahead of the mark", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not woken")
	}

	// A mark older than the last full relist is ignored.
	old := p.clock.Now()
	p.clock.Step(time.Second)
	p.Relist()
	waiting = newerThan(p.cache, "zz", p.clock.Now())
	p.requestFresh(old)
	p.serveAsked()
	assertWaiting(t, waiting, "after a stale fresh mark")
}

// Switching to the normal threshold must not call a PLEG unhealthy whose last relist was
// on time under the stretched settings: the time counts from the switch.
func TestHealthyCountsFromSwitch(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.Update(stretched())
	p.Start()
	defer p.Stop()
	waitFor(t, "the first relist", func() bool { return p.runtime.lists() == 1 && p.clock.Waiters() == 1 })

	p.clock.Step(5 * time.Minute) // due at 5 min: the loop relists
	waitFor(t, "the stretched relist", func() bool { return p.runtime.lists() == 2 && p.clock.Waiters() == 1 })
	p.runtime.setPodsErr(errors.New("runtime hangs"))
	p.clock.Step(4 * time.Minute)
	if ok, err := p.Healthy(); !ok {
		t.Fatalf("4 min after a relist, threshold 10 min: %v", err)
	}
	p.switchDuration(DefaultRelistDuration(), true)
	if ok, err := p.Healthy(); !ok {
		t.Fatalf("just after switching to 3 min: %v", err)
	}
	p.clock.Step(RelistThreshold + time.Second)
	if ok, _ := p.Healthy(); ok {
		t.Fatal("healthy 3 min after the switch without a relist")
	}
}

// Stretching after a relist waits a period before the next one.
func TestSwitchDurationWithoutRelistNow(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.Start()
	defer p.Stop()
	waitFor(t, "the first relist", func() bool { return p.runtime.lists() == 1 && p.clock.Waiters() == 1 })
	p.switchDuration(stretched(), false)
	time.Sleep(20 * time.Millisecond)
	if n := p.runtime.lists(); n != 1 {
		t.Fatalf("%d relists right after stretching, want none", n-1)
	}
	waitFor(t, "the new loop to wait", func() bool { return p.clock.Waiters() == 1 })
	p.clock.Step(EventedRelistPeriod)
	waitFor(t, "the relist a stretched period later", func() bool { return p.runtime.lists() == 2 })
	p.switchDuration(DefaultRelistDuration(), true)
	waitFor(t, "the relist at once on fallback", func() bool { return p.runtime.lists() == 3 })
}

// The evented PLEG marks the cache fresh itself only when no relist it asked for is
// waiting or being served: a worker must not see "fresh" before its pod's change.
func TestMarkFreshIfIdleWaitsForAskedRelists(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("c1", running)))
	p.Relist()
	p.drain()
	p.clock.Step(RelistPeriod / 2)
	waiting := newerThan(p.cache, "a", p.clock.Now())
	p.clock.Step(RelistPeriod / 2)

	p.RequestRelist("a") // the pod's change, reported by an event, not yet relisted
	if p.markFreshIfIdle(p.clock.Now()) {
		t.Fatal("marked fresh with a relist waiting")
	}
	w := p.takeAsked() // the loop has taken it and is relisting
	if p.markFreshIfIdle(p.clock.Now()) {
		t.Fatal("marked fresh with a relist being served")
	}
	p.relistPods(p.stillToRelist(w.pods))
	p.doneServing()
	p.relistMu.Lock()
	if p.markFreshIfIdle(p.clock.Now()) {
		t.Fatal("marked fresh while a relist holds the records")
	}
	p.relistMu.Unlock()
	assertWoken(t, waiting, "a") // by the one-pod relist itself

	p.clock.Step(RelistPeriod)
	waiting = newerThan(p.cache, "a", p.clock.Now())
	assertWaiting(t, waiting, "before the cache was marked fresh")
	p.clock.Step(RelistPeriod)
	if !p.markFreshIfIdle(p.clock.Now()) {
		t.Fatal("not marked fresh with nothing asked for")
	}
	assertWoken(t, waiting, "a")
	if n := p.runtime.lists(); n != 2 {
		t.Errorf("%d runtime listings, want the relist and the one-pod relist", n)
	}
}

// Between listings of all pods a second apart, a one-pod relist lists only its pod: a
// burst of pod starts (four container events a pod) must not list every pod per event.
// The events are the same either way, a pod gone from the runtime included.
func TestOnePodRelistsListAllPodsAtMostOnceASecond(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("c1", running)), pod("b", ctr("c2", running)))
	p.Relist()
	p.drain()
	all, lists := p.runtime.allLists(), p.runtime.lists()

	relistOne := func(uid types.UID, step time.Duration, pods ...*container.Pod) {
		t.Helper()
		p.clock.Step(step)
		p.runtime.setPods(pods...)
		p.RequestRelist(uid)
		p.serveAsked()
	}
	relistOne("a", time.Millisecond, pod("a", ctr("c1", exited)), pod("b", ctr("c2", running)))
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev("a", ContainerDied, "c1")})
	relistOne("a", time.Millisecond, pod("b", ctr("c2", running)))
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev("a", ContainerRemoved, "c1")})
	if got := p.runtime.allLists() - all; got != 0 {
		t.Errorf("%d listings of all pods within a second of the last, want 0", got)
	}
	if got := p.runtime.lists() - lists; got != 2 {
		t.Errorf("%d one-pod listings, want 2", got)
	}

	relistOne("c", time.Second, pod("b", ctr("c2", running)), pod("c", ctr("c3", running)))
	assertEvents(t, p.drain(), []PodLifecycleEvent{ev("c", ContainerStarted, "c3")})
	if got := p.runtime.allLists() - all; got != 1 {
		t.Errorf("%d listings of all pods a second after the last, want 1 (it keeps kubelet_running_* current)", got)
	}
}

// A relist reads the statuses of what it has just listed (GetPodStatusOf), with no second
// listing of the pod; a pod worker's UpdateCache lists the pod afresh (GetPodStatus).
func TestRelistsInspectWhatTheyListed(t *testing.T) {
	p := newTestPLEG(ChannelCapacity)
	p.runtime.setPods(pod("a", ctr("c1", running)))
	p.Relist()
	p.clock.Step(time.Millisecond)
	p.runtime.setPods(pod("a", ctr("c1", exited)))
	p.RequestRelist("a")
	p.serveAsked()
	p.relistAgain()
	if p.runtime.ofListing != 2 {
		t.Errorf("%d inspections from a listing, want 2 (the first relist and the one-pod relist)", p.runtime.ofListing)
	}
	if err, _ := p.UpdateCache(pod("a", ctr("c1", exited)), "a"); err != nil {
		t.Fatal(err)
	}
	if p.runtime.ofListing != 2 {
		t.Error("UpdateCache inspected from a listing, want a fresh read")
	}
	if n := p.runtime.inspections()["a"]; n != 3 {
		t.Errorf("%d inspections of a, want 3", n)
	}
}
