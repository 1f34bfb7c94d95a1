package pleg

import (
	"sort"
	"time"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// RuntimeCachePeriod is how old a listing may be to stand in for a new one, for readers
// that upstream serves from its runtime cache (housekeeping's running pods): upstream
// refreshes that cache when it is older than two seconds.
const RuntimeCachePeriod = 2 * time.Second

// RunningPodsSource is a PLEG that can tell the runtime's running pods from what it
// has listed already, sparing its readers a listing of their own.
type RunningPodsSource interface {
	// RunningPods returns the pods as GetPods(ctx, false) would list them now (ready
	// sandboxes and running containers; pods with neither left out), and true; or
	// false when the PLEG's own view is not fresh enough, or busy being refreshed.
	RunningPods() ([]*container.Pod, bool)
}

var (
	_ RunningPodsSource = (*GenericPLEG)(nil)
	_ RunningPodsSource = (*EventedPLEG)(nil)
)

// RunningPods answers from the last full relist when it started within
// RuntimeCachePeriod: relisting every second, it always has, and it is then as fresh as
// upstream's runtime cache.
func (g *GenericPLEG) RunningPods() ([]*container.Pod, bool) {
	last := g.lastRelistTime()
	if last.IsZero() || g.clock.Since(last) > RuntimeCachePeriod {
		return nil, false
	}
	return g.runningFromRecords()
}

// RunningPods answers from the relists' records while the event stream is trusted,
// however old the last full relist: every change since has been reported by an event
// and its pod relisted (within milliseconds). Otherwise it answers as relisting does.
func (e *EventedPLEG) RunningPods() ([]*container.Pod, bool) {
	if !e.streaming.Load() {
		return e.relister.RunningPods()
	}
	return e.relister.runningFromRecords()
}

// runningFromRecords filters the pods as last listed down to what is running. It does
// not wait for a relist in progress (false): the caller lists the runtime itself rather
// than stall behind one.
func (g *GenericPLEG) runningFromRecords() ([]*container.Pod, bool) {
	if !g.relistMu.TryLock() {
		return nil, false
	}
	defer g.relistMu.Unlock()
	var pods []*container.Pod
	for _, rec := range g.records {
		// current is set only between a listing and its handling, or for a pod whose
		// inspection failed: then it is the newer listing.
		listed := rec.current
		if listed == nil {
			listed = rec.old
		}
		if p := runningPart(listed); p != nil {
			pods = append(pods, p)
		}
	}
	sort.SliceStable(pods, func(i, j int) bool { return pods[i].CreatedAt > pods[j].CreatedAt })
	return pods, true
}

// runningPart is the pod with only its running containers and ready sandboxes, or nil
// when nothing of it runs. The containers are shared with the records, read-only.
func runningPart(p *container.Pod) *container.Pod {
	if p == nil {
		return nil
	}
	out := &container.Pod{ID: p.ID, Name: p.Name, Namespace: p.Namespace}
	for _, s := range p.Sandboxes {
		if s.State == container.ContainerStateRunning {
			out.Sandboxes = append(out.Sandboxes, s)
			out.CreatedAt = max(out.CreatedAt, s.CreatedAt)
		}
	}
	for _, c := range p.Containers {
		if c.State == container.ContainerStateRunning {
			out.Containers = append(out.Containers, c)
		}
	}
	if len(out.Sandboxes) == 0 && len(out.Containers) == 0 {
		return nil
	}
	return out
}
