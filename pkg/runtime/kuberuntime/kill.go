package kuberuntime

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/outage"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// KillPod stops every container of runningPod in parallel, then every sandbox. pod may be
// nil (e.g. after a restart of nodelet): what killing needs is then restored from the
// containers' labels and annotations. gracePeriodOverride, when set, replaces the grace
// period of every container (hard evictions).
func (m *Manager) KillPod(ctx context.Context, pod *v1.Pod, runningPod container.Pod, gracePeriodOverride *int64) error {
	result := m.killPodWithSyncResult(ctx, pod, runningPod, gracePeriodOverride)
	return result.Error()
}

func (m *Manager) killPodWithSyncResult(ctx context.Context, pod *v1.Pod, runningPod container.Pod, gracePeriodOverride *int64) (result container.PodSyncResult) {
	result.AddSyncResult(m.killContainersWithSyncResult(ctx, pod, runningPod, gracePeriodOverride)...)

	// Stopped sandboxes are removed later by GC.
	sandboxResult := container.NewSyncResult(container.KillPodSandbox, runningPod.ID)
	result.AddSyncResult(sandboxResult)
	for _, sb := range runningPod.Sandboxes {
		if err := m.runtime.StopPodSandbox(ctx, sb.ID.ID); err != nil && !cri.IsNotFound(err) {
			sandboxResult.Fail(container.ErrKillPodSandbox, err.Error())
			outage.ErrorS(err, "Failed to stop sandbox", "podSandboxID", sb.ID)
		}
	}
	return result
}

// killContainersWithSyncResult stops the containers in parallel; with sidecars, they stop
// after the regular containers, later sidecars first.
func (m *Manager) killContainersWithSyncResult(ctx context.Context, pod *v1.Pod, runningPod container.Pod, gracePeriodOverride *int64) []*container.SyncResult {
	var ordering *terminationOrdering
	if hasRestartableInitContainer(pod) {
		names := make([]string, 0, len(runningPod.Containers))
		for _, c := range runningPod.Containers {
			names = append(names, c.Name)
		}
		ordering = newTerminationOrdering(pod, names)
	}
	out := make([]*container.SyncResult, len(runningPod.Containers))
	var wg sync.WaitGroup
	for i, c := range runningPod.Containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer utilruntime.HandleCrash()
			r := container.NewSyncResult(container.KillContainer, c.Name)
			if err := m.killContainer(ctx, pod, c.ID, c.Name, "", reasonUnknown, gracePeriodOverride, ordering); err != nil {
				r.Fail(container.ErrKillContainer, err.Error())
				outage.ErrorS(err, "Kill container failed", "pod", klog.KRef(runningPod.Namespace, runningPod.Name),
					"podUID", runningPod.ID, "containerName", c.Name, "containerID", c.ID)
			}
			out[i] = r
		}()
	}
	wg.Wait()
	return out
}

// killContainer runs the preStop hook (which consumes grace time) and stops the container
// with what is left of the grace period, never less than 2 seconds. A container the
// runtime no longer knows counts as stopped.
func (m *Manager) killContainer(ctx context.Context, pod *v1.Pod, id container.ContainerID, name, message string, reason killReason, gracePeriodOverride *int64, ordering *terminationOrdering) error {
	var spec *v1.Container
	if pod != nil {
		if spec = container.GetContainerSpec(pod, name); spec == nil {
			return fmt.Errorf("failed to get containerSpec %q (id=%q) in pod %q when killing container for reason %q",
				name, id.String(), podFullName(pod), message)
		}
	} else {
		var err error
		if pod, spec, err = m.restoreSpecsFromContainerLabels(ctx, id); err != nil {
			return err
		}
	}

	grace := terminationGracePeriod(pod, spec, reason)
	if message == "" {
		message = fmt.Sprintf("Stopping container %s", spec.Name)
	}
	m.recordContainerEvent(pod, spec, id.ID, v1.EventTypeNormal, eventKillingContainer, "%v", message)
	if gracePeriodOverride != nil {
		grace = *gracePeriodOverride
		klog.V(3).InfoS("Killing container with a grace period override", "pod", klog.KObj(pod), "podUID", pod.UID,
			"containerName", name, "containerID", id.String(), "gracePeriod", grace)
	}
	if spec.Lifecycle != nil && spec.Lifecycle.PreStop != nil && grace > 0 {
		grace -= m.executePreStopHook(ctx, pod, id, spec, grace)
	}
	if ordering != nil && grace > 0 {
		// Whole seconds: the time waited is truncated downward.
		grace -= int64(ordering.waitForTurn(m, name, grace).Seconds())
	}
	grace = max(grace, minimumGracePeriodInSeconds)

	klog.V(2).InfoS("Killing container with a grace period", "pod", klog.KObj(pod), "podUID", pod.UID,
		"containerName", name, "containerID", id.String(), "gracePeriod", grace)
	if err := m.runtime.StopContainer(ctx, id.ID, grace); err != nil && !cri.IsNotFound(err) {
		outage.ErrorS(err, "Container termination failed with gracePeriod", "pod", klog.KObj(pod), "podUID", pod.UID,
			"containerName", name, "containerID", id.String(), "gracePeriod", grace)
		return err
	}
	klog.V(3).InfoS("Container exited normally", "pod", klog.KObj(pod), "podUID", pod.UID,
		"containerName", name, "containerID", id.String())
	if ordering != nil {
		ordering.containerTerminated(name)
	}
	return nil
}

// terminationGracePeriod picks the grace period: the pod's deletion grace period if it is
// being deleted, else a failed probe's own terminationGracePeriodSeconds, else the pod's
// terminationGracePeriodSeconds, else 2 seconds.
func terminationGracePeriod(pod *v1.Pod, spec *v1.Container, reason killReason) int64 {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return *pod.DeletionGracePeriodSeconds
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		var probe *v1.Probe
		switch reason {
		case reasonStartupProbe:
			probe = spec.StartupProbe
		case reasonLivenessProbe:
			probe = spec.LivenessProbe
		}
		if probe != nil && probe.TerminationGracePeriodSeconds != nil {
			return *probe.TerminationGracePeriodSeconds
		}
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return minimumGracePeriodInSeconds
}

// executePreStopHook runs the preStop hook for at most gracePeriod seconds and returns how
// many whole seconds it took. A hook still running at the deadline is cancelled: the
// container is about to be stopped anyway.
func (m *Manager) executePreStopHook(ctx context.Context, pod *v1.Pod, id container.ContainerID, spec *v1.Container, gracePeriod int64) int64 {
	klog.V(3).InfoS("Running preStop hook", "pod", klog.KObj(pod), "podUID", pod.UID, "containerName", spec.Name, "containerID", id.String())
	start := m.clock.Now()
	hookCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer utilruntime.HandleCrash()
		if _, err := m.hooks.run(hookCtx, id, pod, spec, spec.Lifecycle.PreStop); err != nil {
			outage.ErrorS(err, "PreStop hook failed", "pod", klog.KObj(pod), "podUID", pod.UID,
				"containerName", spec.Name, "containerID", id.String())
			// The hook's output stays out of the event: it may hold secrets.
			m.recordContainerEvent(pod, spec, id.ID, v1.EventTypeWarning, eventFailedPreStopHook, "PreStopHook failed")
		}
	}()
	select {
	case <-m.clock.After(time.Duration(gracePeriod) * time.Second):
		klog.V(2).InfoS("PreStop hook not completed in grace period", "pod", klog.KObj(pod), "podUID", pod.UID,
			"containerName", spec.Name, "containerID", id.String(), "gracePeriod", gracePeriod)
	case <-done:
		klog.V(3).InfoS("PreStop hook completed", "pod", klog.KObj(pod), "podUID", pod.UID,
			"containerName", spec.Name, "containerID", id.String())
	}
	return int64(m.clock.Since(start).Seconds())
}

// restoreSpecsFromContainerLabels rebuilds, from a container's labels and annotations,
// the parts of pod and container spec that killing needs (names, grace periods, preStop
// hook, ports), for when the pod spec is gone.
func (m *Manager) restoreSpecsFromContainerLabels(ctx context.Context, id container.ContainerID) (*v1.Pod, *v1.Container, error) {
	resp, err := m.runtime.ContainerStatus(ctx, id.ID, false)
	if err != nil {
		return nil, nil, err
	}
	s := resp.GetStatus()
	if s == nil {
		return nil, nil, cri.ErrContainerStatusNil
	}
	l := criconfig.GetContainerInfoFromLabels(s.Labels)
	a := criconfig.GetContainerInfoFromAnnotations(s.Annotations)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			UID: l.PodUID, Name: l.PodName, Namespace: l.PodNamespace,
			DeletionGracePeriodSeconds: a.PodDeletionGracePeriod,
		},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: a.PodTerminationGracePeriod},
	}
	c := &v1.Container{Name: l.ContainerName, Ports: a.ContainerPorts, TerminationMessagePath: a.TerminationMessagePath}
	if a.PreStopHandler != nil {
		c.Lifecycle = &v1.Lifecycle{PreStop: a.PreStopHandler}
	}
	// The restored pod lists the container, so event references resolve.
	pod.Spec.Containers = []v1.Container{*c}
	return pod, c, nil
}

// terminationOrdering makes sidecars (restartable init containers) stop after the regular
// containers, and later sidecars before earlier ones.
type terminationOrdering struct {
	mu sync.Mutex
	// terminated[name] is closed once that container has stopped.
	terminated map[string]chan struct{}
	// prereqs[name] are the channels that container waits on before stopping.
	prereqs map[string][]chan struct{}
}

func newTerminationOrdering(pod *v1.Pod, runningNames []string) *terminationOrdering {
	o := &terminationOrdering{terminated: map[string]chan struct{}{}, prereqs: map[string][]chan struct{}{}}
	running := map[string]bool{}
	for _, n := range runningNames {
		running[n] = true
	}
	channel := func(name string) chan struct{} {
		ch := make(chan struct{})
		if !running[name] {
			close(ch) // nothing to wait for
		}
		o.terminated[name] = ch
		return ch
	}
	var mains []chan struct{}
	for _, c := range pod.Spec.Containers {
		mains = append(mains, channel(c.Name))
	}
	var laterSidecar chan struct{}
	for i := len(pod.Spec.InitContainers) - 1; i >= 0; i-- {
		ic := &pod.Spec.InitContainers[i]
		ch := channel(ic.Name)
		if !isRestartableInitContainer(ic) {
			continue
		}
		o.prereqs[ic.Name] = append(o.prereqs[ic.Name], mains...)
		if laterSidecar != nil {
			o.prereqs[ic.Name] = append(o.prereqs[ic.Name], laterSidecar)
		}
		laterSidecar = ch
	}
	return o
}

// waitForTurn blocks until the containers that must stop before name have stopped, or the
// grace period ran out; it returns the time waited.
func (o *terminationOrdering) waitForTurn(m *Manager, name string, gracePeriod int64) time.Duration {
	if gracePeriod <= 0 {
		return 0
	}
	start := m.clock.Now()
	deadline := m.clock.After(time.Duration(gracePeriod) * time.Second)
	for _, ch := range o.prereqs[name] {
		select {
		case <-ch:
		case <-deadline:
			return m.clock.Since(start)
		}
	}
	return m.clock.Since(start)
}

// containerTerminated marks name as stopped.
func (o *terminationOrdering) containerTerminated(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ch, ok := o.terminated[name]; ok {
		close(ch)
		delete(o.terminated, name)
	}
}
