package status

import (
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/container"
	"github.com/nodelet/nodelet/pkg/prober/results"
)

// probeResults sets Started and Ready from the probe results, as upstream's probe manager
// UpdatePodStatus does. A container with no probe of a kind counts as passing it; a container
// with a probe that has no result yet counts as failing it.
type probeResults struct {
	readiness, startup results.Manager
}

func (p probeResults) apply(pod *v1.Pod, s *v1.PodStatus) {
	for i := range s.ContainerStatuses {
		cs := &s.ContainerStatuses[i]
		spec := containerSpec(pod, cs.Name)
		started := p.started(spec, cs)
		cs.Started = &started
		if started {
			cs.Ready = p.ready(spec, cs)
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
			cs.Ready = p.ready(spec, cs)
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

// ready: running, and the readiness probe passed (or there is none).
func (p probeResults) ready(spec *v1.Container, cs *v1.ContainerStatus) bool {
	if cs.State.Running == nil {
		return false
	}
	if r, ok := lookup(p.readiness, cs.ContainerID); ok && r == results.Success {
		return true
	}
	return spec == nil || spec.ReadinessProbe == nil
}

func lookup(m results.Manager, containerID string) (results.Result, bool) {
	if m == nil || containerID == "" {
		return results.Unknown, false
	}
	return m.Get(container.ParseContainerID(containerID))
}
