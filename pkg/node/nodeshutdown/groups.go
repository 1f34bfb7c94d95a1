package nodeshutdown

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// shutdownGroups returns the priority ranges pods are killed in, lowest
// priority first. Without ShutdownGracePeriodByPodPriority the two-group
// configuration is translated as upstream's migrateConfig does: pods below
// system-critical priority get ShutdownGracePeriod minus
// ShutdownGracePeriodCriticalPods, the others the critical period. No
// groups means graceful shutdown is off.
func shutdownGroups(cfg Config) []kubeletconfig.ShutdownGracePeriodByPodPriority {
	groups := slices.Clone(cfg.ShutdownGracePeriodByPodPriority)
	if len(groups) == 0 {
		groups = twoGroups(cfg.ShutdownGracePeriod, cfg.ShutdownGracePeriodCriticalPods)
	}
	slices.SortStableFunc(groups, func(a, b kubeletconfig.ShutdownGracePeriodByPodPriority) int {
		return cmp.Compare(a.Priority, b.Priority)
	})
	return groups
}

func twoGroups(total, critical time.Duration) []kubeletconfig.ShutdownGracePeriodByPodPriority {
	regular := total - critical
	if total == 0 || regular < 0 {
		return nil
	}
	return []kubeletconfig.ShutdownGracePeriodByPodPriority{
		{Priority: 0, ShutdownGracePeriodSeconds: int64(regular / time.Second)},
		{Priority: kubetypes.SystemCriticalPriority, ShutdownGracePeriodSeconds: int64(critical / time.Second)},
	}
}

// totalGracePeriod is how long the groups may take together, what logind's
// InhibitDelayMaxUSec must allow.
func totalGracePeriod(groups []kubeletconfig.ShutdownGracePeriodByPodPriority) time.Duration {
	var seconds int64
	for _, g := range groups {
		seconds += g.ShutdownGracePeriodSeconds
	}
	return time.Duration(seconds) * time.Second
}

// groupIndex returns the group of a pod of the given priority: the highest
// group whose priority is not above it (the first of equal ones). Pods below
// the lowest group go to the lowest one.
func groupIndex(groups []kubeletconfig.ShutdownGracePeriodByPodPriority, priority int32) int {
	i := sort.Search(len(groups), func(i int) bool { return groups[i].Priority >= priority })
	switch {
	case i == len(groups):
		return i - 1
	case i > 0 && groups[i].Priority > priority:
		return i - 1
	}
	return i
}

// podsByGroup splits pods by groupIndex; a nil spec priority counts as 0.
func podsByGroup(groups []kubeletconfig.ShutdownGracePeriodByPodPriority, pods []*v1.Pod) [][]*v1.Pod {
	byGroup := make([][]*v1.Pod, len(groups))
	for _, pod := range pods {
		var priority int32
		if pod.Spec.Priority != nil {
			priority = *pod.Spec.Priority
		}
		i := groupIndex(groups, priority)
		byGroup[i] = append(byGroup[i], pod)
	}
	return byGroup
}

// killPods kills the pods group after group, lowest priority first. A
// group's pods are killed in parallel, and the next group starts when they
// are all gone (and their volumes unmounted) or when the group's grace
// period is over, whichever comes first.
func (m *Manager) killPods(ctx context.Context, pods []*v1.Pod) error {
	for i, podsInGroup := range podsByGroup(m.groups, pods) {
		if err := ctx.Err(); err != nil {
			return err
		}
		// A priority range without pods is not waited for.
		if len(podsInGroup) == 0 {
			continue
		}
		if err := m.killGroup(ctx, m.groups[i], podsInGroup); err != nil {
			return err
		}
	}
	return nil
}

// killGroup kills one group's pods and waits for them at most the group's
// grace period; it fails only when ctx ends (the kubelet stops).
func (m *Manager) killGroup(ctx context.Context, group kubeletconfig.ShutdownGracePeriodByPodPriority, pods []*v1.Pod) error {
	period := time.Duration(group.ShutdownGracePeriodSeconds) * time.Second
	timer := m.clock.NewTimer(period)
	defer timer.Stop()
	groupCtx, cancel := context.WithTimeout(ctx, period)
	defer cancel()

	done := make(chan struct{})
	go func() {
		defer close(done)
		m.killAndWaitForUnmount(groupCtx, group.ShutdownGracePeriodSeconds, pods)
	}()

	select {
	case <-done:
		m.logger.V(1).Info("Done waiting for all pods in group to terminate", "gracePeriod", group.ShutdownGracePeriodSeconds, "priority", group.Priority)
	case <-timer.C():
		m.logger.V(1).Info("Shutdown manager pod killing time out", "gracePeriod", group.ShutdownGracePeriodSeconds, "priority", group.Priority)
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// killAndWaitForUnmount kills pods in parallel, then waits for their
// volumes to be unmounted, so that a CSI driver in a later group can still
// unmount them. The volume wait is best effort: a failure is logged.
func (m *Manager) killAndWaitForUnmount(ctx context.Context, groupGracePeriod int64, pods []*v1.Pod) {
	var wg sync.WaitGroup
	for _, pod := range pods {
		wg.Go(func() { m.killPod(pod, groupGracePeriod) })
	}
	wg.Wait()
	if m.deps.WaitForPodsUnmount == nil {
		return
	}
	if err := m.deps.WaitForPodsUnmount(ctx, pods); err != nil {
		names := make([]string, 0, len(pods))
		for _, pod := range pods {
			names = append(names, fmt.Sprintf("%s/%s", pod.Namespace, pod.Name))
		}
		m.logger.Error(err, "Failed while waiting for all the volumes belonging to Pods in this group to unmount", "pods", names)
	}
}

// killPod kills one pod with the group's grace period, or its own
// terminationGracePeriodSeconds when that is shorter, and marks it Failed
// with a DisruptionTarget condition.
func (m *Manager) killPod(pod *v1.Pod, groupGracePeriod int64) {
	grace := groupGracePeriod
	if tgps := pod.Spec.TerminationGracePeriodSeconds; tgps != nil && *tgps <= grace {
		grace = *tgps
	}
	m.logger.V(1).Info("Shutdown manager killing pod with gracePeriod", "pod", klog.KObj(pod), "gracePeriod", grace)
	if err := m.deps.KillPod(pod, m.shutdownStatus(pod), grace); err != nil {
		m.logger.V(1).Info("Shutdown manager failed killing pod", "pod", klog.KObj(pod), "err", err)
		return
	}
	m.logger.V(1).Info("Shutdown manager finished killing pod", "pod", klog.KObj(pod))
}

// shutdownStatus returns the status update of a pod killed for the
// shutdown: Failed (unless it already Succeeded), reason Terminated, and a
// DisruptionTarget condition saying the kubelet terminated it.
func (m *Manager) shutdownStatus(pod *v1.Pod) func(*v1.PodStatus) {
	return func(status *v1.PodStatus) {
		if status.Phase != v1.PodSucceeded {
			status.Phase = v1.PodFailed
		}
		status.Message = nodeShutdownMessage
		status.Reason = nodeShutdownReason
		setPodCondition(status, v1.PodCondition{
			Type:               v1.DisruptionTarget,
			ObservedGeneration: pod.Generation,
			Status:             v1.ConditionTrue,
			Reason:             v1.PodReasonTerminationByKubelet,
			Message:            nodeShutdownMessage,
		}, metav1.NewTime(m.clock.Now()))
	}
}

// setPodCondition sets c in status, keeping the transition time of an
// existing condition of its type whose status is unchanged.
func setPodCondition(status *v1.PodStatus, c v1.PodCondition, now metav1.Time) {
	c.LastTransitionTime = now
	for i := range status.Conditions {
		if status.Conditions[i].Type != c.Type {
			continue
		}
		if status.Conditions[i].Status == c.Status {
			c.LastTransitionTime = status.Conditions[i].LastTransitionTime
		}
		status.Conditions[i] = c
		return
	}
	status.Conditions = append(status.Conditions, c)
}
