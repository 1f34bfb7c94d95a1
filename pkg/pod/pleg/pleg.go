// Package pleg is the pod lifecycle event generator: it turns changes in the runtime's
// containers into events for the kubelet loop and keeps the pod cache (pkg/pod/podcache) fresh.
// GenericPLEG relists the runtime every second; EventedPLEG (evented.go) relists the pod
// of each of the runtime's CRI container events at once and, while those flow, stretches
// the periodic relist to five minutes. New picks one from the feature gates.
package pleg

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Upstream kubelet's settings for the generic PLEG.
const (
	// ChannelCapacity is the size of the event channel the kubelet hands to the PLEG; a relist
	// that finds it full drops its events (the periodic sync is the safety net).
	ChannelCapacity = 1000
	// RelistPeriod is how long the generic PLEG sleeps between relists.
	RelistPeriod = time.Second
	// RelistThreshold is how long the PLEG may go without a successful relist before
	// Healthy reports it unhealthy (and the node turns NotReady).
	RelistThreshold = 3 * time.Minute
)

// PodLifeCycleEventType names what changed in a pod.
type PodLifeCycleEventType string

const (
	// ContainerStarted: a container (or sandbox) is now running.
	ContainerStarted PodLifeCycleEventType = "ContainerStarted"
	// ContainerDied: a container (or sandbox) has exited.
	ContainerDied PodLifeCycleEventType = "ContainerDied"
	// ContainerRemoved: an exited container (or sandbox) is gone from the runtime.
	ContainerRemoved PodLifeCycleEventType = "ContainerRemoved"
	// PodSync asks for a sync of the pod when no single container event describes the change.
	PodSync PodLifeCycleEventType = "PodSync"
	// ContainerChanged: a container's state became unknown (or "created"). Generated but
	// never sent: nothing acts on it and the state is not reliable.
	ContainerChanged PodLifeCycleEventType = "ContainerChanged"
)

// PodLifecycleEvent reports a change in one pod.
type PodLifecycleEvent struct {
	// ID is the pod's UID.
	ID   types.UID
	Type PodLifeCycleEventType
	// Data is, for the container events, the container's ID without the runtime prefix (a string).
	Data interface{}
}

// PodLifecycleEventGenerator produces pod lifecycle events and keeps the pod cache fresh.
type PodLifecycleEventGenerator interface {
	Start()
	Stop()
	// Watch returns the channel the events arrive on.
	Watch() chan *PodLifecycleEvent
	// Healthy reports whether the runtime was listed recently enough.
	Healthy() (bool, error)
	// UpdateCache reads the pod's status from the runtime now and stores it in the cache,
	// reporting whether the cache took it (it keeps a newer entry). The (error, bool)
	// order is upstream's.
	UpdateCache(pod *container.Pod, pid types.UID) (error, bool)
	// RequestRelist asks for one pod to be relisted soon, out of turn: a pod worker that
	// just changed the pod wants its events and fresh status without waiting for the next
	// periodic relist (upstream's PLEGOnDemandRelist). It never blocks.
	RequestRelist(uid types.UID)
}

// RelistDuration sets how often the PLEG relists and how stale a relist may get.
type RelistDuration struct {
	// RelistPeriod is the pause between relists.
	RelistPeriod time.Duration
	// RelistThreshold must exceed the period plus the time a relist takes, which varies a
	// lot; a generous value keeps the health check from flapping.
	RelistThreshold time.Duration
}

// DefaultRelistDuration returns upstream's generic PLEG settings (1 s, 3 min).
func DefaultRelistDuration() *RelistDuration {
	return &RelistDuration{RelistPeriod: RelistPeriod, RelistThreshold: RelistThreshold}
}
