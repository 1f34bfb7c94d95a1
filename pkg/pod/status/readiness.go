package status

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// probeResults sets Started and Ready from the probe results, as upstream's probe manager
// UpdatePodStatus does. A container with no probe of a kind counts as passing it; a container
// with a probe that has no result yet counts as failing it.
type probeResults struct {
	readiness, startup results.Manager
	kubeletStart       time.Time
}

// kubeletRestartSlack is upstream's kubeletRestartGracePeriod: a container counts as found
// running by a (re)started kubelet if it started this long before the kubelet.
const kubeletRestartSlack = 10 * time.Second

func (p probeResults) apply(pod *v1.Pod, s *v1.PodStatus) {
	for i := range s.ContainerStatuses {
		cs := &s.ContainerStatuses[i]
		spec := containerSpec(pod, cs.Name)
		started := p.started(spec, cs)
		cs.Started = &started
		if started {
			cs.Ready = p.ready(pod, spec, cs)
		}
	}
	for i := range s.InitContainerStatuses {
		cs := &s.InitContainerStatuses[i]
		spec := containerSpec(pod, cs.Name)
		started := p.started(spec, cs)
		cs.Started = &started
		if !isRestartableInitContainer(spec) {
			// A regular init container is ready once it completed.
			if cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0 {
				cs.Ready = true
			}
			continue
		}
		if started {
			cs.Ready = p.ready(pod, spec, cs)
		}
	}
}

// started: running, and the startup probe passed (or there is none). Once reported started,
// a running container stays started even without a result (a restarted kubelet has none).
func (p probeResults) started(spec *v1.Container, cs *v1.ContainerStatus) bool {
	if cs.State.Running == nil {
		return false
	}
	if r, ok := lookup(p.startup, cs.ContainerID); ok {
		return r == results.Success
	}
	if cs.Started != nil && *cs.Started {
		return true
	}
	return spec == nil || spec.StartupProbe == nil
}

// ready: running, and the readiness probe passed (or there is none). A container that was
// already running when this kubelet started and has no readiness result yet keeps the
// pod's readiness, as upstream since v1.35 (ChangeContainerStatusOnKubeletRestart off):
// a kubelet restart, or a switch from another kubelet, must not take the pod out of its
// Services until a probe actually fails.
func (p probeResults) ready(pod *v1.Pod, spec *v1.Container, cs *v1.ContainerStatus) bool {
	if cs.State.Running == nil {
		return false
	}
	noProbe := spec == nil || spec.ReadinessProbe == nil
	r, probed := lookup(p.readiness, cs.ContainerID)
	switch {
	case probed && r == results.Success:
		return true
	case !probed && p.foundRunning(cs):
		return noProbe || podReady(pod)
	}
	return noProbe
}

func (p probeResults) foundRunning(cs *v1.ContainerStatus) bool {
	started := cs.State.Running.StartedAt.Time
	return !p.kubeletStart.IsZero() && !started.IsZero() && started.Before(p.kubeletStart.Add(-kubeletRestartSlack))
}

// podReady: the pod's Ready condition as the API last showed it (a static pod has none, so
// its probed containers wait for their probe, as upstream).
func podReady(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func lookup(m results.Manager, containerID string) (results.Result, bool) {
	if m == nil || containerID == "" {
		return results.Unknown, false
	}
	return m.Get(container.ParseContainerID(containerID))
}
