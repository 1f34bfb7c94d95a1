package pleg

import (
	"context"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/outage"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// askedWork is what the relist loop was asked to do out of turn. It is coalesced: per
// pod only the latest request counts, since one relist that starts after it serves all
// the requests before it. So nothing is ever dropped (upstream's bounded queue drops
// requests when full, which would cost an evented PLEG minutes), and its size is
// bounded by the number of pods.
type askedWork struct {
	// pods maps each pod to when its relist was last asked for.
	pods map[types.UID]time.Time
	// all is when a relist of every pod was last asked for (zero: never).
	all time.Time
	// fresh is the latest time the cache may be marked fresh up to (zero: none).
	fresh time.Time
}

// RequestRelist implements PodLifecycleEventGenerator.
func (g *GenericPLEG) RequestRelist(uid types.UID) {
	now := g.clock.Now()
	g.ask(func(w *askedWork) {
		if w.pods == nil {
			w.pods = map[types.UID]time.Time{}
		}
		w.pods[uid] = now
	})
}

// requestFullRelist asks for a relist of every pod, for a change an evented PLEG cannot
// tie to a pod.
func (g *GenericPLEG) requestFullRelist() {
	now := g.clock.Now()
	g.ask(func(w *askedWork) { w.all = now })
}

// requestFresh asks for the cache to be marked fresh up to at once the relists asked
// for before are done: an evented PLEG vouches that it has asked for the pod of every
// change it was told of before at.
func (g *GenericPLEG) requestFresh(at time.Time) {
	g.ask(func(w *askedWork) {
		if at.After(w.fresh) {
			w.fresh = at
		}
	})
}

func (g *GenericPLEG) ask(update func(*askedWork)) {
	g.askMu.Lock()
	update(&g.asked)
	g.askMu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default: // the loop has been told already
	}
}

// takeAsked hands the work asked for to the relist loop, which is serving it until
// doneServing.
func (g *GenericPLEG) takeAsked() askedWork {
	g.askMu.Lock()
	defer g.askMu.Unlock()
	w := g.asked
	g.asked = askedWork{}
	g.serving = true
	return w
}

func (g *GenericPLEG) doneServing() {
	g.askMu.Lock()
	defer g.askMu.Unlock()
	g.serving = false
}

// serveAsked does the work asked for, less what a relist since has done: a full relist,
// then the pods (from one listing), then the fresh mark, which so follows the relists
// asked for before it.
func (g *GenericPLEG) serveAsked() {
	w := g.takeAsked()
	defer g.doneServing()
	if w.all.After(g.lastRelistTime()) {
		g.Relist()
	}
	g.relistPods(g.stillToRelist(w.pods))
	if w.fresh.After(g.lastRelistTime()) {
		g.markFresh(w.fresh)
	}
}

// stillToRelist returns, sorted, the pods not relisted since they were asked for.
func (g *GenericPLEG) stillToRelist(asked map[types.UID]time.Time) []types.UID {
	g.relistMu.Lock()
	defer g.relistMu.Unlock()
	last := g.lastRelistTime()
	var uids []types.UID
	for uid, at := range asked {
		if at.After(last) && at.After(g.podRelisted[uid]) {
			uids = append(uids, uid)
		}
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	return uids
}

// relistPods relists some pods from one listing: their events are sent and their
// statuses refreshed as a full relist would, and their cached statuses count as
// confirmed at the time of the listing.
func (g *GenericPLEG) relistPods(uids []types.UID) {
	if len(uids) == 0 {
		return
	}
	g.relistMu.Lock()
	defer g.relistMu.Unlock()
	if outage.Down() {
		g.retryLater(uids)
		return
	}
	ctx := context.Background()
	timestamp := g.clock.Now()
	pods, err := g.listForRelist(ctx, uids, timestamp)
	if err != nil {
		outage.ErrorS(err, "GenericPLEG: Unable to retrieve pods", "podUIDs", uids)
		g.retryLater(uids)
		return
	}
	for _, uid := range uids {
		g.podRelisted[uid] = timestamp
		g.records.setCurrentOne(uid, pods)
		if pod, ok := g.relistPod(ctx, uid, timestamp); !ok {
			g.reinspectLater(uid, pod)
			continue
		}
		delete(g.podsToReinspect, uid)
		g.cache.SetObservedTime(uid, timestamp)
	}
}

// allListingInterval is how often one-pod relists may list all pods rather than only
// theirs: as often as a relisting PLEG does.
const allListingInterval = time.Second

// listForRelist lists what one-pod relists of uids need. Listing all pods keeps
// kubelet_running_* current while full relists are minutes apart (an evented PLEG's), but
// costs as much as a full relist; so it is done at most once per allListingInterval, and
// in between each pod is listed alone. A burst of pod starts (four container events per
// pod) then costs a listing of all pods a second, as relisting would, not one per event.
func (g *GenericPLEG) listForRelist(ctx context.Context, uids []types.UID, now time.Time) ([]*container.Pod, error) {
	if now.Sub(g.allListedAt) >= allListingInterval {
		pods, err := g.runtime.GetPods(ctx, true)
		if err != nil {
			return nil, err
		}
		g.allListedAt = now
		recordRunning(pods)
		return pods, nil
	}
	var pods []*container.Pod
	for _, uid := range uids {
		pod, err := g.runtime.GetPod(ctx, uid)
		if err != nil {
			return nil, err
		}
		if pod != nil {
			pods = append(pods, pod)
		}
	}
	return pods, nil
}

// reinspectLater makes sure a pod whose status could not be read in a one-pod relist is
// read again: by the next full relist, and sooner when those are minutes apart.
func (g *GenericPLEG) reinspectLater(uid types.UID, pod *container.Pod) {
	if g.podsToReinspect == nil {
		g.podsToReinspect = map[types.UID]*container.Pod{}
	}
	g.podsToReinspect[uid] = pod
	g.retryLater([]types.UID{uid})
}

// retryLater asks again, after the normal relist period, for pods whose relist failed,
// when the next full relist is further away than that (an evented PLEG's fallback): the
// change that asked for them would otherwise wait minutes.
func (g *GenericPLEG) retryLater(uids []types.UID) {
	if g.relistPeriod() <= RelistPeriod {
		return
	}
	t := g.clock.NewTimer(RelistPeriod)
	go func() {
		<-t.C()
		for _, uid := range uids {
			g.RequestRelist(uid)
		}
	}()
}

// markFreshIfIdle does what requestFresh(at) asks, at once, when nothing asked for is
// waiting or being served and no relist runs, and reports whether it did: then every
// relist asked for before at is done. An evented PLEG's stream goroutine marks the
// cache fresh every second; done here, the relist loop need not wake up for it while
// nothing happens.
func (g *GenericPLEG) markFreshIfIdle(at time.Time) bool {
	if !g.relistMu.TryLock() {
		return false
	}
	defer g.relistMu.Unlock()
	g.askMu.Lock()
	defer g.askMu.Unlock()
	idle := !g.serving && len(g.asked.pods) == 0 && g.asked.all.IsZero() && g.asked.fresh.IsZero()
	if idle {
		g.markFresh(at)
	}
	return idle
}

// markFresh tells the pods waiting for a status newer than at that the cache is. It is
// what the end of a full relist does, without listing the runtime; see requestFresh.
func (g *GenericPLEG) markFresh(at time.Time) {
	if outage.Down() {
		return
	}
	g.cache.UpdateTime(at)
	metrics.PLEGLastSeen.Set(float64(at.Unix()))
}

// podOfContainer returns the pod the relists saw the container (or sandbox) in.
func (g *GenericPLEG) podOfContainer(id string) (types.UID, bool) {
	g.relistMu.Lock()
	defer g.relistMu.Unlock()
	for uid, rec := range g.records {
		for _, p := range []*container.Pod{rec.old, rec.current} {
			if p != nil && containsID(p, id) {
				return uid, true
			}
		}
	}
	return "", false
}

func containsID(pod *container.Pod, id string) bool {
	for _, cs := range [][]*container.Container{pod.Containers, pod.Sandboxes} {
		for _, c := range cs {
			if c.ID.ID == id {
				return true
			}
		}
	}
	return false
}
