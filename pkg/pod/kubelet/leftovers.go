package kubelet

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// leftoverScanPeriod is how often housekeeping looks for a pod's leftovers even when no
// pod it knows of can have left any: a safety net for what nodelet did not create.
const leftoverScanPeriod = time.Minute

// leftovers remembers which pods may have left something of one kind behind (a pod
// cgroup, a pod directory), so that housekeeping lists them only when one of those pods
// is out of use (not desired, its worker done): then it scans at once, as upstream,
// which scans every two seconds whatever happened. With 100 pods a scan of the pod
// cgroups reads three QoS directories in every cgroup v1 hierarchy, one of the pod
// directories reads the pods directory twice (volumes, user namespaces).
//
// Only the pod workers' syncs create pod cgroups and directories, and they note each
// pod they sync (noteSynced) before creating anything; the scans note what they found
// and left in place. So a pod can only have leftovers once it is among these and out of
// use. What could not be removed stays remembered, so the scan is retried every
// housekeeping until it is gone, as before.
type leftovers struct {
	mu sync.Mutex
	// maybe are the pods that may have leftovers of this kind.
	maybe map[types.UID]bool
	// syncedDuringScan are the pods synced since the current scan began (nil when no
	// scan runs): what their syncs created may be missing from its listing.
	syncedDuringScan map[types.UID]bool
	// scanned is when the last scan began (zero: never, so the first housekeeping scans
	// for what an earlier nodelet left).
	scanned time.Time
}

func newLeftovers() *leftovers {
	return &leftovers{maybe: map[types.UID]bool{}}
}

// noteSynced notes that a sync of the pod is about to create what it needs.
func (l *leftovers) noteSynced(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maybe[uid] = true
	if l.syncedDuringScan != nil {
		l.syncedDuringScan[uid] = true
	}
}

// scanDue reports whether housekeeping should look now: never looked, looked a
// leftoverScanPeriod ago, or a pod that may have leftovers is out of use.
func (l *leftovers) scanDue(now time.Time, inUse func(types.UID) bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.scanned.IsZero() || now.Sub(l.scanned) >= leftoverScanPeriod {
		return true
	}
	for uid := range l.maybe {
		if !inUse(uid) {
			return true
		}
	}
	return false
}

// beginScan is called before the leftovers are listed.
func (l *leftovers) beginScan() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.syncedDuringScan = map[types.UID]bool{}
}

// endScan records the scan that began at start: remaining are the pods whose leftovers
// it found and left in place.
func (l *leftovers) endScan(start time.Time, remaining map[types.UID]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	maybe := make(map[types.UID]bool, len(remaining)+len(l.syncedDuringScan))
	for uid := range remaining {
		maybe[uid] = true
	}
	for uid := range l.syncedDuringScan {
		maybe[uid] = true
	}
	l.maybe, l.syncedDuringScan, l.scanned = maybe, nil, start
}

// abortScan records a scan that could not list: the next housekeeping tries again.
func (l *leftovers) abortScan() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for uid := range l.syncedDuringScan {
		l.maybe[uid] = true
	}
	l.syncedDuringScan, l.scanned = nil, time.Time{}
}
