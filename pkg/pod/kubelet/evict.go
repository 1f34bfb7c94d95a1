package kubelet

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/pod/podworkers"
)

// minKillTimeout is the least a caller of KillPodNow waits (upstream's killPodNow).
const minKillTimeout = 10 * time.Second

// KillPodNow asks the pod's worker to stop it, with statusFn setting its final status
// and gracePeriod overriding the pod's own, and waits until its containers are stopped
// (at most 1.5 × the grace period, at least 10 s). The eviction manager evicts through it.
func (k *Kubelet) KillPodNow(pod *v1.Pod, statusFn func(*v1.PodStatus), gracePeriod int64) error {
	k.workers.UpdatePod(podworkers.UpdatePodOptions{
		UpdateType: podworkers.SyncPodKill, Pod: pod, StartTime: k.deps.Clock.Now(),
		KillPodOptions: &podworkers.KillPodOptions{PodStatusFunc: statusFn, GracePeriodOverride: &gracePeriod},
	})
	timeout := max(minKillTimeout, time.Duration(gracePeriod+gracePeriod/2)*time.Second)
	deadline := k.deps.Clock.Now().Add(timeout)
	for k.workers.CouldHaveRunningContainers(pod.UID) {
		if k.deps.Clock.Now().After(deadline) {
			k.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "ExceededGracePeriod", "Container runtime did not kill the pod within specified grace period.")
			return fmt.Errorf("timeout waiting to kill pod %q", klog.KObj(pod))
		}
		k.deps.Clock.Sleep(100 * time.Millisecond)
	}
	return nil
}

// DeleteAllUnusedContainers removes every dead container the garbage collector may,
// those of pods not yet deleted included: the eviction manager's first reclaim under
// disk pressure.
func (k *Kubelet) DeleteAllUnusedContainers(ctx context.Context) error {
	return k.deps.Runtime.GarbageCollect(ctx, k.cfg.GCPolicy, k.sourcesReady(), true)
}

// PodResourcesReclaimed reports a pod whose containers, volumes and cgroup are released.
func (k *Kubelet) PodResourcesReclaimed(pod *v1.Pod) bool {
	return k.workers.ShouldPodContentBeRemoved(pod.UID)
}
