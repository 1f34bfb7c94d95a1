package status

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/metrics"
)

// Start runs the loop that offers status changes to the syncer: at once after a change, and
// every syncPeriod for whatever it has not acknowledged yet. Without a syncer (standalone)
// statuses only live in memory and there is nothing to run.
func (m *manager) Start(ctx context.Context) {
	if m.syncer == nil {
		klog.InfoS("No API server to sync pod statuses to, keeping them locally")
		return
	}
	klog.InfoS("Starting to sync pod status with apiserver")
	go m.syncLoop(ctx)
}

func (m *manager) syncLoop(ctx context.Context) {
	ticker := time.NewTicker(syncPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.changed:
			m.syncBatch(ctx, false)
		case <-ticker.C:
			m.syncBatch(ctx, true)
		}
	}
}

// syncBatch offers the syncer every status newer than what it acknowledged and, on a full
// pass (all), also those the syncer wants to reconcile, after forgetting the
// acknowledgements of pods no longer cached. Returns how many were offered.
func (m *manager) syncBatch(ctx context.Context, all bool) int {
	pending := m.unacknowledged(all)
	failed := 0
	for _, u := range pending {
		forget, err := m.syncer.SyncPodStatus(ctx, u)
		if err != nil {
			failed++
			m.logSyncFailure(u, err)
			continue
		}
		m.apiVersions[u.UID] = u.Version
		m.acknowledged(u)
		if forget {
			m.forget(u.UID)
		}
	}
	if failed == 0 && m.failures > 0 {
		klog.InfoS("Pod statuses reach the API server again", "failedUpdates", m.failures)
		m.failures = 0
	}
	return len(pending)
}

// logSyncFailure logs the first failed update of a run of failures (an API outage fails
// every pod's update on every pass) and the rest at V(2).
func (m *manager) logSyncFailure(u PodStatusUpdate, err error) {
	m.failures++
	if m.failures == 1 {
		klog.InfoS("Failed to update status for pod", "pod", klog.KRef(u.Namespace, u.Name), "podUID", u.UID, "err", err)
		return
	}
	klog.V(2).InfoS("Failed to update status for pod", "pod", klog.KRef(u.Namespace, u.Name), "podUID", u.UID, "err", err)
}

// acknowledged observes how long the pod's status took to reach the API server, from
// its first change the syncer had not acknowledged, and starts the clock afresh unless a
// newer change is already waiting (that one is then counted from the earlier change).
func (m *manager) acknowledged(u PodStatusUpdate) {
	if !u.changedAt.IsZero() {
		metrics.PodStatusSyncDuration.Observe(m.now().Sub(u.changedAt).Truncate(time.Millisecond).Seconds())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.statuses[u.UID]; ok && s.version == u.Version {
		s.changedAt = time.Time{}
		m.statuses[u.UID] = s
	}
}

// forget drops a pod's status once the API server is done with it (upstream's
// deletePodStatus).
func (m *manager) forget(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.statuses, uid)
	delete(m.apiVersions, uid)
}

// unacknowledged copies out, under the lock, the statuses the syncer has not acknowledged
// and, on a full pass, those it asks to reconcile.
func (m *manager) unacknowledged(all bool) []PodStatusUpdate {
	m.mu.Lock() // NeedsReconcile's answers are kept
	defer m.mu.Unlock()
	if all {
		for uid := range m.apiVersions {
			if _, ok := m.statuses[uid]; !ok {
				delete(m.apiVersions, uid)
			}
		}
	}
	var out []PodStatusUpdate
	for uid, s := range m.statuses {
		u := PodStatusUpdate{
			UID: uid, Name: s.pod.Name, Namespace: s.pod.Namespace,
			Version: s.version, PodIsFinished: s.podIsFinished, Status: s.status, changedAt: s.changedAt,
			ConsistentWith: s.consistentWith,
		}
		if m.apiVersions[uid] >= s.version {
			if !all {
				continue
			}
			needs, consistentWith := m.syncer.NeedsReconcile(u)
			if !needs {
				s.consistentWith = consistentWith
				m.statuses[uid] = s
				continue
			}
		}
		u.Status = *s.status.DeepCopy()
		out = append(out, u)
	}
	return out
}
