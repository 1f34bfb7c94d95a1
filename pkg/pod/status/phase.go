package status

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// phaseCounts tallies container states for getPhase.
type phaseCounts struct {
	// Regular init containers.
	pendingInit, failedInitNotRestartable int
	// Sidecars not yet started.
	pendingSidecars int
	// Regular containers and sidecars.
	unknown, running, waiting, stopped, stoppedNotRestartable, succeeded int
}

// getPhase computes the pod phase from its API container statuses (regular and init),
// following upstream's getPhase with ContainerRestartRules on. podIsTerminal says the pod
// worker has stopped the pod for good; podHasInitialized that a regular container runs in
// the current sandbox.
func getPhase(pod *v1.Pod, statuses []v1.ContainerStatus, podIsTerminal, podHasInitialized bool) v1.PodPhase {
	var n phaseCounts
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if isRestartableInitContainer(c) {
			n.countSidecar(c, statuses)
		} else {
			n.countInit(c, &pod.Spec, statuses)
		}
	}
	for i := range pod.Spec.Containers {
		n.countRegular(&pod.Spec.Containers[i], &pod.Spec, statuses)
	}

	switch {
	case n.failedInitNotRestartable > 0:
		return v1.PodFailed
	case n.pendingInit > 0 || (n.pendingSidecars > 0 && !podHasInitialized):
		// Once initialized, a restarting sidecar does not send the pod back to Pending.
		return v1.PodPending
	case n.waiting > 0:
		// One or more containers have not been started.
		return v1.PodPending
	case n.running > 0 && n.unknown == 0:
		return v1.PodRunning
	case n.running == 0 && n.stopped > 0 && n.unknown == 0:
		return n.allStoppedPhase(pod, podIsTerminal)
	default:
		return v1.PodPending
	}
}

// allStoppedPhase is the phase when every container has stopped at least once.
func (n *phaseCounts) allStoppedPhase(pod *v1.Pod, podIsTerminal bool) v1.PodPhase {
	// A terminal pod restarts nothing, whatever the restart policy says. Upstream keeps
	// static pods out of this (TODO #116484 there).
	if podIsTerminal && !kubetypes.IsStaticPod(pod) {
		if n.stopped == n.succeeded {
			return v1.PodSucceeded
		}
		return v1.PodFailed
	}
	if n.stopped != n.stoppedNotRestartable {
		// At least one container is on its way to restart.
		return v1.PodRunning
	}
	if n.stopped == n.succeeded {
		return v1.PodSucceeded
	}
	return v1.PodFailed
}

func (n *phaseCounts) countInit(c *v1.Container, spec *v1.PodSpec, statuses []v1.ContainerStatus) {
	s, ok := findStatus(statuses, c.Name)
	switch {
	case !ok, s.State.Running != nil:
		n.pendingInit++
	case s.State.Terminated != nil:
		if code := s.State.Terminated.ExitCode; code != 0 && !container.ContainerShouldRestart(c, spec, code) {
			n.failedInitNotRestartable++
		}
	case s.State.Waiting != nil && s.LastTerminationState.Terminated != nil:
		if code := s.LastTerminationState.Terminated.ExitCode; code != 0 && !container.ContainerShouldRestart(c, spec, code) {
			n.failedInitNotRestartable++
		}
	default:
		n.pendingInit++
	}
}

func (n *phaseCounts) countSidecar(c *v1.Container, statuses []v1.ContainerStatus) {
	s, ok := findStatus(statuses, c.Name)
	switch {
	case !ok:
		n.unknown++
	case s.State.Running != nil:
		if s.Started == nil || !*s.Started {
			n.pendingSidecars++
		}
		n.running++
	case s.State.Terminated != nil:
		// A stopped sidecar does not count towards the phase.
	case s.State.Waiting != nil:
		if s.LastTerminationState.Terminated == nil {
			n.pendingSidecars++
			n.waiting++
		}
	default:
		n.pendingSidecars++
		n.unknown++
	}
}

func (n *phaseCounts) countRegular(c *v1.Container, spec *v1.PodSpec, statuses []v1.ContainerStatus) {
	s, ok := findStatus(statuses, c.Name)
	switch {
	case !ok:
		n.unknown++
	case s.State.Running != nil:
		n.running++
	case s.State.Terminated != nil:
		n.stopped++
		code := s.State.Terminated.ExitCode
		if !container.ContainerShouldRestart(c, spec, code) {
			n.stoppedNotRestartable++
		}
		if code == 0 {
			n.succeeded++
		}
	case s.State.Waiting != nil && s.LastTerminationState.Terminated != nil:
		n.stopped++
		if !container.ContainerShouldRestart(c, spec, s.LastTerminationState.Terminated.ExitCode) {
			n.stoppedNotRestartable++
		}
	case s.State.Waiting != nil:
		n.waiting++
	default:
		n.unknown++
	}
}
