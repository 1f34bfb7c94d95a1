package status

import (
	"cmp"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// converter turns the runtime's view of one pod into API container statuses for one kind of
// container (init, regular or ephemeral); upstream's convertToAPIContainerStatuses.
type converter struct {
	pod               *v1.Pod
	podStatus         *container.PodStatus
	opts              *GenerateOptions
	hasInitContainers bool
}

// convert builds the statuses of containers, previous being their statuses last time.
func (cv *converter) convert(containers []v1.Container, previous []v1.ContainerStatus, isInit bool) []v1.ContainerStatus {
	old := make(map[string]v1.ContainerStatus, len(previous))
	for _, s := range previous {
		old[s.Name] = s
	}
	statuses := make(map[string]*v1.ContainerStatus, len(containers))
	for i := range containers {
		statuses[containers[i].Name] = cv.initialStatus(&containers[i], old)
	}
	cv.inferLostRunningContainers(containers, old, statuses)
	cv.applyRuntimeStatuses(old, statuses)
	cv.applyWaitingReasons(containers, statuses, isInit)
	return sortStatuses(cv.pod, containers, statuses, isInit)
}

// defaultWaitingReason is what a container waits for before the runtime has it.
func (cv *converter) defaultWaitingReason() string {
	if cv.hasInitContainers {
		return PodInitializing
	}
	return ContainerCreating
}

// initialStatus is a container's status before looking at the runtime: the old status when
// that was terminated (the runtime may have dropped the container since), otherwise waiting
// with the old restart count and last termination.
func (cv *converter) initialStatus(c *v1.Container, old map[string]v1.ContainerStatus) *v1.ContainerStatus {
	status := &v1.ContainerStatus{
		Name:         c.Name,
		Image:        c.Image,
		State:        v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: cv.defaultWaitingReason()}},
		VolumeMounts: volumeMountStatuses(c, cv.opts.RuntimeSupportsRecursiveReadOnlyMounts),
	}
	if prev, ok := old[c.Name]; ok {
		if prev.State.Terminated != nil {
			return prev.DeepCopy()
		}
		status.RestartCount = prev.RestartCount
		status.LastTerminationState = *prev.LastTerminationState.DeepCopy()
	}
	return status
}

// inferLostRunningContainers handles containers that were running last time but that the
// runtime no longer reports at all (removed behind the kubelet's back, or runtime state
// lost). Left waiting they would send the pod back to Pending; recording a lost termination
// keeps it counted as stopped, and it was a restart unless the pod is being deleted.
func (cv *converter) inferLostRunningContainers(containers []v1.Container, old map[string]v1.ContainerStatus, statuses map[string]*v1.ContainerStatus) {
	for _, c := range containers {
		if cv.podStatus.FindContainerStatusByName(c.Name) != nil {
			continue
		}
		prev, ok := old[c.Name]
		if !ok || prev.State.Terminated != nil || prev.State.Running == nil {
			continue
		}
		status := statuses[c.Name]
		stillDefault := status.State.Waiting != nil && status.State.Waiting.Reason == cv.defaultWaitingReason()
		if !stillDefault || status.LastTerminationState.Terminated != nil {
			continue
		}
		status.LastTerminationState.Terminated = &v1.ContainerStateTerminated{
			Reason:   ContainerStatusUnknown,
			Message:  msgLostWhileRunning,
			ExitCode: exitCodeLost,
		}
		if cv.pod.DeletionTimestamp == nil {
			status.RestartCount++
		}
	}
}

// applyRuntimeStatuses fills in what the runtime reports: the newest instance of each
// container gives its state, the one before gives its last termination state.
func (cv *converter) applyRuntimeStatuses(old map[string]v1.ContainerStatus, statuses map[string]*v1.ContainerStatus) {
	seen := map[string]int{}
	for _, cs := range newestFirst(cv.podStatus.ContainerStatuses) {
		if _, ours := statuses[cs.Name]; !ours || seen[cs.Name] >= 2 {
			// Not of this kind, or an older instance than we report.
			continue
		}
		var prev *v1.ContainerStatus
		if p, ok := old[cs.Name]; ok {
			prev = &p
		}
		status := convertContainerStatus(cs, prev)
		// ChangeContainerStatusOnKubeletRestart is off: a running container keeps "started"
		// (the probe results may be gone after a restart of nodelet). A new instance of
		// the container must pass its own startup probe.
		if cs.State == container.ContainerStateRunning && prev != nil && prev.Started != nil && prev.ContainerID == status.ContainerID {
			status.Started = prev.Started
		}
		if spec := containerSpec(cv.pod, cs.Name); spec != nil {
			status.Resources = containerStatusResources(spec, status, cs, prev, cv.opts.ActuatedResources)
			status.AllocatedResources = spec.Resources.Requests
		}
		if seen[cs.Name] == 0 {
			statuses[cs.Name] = status
		} else {
			statuses[cs.Name].LastTerminationState = status.State
		}
		seen[cs.Name]++
	}
}

// newestFirst returns a copy of the statuses sorted by creation time, newest first.
func newestFirst(in []*container.Status) []*container.Status {
	out := slices.Clone(in)
	slices.SortStableFunc(out, func(a, b *container.Status) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out
}

// convertContainerStatus converts one runtime container instance.
func convertContainerStatus(cs *container.Status, prev *v1.ContainerStatus) *v1.ContainerStatus {
	cid := cs.ID.String()
	status := &v1.ContainerStatus{
		Name:         cs.Name,
		RestartCount: int32(cs.RestartCount),
		Image:        cs.Image,
		// ContainerStatus.ImageID has always carried the digested image ref.
		ImageID:     cs.ImageRef,
		ContainerID: cid,
	}
	if prev != nil {
		// The runtime does not know volume names; mounts are immutable anyway.
		status.VolumeMounts = prev.VolumeMounts
	}
	switch {
	case cs.State == container.ContainerStateRunning:
		status.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(cs.StartedAt)}
	case cs.State == container.ContainerStateCreated:
		// Created but not started: waiting to run.
		status.State.Waiting = &v1.ContainerStateWaiting{}
	case cs.State == container.ContainerStateExited:
		status.State.Terminated = &v1.ContainerStateTerminated{
			ExitCode:    int32(cs.ExitCode),
			Reason:      cs.Reason,
			Message:     cs.Message,
			StartedAt:   metav1.NewTime(cs.StartedAt),
			FinishedAt:  metav1.NewTime(cs.FinishedAt),
			ContainerID: cid,
		}
	case cs.State == container.ContainerStateUnknown && prev != nil && prev.State.Running != nil:
		// It ran and the runtime cannot say how it ended: report a failure rather than
		// "waiting", which would let a run-once container run twice. The runtime did not
		// count this restart, so count it here.
		status.State.Terminated = &v1.ContainerStateTerminated{
			Reason:   ContainerStatusUnknown,
			Message:  msgLostOnTermination,
			ExitCode: exitCodeLost,
		}
		status.RestartCount = prev.RestartCount + 1
	default:
		// Any other unknown state reads as waiting (and so may put the pod back to Pending).
		status.State.Waiting = &v1.ContainerStateWaiting{}
	}
	return status
}

// applyWaitingReasons marks containers the next sync will (re)start as waiting, with the
// reason the last start failed (CrashLoopBackOff, ErrImagePull, ...), when one is known.
func (cv *converter) applyWaitingReasons(containers []v1.Container, statuses map[string]*v1.ContainerStatus, isInit bool) {
	for i := range containers {
		c := &containers[i]
		if isInit && cv.initContainerSettled(c, statuses[c.Name]) {
			continue
		}
		if !container.ShouldContainerBeRestarted(c, cv.pod, cv.podStatus) || cv.opts.BackOffReasons == nil {
			continue
		}
		reason, message, ok := cv.opts.BackOffReasons(c.Name)
		if !ok {
			// Without a recorded failure the current state says more; a restart is near.
			continue
		}
		status := statuses[c.Name]
		if status.State.Terminated != nil {
			status.LastTerminationState = status.State
		}
		status.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason, Message: message}}
	}
}

// initContainerSettled reports an init container that will not run again: it completed, or
// the runtime lost it after regular containers were created (static pods do not keep their
// status in the API, so it cannot be recovered; completion is the only way there).
func (cv *converter) initContainerSettled(c *v1.Container, status *v1.ContainerStatus) bool {
	s := cv.podStatus.FindContainerStatusByName(c.Name)
	if s != nil && s.State == container.ContainerStateExited && s.ExitCode == 0 {
		return true
	}
	if s == nil && !isRestartableInitContainer(c) && status.State.Waiting != nil && hasAnyRegularContainerCreated(cv.pod, cv.podStatus) {
		status.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{Reason: "Completed", Message: msgInitLost}}
		return true
	}
	return false
}

// sortStatuses orders init container statuses as the spec does, the others by name, so
// that clients see a stable order.
func sortStatuses(pod *v1.Pod, containers []v1.Container, statuses map[string]*v1.ContainerStatus, isInit bool) []v1.ContainerStatus {
	out := make([]v1.ContainerStatus, 0, len(statuses))
	if isInit {
		for _, c := range pod.Spec.InitContainers {
			if s, ok := statuses[c.Name]; ok {
				out = append(out, *s)
			}
		}
		return out
	}
	for _, c := range containers {
		out = append(out, *statuses[c.Name])
	}
	slices.SortFunc(out, func(a, b v1.ContainerStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// volumeMountStatuses reports the container's mounts (RecursiveReadOnlyMounts is GA): read-only
// mounts say whether they are recursively read-only.
func volumeMountStatuses(c *v1.Container, runtimeSupportsRRO bool) []v1.VolumeMountStatus {
	var out []v1.VolumeMountStatus
	for _, m := range c.VolumeMounts {
		s := v1.VolumeMountStatus{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly}
		if m.ReadOnly {
			mode := v1.RecursiveReadOnlyDisabled
			if recursiveReadOnly(m, runtimeSupportsRRO) {
				mode = v1.RecursiveReadOnlyEnabled
			}
			s.RecursiveReadOnly = &mode
		}
		out = append(out, s)
	}
	return out
}

// recursiveReadOnly resolves a mount's recursiveReadOnly request; invalid requests (which the
// runtime manager refuses to start) read as disabled.
func recursiveReadOnly(m v1.VolumeMount, runtimeSupportsRRO bool) bool {
	if m.RecursiveReadOnly == nil || !m.ReadOnly {
		return false
	}
	if m.MountPropagation != nil && *m.MountPropagation != v1.MountPropagationNone {
		return false
	}
	switch *m.RecursiveReadOnly {
	case v1.RecursiveReadOnlyIfPossible, v1.RecursiveReadOnlyEnabled:
		return runtimeSupportsRRO
	default:
		return false
	}
}
