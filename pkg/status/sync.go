package status

import (
	"context"
	"time"

	"k8s.io/klog/v2"
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

// syncBatch offers the syncer every status newer than what it acknowledged, and on a full
// pass (all) first forgets the acknowledgements of pods no longer cached. Returns how many
// were offered.
func (m *manager) syncBatch(ctx context.Context, all bool) int {
	pending := m.unacknowledged(all)
	for _, u := range pending {
		if err := m.syncer.SyncPodStatus(ctx, u); err != nil {
			klog.InfoS("Failed to update status for pod", "pod", klog.KRef(u.Namespace, u.Name), "podUID", u.UID, "err", err)
			continue
		}
		m.apiVersions[u.UID] = u.Version
	}
	return len(pending)
}

// unacknowledged copies out, under the lock, the statuses the syncer has not acknowledged.
func (m *manager) unacknowledged(all bool) []PodStatusUpdate {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if all {
		for uid := range m.apiVersions {
			if _, ok := m.statuses[uid]; !ok {
				delete(m.apiVersions, uid)
			}
		}
	}
	var out []PodStatusUpdate
	for uid, s := range m.statuses {
		if m.apiVersions[uid] >= s.version {
			continue
		}
		out = append(out, PodStatusUpdate{
			UID: uid, Name: s.pod.Name, Namespace: s.pod.Namespace,
			Version: s.version, PodIsFinished: s.podIsFinished, Status: *s.status.DeepCopy(),
		})
	}
	return out
}
