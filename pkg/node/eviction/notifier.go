package eviction

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// memoryUsageAttribute is the cgroup v1 file whose crossing is notified.
const memoryUsageAttribute = "memory.usage_in_bytes"

// CgroupNotifier signals on events each time the kernel reports the
// threshold it was armed with crossed, until ctx ends or Stop is called.
type CgroupNotifier interface {
	Start(ctx context.Context, events chan<- struct{})
	Stop()
}

// NotifierFactory arms a CgroupNotifier on attribute of the memory cgroup
// named cgroup ("/" is the root), for threshold bytes.
type NotifierFactory interface {
	NewCgroupNotifier(cgroup, attribute string, threshold int64) (CgroupNotifier, error)
}

// memoryNotifier keeps one memory threshold armed in the kernel, as
// upstream's memory threshold notifier: the threshold is on the cgroup's
// usage, which includes inactive file pages the working set leaves out, so
// it is re-armed from fresh stats at most every notifierRefreshInterval.
type memoryNotifier struct {
	threshold Threshold
	cgroup    string // "/" for memory.available, the pods cgroup for allocatable
	factory   NotifierFactory
	events    chan struct{}
	current   CgroupNotifier
}

func (n *memoryNotifier) description() string {
	kind := "soft "
	if n.threshold.hard() {
		kind = "hard "
	}
	if n.threshold.Signal == SignalAllocatableMemoryAvailable {
		kind += "allocatable "
	}
	return kind + "memory eviction threshold"
}

// update re-arms the threshold where usage reaches capacity − threshold +
// inactive file, i.e. where the working set leaves less than the threshold.
func (n *memoryNotifier) update(ctx context.Context, summary *statsapi.Summary) error {
	mem := summary.Node.Memory
	if n.threshold.Signal == SignalAllocatableMemoryAvailable {
		mem = nil
		for _, sc := range summary.Node.SystemContainers {
			if sc.Name == statsapi.SystemContainerPods {
				mem = sc.Memory
			}
		}
	}
	if mem == nil || mem.UsageBytes == nil || mem.WorkingSetBytes == nil || mem.AvailableBytes == nil {
		return fmt.Errorf("summary was incomplete: no usage, working set and available memory for the %s", n.description())
	}
	inactiveFile := int64(*mem.UsageBytes) - int64(*mem.WorkingSetBytes)
	capacity := resource.NewQuantity(int64(*mem.AvailableBytes+*mem.WorkingSetBytes), resource.BinarySI)
	usage := capacity.Value() - n.threshold.Value.Of(capacity).Value() + inactiveFile
	klog.FromContext(ctx).V(3).Info("Eviction manager: setting notifier to capacity", "notifier", n.description(), "capacity", resource.NewQuantity(usage, resource.BinarySI).String())
	if n.current != nil {
		n.current.Stop()
		n.current = nil
	}
	c, err := n.factory.NewCgroupNotifier(n.cgroup, memoryUsageAttribute, usage)
	if err != nil {
		return err
	}
	n.current = c
	go c.Start(ctx, n.events)
	return nil
}

// startNotifiers creates a notifier for each memory threshold; each
// crossing runs a check at once.
func (m *Manager) startNotifiers(ctx context.Context) {
	logger := klog.FromContext(ctx)
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	for _, t := range m.cfg.Thresholds {
		if !isMemorySignal(t.Signal) {
			continue
		}
		n := &memoryNotifier{threshold: t, cgroup: "/", factory: m.deps.Notifiers, events: make(chan struct{})}
		if t.Signal == SignalAllocatableMemoryAvailable {
			n.cgroup = m.cfg.PodCgroupRoot
		}
		m.notifiers = append(m.notifiers, n)
		logger.Info("Eviction manager: created memoryThresholdNotifier", "notifier", n.description())
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-n.events:
					logger.Info(fmt.Sprintf("eviction manager: %s crossed", n.description()))
					m.synchronize(ctx)
				}
			}
		}()
	}
}

// refreshNotifiers re-arms the memory thresholds from summary when they are
// older than notifierRefreshInterval. It runs under syncMu.
func (m *Manager) refreshNotifiers(ctx context.Context, summary *statsapi.Summary) {
	if len(m.notifiers) == 0 || m.clock.Since(m.notifiersUpdated) <= notifierRefreshInterval {
		return
	}
	m.notifiersUpdated = m.clock.Now()
	for _, n := range m.notifiers {
		if err := n.update(ctx, summary); err != nil {
			klog.FromContext(ctx).Info("Eviction manager: failed to update notifier", "notifier", n.description(), "err", err)
		}
	}
}
