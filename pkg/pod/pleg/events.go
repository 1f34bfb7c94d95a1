package pleg

import (
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// plegState is a container's state as the PLEG tracks it: the runtime's states, with
// "created" folded into unknown (the kubelet does not act on it), plus non-existent.
type plegState string

const (
	plegRunning     plegState = "running"
	plegExited      plegState = "exited"
	plegUnknown     plegState = "unknown"
	plegNonExistent plegState = "non-existent"
)

func toPLEGState(s container.State) plegState {
	switch s {
	case container.ContainerStateRunning:
		return plegRunning
	case container.ContainerStateExited:
		return plegExited
	default: // created, unknown, or anything a runtime invents
		return plegUnknown
	}
}

// eventsFor returns the events for one container moving from old to current.
func eventsFor(uid types.UID, id string, old, current plegState) []*PodLifecycleEvent {
	if old == current {
		return nil
	}
	klog.V(4).InfoS("GenericPLEG", "podUID", uid, "containerID", id, "oldState", old, "newState", current)
	event := func(t PodLifeCycleEventType) *PodLifecycleEvent {
		return &PodLifecycleEvent{ID: uid, Type: t, Data: id}
	}
	switch current {
	case plegRunning:
		return []*PodLifecycleEvent{event(ContainerStarted)}
	case plegExited:
		return []*PodLifecycleEvent{event(ContainerDied)}
	case plegNonExistent:
		if old == plegExited {
			// Its death was reported already.
			return []*PodLifecycleEvent{event(ContainerRemoved)}
		}
		// It vanished between two relists without being seen dead.
		return []*PodLifecycleEvent{event(ContainerDied), event(ContainerRemoved)}
	default:
		return []*PodLifecycleEvent{event(ContainerChanged)}
	}
}

// podEvents compares a pod's containers and sandboxes (sandboxes count as containers)
// between two listings; either listing may be nil when the pod is absent from it.
func podEvents(uid types.UID, old, current *container.Pod) []*PodLifecycleEvent {
	oldStates, currentStates := statesOf(old), statesOf(current)
	var events []*PodLifecycleEvent
	for _, id := range containerIDs(old, current) {
		events = append(events, eventsFor(uid, id, stateIn(oldStates, id), stateIn(currentStates, id))...)
	}
	return events
}

// statesOf maps the pod's container and sandbox IDs to their states.
func statesOf(pod *container.Pod) map[string]plegState {
	if pod == nil {
		return nil
	}
	states := make(map[string]plegState, len(pod.Containers)+len(pod.Sandboxes))
	for _, c := range pod.Containers {
		states[c.ID.ID] = toPLEGState(c.State)
	}
	for _, s := range pod.Sandboxes {
		states[s.ID.ID] = toPLEGState(s.State)
	}
	return states
}

func stateIn(states map[string]plegState, id string) plegState {
	if s, ok := states[id]; ok {
		return s
	}
	return plegNonExistent
}

// containerIDs lists the container and sandbox IDs of the pods once each, in listing
// order, so events come out in a stable order.
func containerIDs(pods ...*container.Pod) []string {
	seen := map[string]bool{}
	var ids []string
	add := func(cs []*container.Container) {
		for _, c := range cs {
			if !seen[c.ID.ID] {
				seen[c.ID.ID] = true
				ids = append(ids, c.ID.ID)
			}
		}
	}
	for _, p := range pods {
		if p != nil {
			add(p.Containers)
			add(p.Sandboxes)
		}
	}
	return ids
}

// podRecord is a pod as the last handled relist saw it (old) and as the current one does.
type podRecord struct {
	old, current *container.Pod
}

type podRecords map[types.UID]*podRecord

func (r podRecords) old(uid types.UID) *container.Pod {
	if rec, ok := r[uid]; ok {
		return rec.old
	}
	return nil
}

func (r podRecords) current(uid types.UID) *container.Pod {
	if rec, ok := r[uid]; ok {
		return rec.current
	}
	return nil
}

// setCurrent records a new listing; pods missing from it get a nil current.
func (r podRecords) setCurrent(pods []*container.Pod) {
	for _, rec := range r {
		rec.current = nil
	}
	for _, p := range pods {
		if rec, ok := r[p.ID]; ok {
			rec.current = p
		} else {
			r[p.ID] = &podRecord{current: p}
		}
	}
}

// setCurrentOne records one pod of a new listing (a one-pod relist); the other pods'
// records are left alone.
func (r podRecords) setCurrentOne(uid types.UID, pods []*container.Pod) {
	var current *container.Pod
	for _, p := range pods {
		if p.ID == uid {
			current = p
			break
		}
	}
	if rec, ok := r[uid]; ok {
		rec.current = current
	} else if current != nil {
		r[uid] = &podRecord{current: current}
	}
}

// update makes the current listing the old one once it has been handled, forgetting pods
// that are gone.
func (r podRecords) update(uid types.UID) {
	rec, ok := r[uid]
	if !ok {
		return
	}
	if rec.current == nil {
		delete(r, uid)
		return
	}
	rec.old, rec.current = rec.current, nil
}
