package pleg

// An evented PLEG (upstream's EventedPLEG) turns the runtime's CRI container event stream
// (GetContainerEvents) into PodLifecycleEvents and writes the statuses carried by the
// events into the cache. containerd 1.6 does not implement that stream, so nodelet has
// none yet. To add one:
//
//   - implement PodLifecycleEventGenerator, writing to the same channel and cache;
//   - keep a RelistingGenerator as fallback: while the stream works, Stop it, Update it to
//     EventedRelistPeriod/EventedRelistThreshold and Start it again, so it only catches what
//     the stream missed; when the stream fails for good, restore DefaultRelistDuration;
//   - stamp cache entries with the event's time: podcache.Cache.Set keeps the newer of two
//     writes, so an event and a relist racing for the same pod cannot go back in time.

import "time"

// Upstream's settings for the relisting fallback of an evented PLEG.
const (
	EventedRelistPeriod    = 300 * time.Second
	EventedRelistThreshold = 10 * time.Minute
)

// RelistingGenerator is a PLEG that relists, as an evented PLEG needs its fallback to be.
type RelistingGenerator interface {
	PodLifecycleEventGenerator
	// Relist lists the runtime once, now.
	Relist()
	// Update changes the relist settings; a new period applies from the next Start.
	Update(relistDuration *RelistDuration)
}
