package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/procfs"
)

// NodeStartupTracker sets the kubelet_node_startup_* durations, as upstream's node startup
// latency tracker: from the machine's boot to nodelet's start (pre_kubelet), to its first
// attempt to register the Node (pre_registration), to the Node's creation
// (registration), to the first status update that reports it Ready (post_registration),
// and from boot to Ready in total. They are set once per process, and only when this
// process created the Node: a node that was already registered reports none.
type NodeStartupTracker struct {
	now func() time.Time

	mu              sync.Mutex
	boot, start     time.Time
	attempt, create time.Time
	ready           time.Time
}

// NewNodeStartupTracker returns a tracker for a machine booted at boot (zero: unknown,
// the durations from boot are not set) running a kubelet started at start.
func NewNodeStartupTracker(boot, start time.Time, now func() time.Time) *NodeStartupTracker {
	if now == nil {
		now = time.Now
	}
	return &NodeStartupTracker{boot: boot, start: start, now: now}
}

var (
	nodeStartup     *NodeStartupTracker
	nodeStartupOnce sync.Once
)

// NodeStartup is the process's tracker: the machine's boot time from /proc/stat and the
// process's start time.
func NodeStartup() *NodeStartupTracker {
	nodeStartupOnce.Do(func() {
		var boot time.Time
		if fs, err := procfs.NewDefaultFS(); err == nil {
			if st, err := fs.Stat(); err == nil && st.BootTime > 0 {
				boot = time.Unix(int64(st.BootTime), 0)
			}
		}
		nodeStartup = NewNodeStartupTracker(boot, ProcessStartTime(), nil)
	})
	return nodeStartup
}

// RecordAttemptRegisterNode notes the first attempt to register the Node.
func (n *NodeStartupTracker) RecordAttemptRegisterNode() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.attempt.IsZero() {
		n.attempt = n.now()
	}
}

// RecordRegisteredNewNode notes that this process created the Node, and sets the
// durations up to then.
func (n *NodeStartupTracker) RecordRegisteredNewNode() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.attempt.IsZero() || !n.create.IsZero() {
		return
	}
	n.create = n.now()
	if !n.boot.IsZero() {
		NodeStartupPreKubeletDuration.Set(n.start.Sub(n.boot).Seconds())
	}
	NodeStartupPreRegistrationDuration.Set(n.attempt.Sub(n.start).Seconds())
	NodeStartupRegistrationDuration.Set(n.create.Sub(n.attempt).Seconds())
}

// RecordNodeReady notes a status update that reported the Node Ready; the first one after
// the Node's creation sets the remaining durations.
func (n *NodeStartupTracker) RecordNodeReady() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.create.IsZero() || !n.ready.IsZero() {
		return
	}
	n.ready = n.now()
	NodeStartupPostRegistrationDuration.Set(n.ready.Sub(n.create).Seconds())
	if !n.boot.IsZero() {
		NodeStartupDuration.Set(n.ready.Sub(n.boot).Seconds())
	}
}
