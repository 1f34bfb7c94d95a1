package kuberuntime

import (
	"fmt"
	"math"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/container"
)

// Thresholds below which CPU values are equivalent (upstream's cm.MinShares and
// cm.MinMilliCPULimit).
const (
	minShares        = 2
	minMilliCPULimit = 10
	sharesPerCPU     = 1024
	milliCPUToCPU    = 1000
)

// containerResources are the resize-relevant resources: bytes and milli-CPUs.
type containerResources struct {
	memoryLimit int64
	cpuLimit    int64
	cpuRequest  int64
}

// computeResizeAction compares a running container's resources, as the runtime reports
// them, with its spec. When they differ and the resize policy of a changed resource says
// RestartContainer, the container is killed and restarted (restart adds it to the start
// list); otherwise it is recorded for an in-place resize, which is not supported yet. It
// returns whether the container is kept running.
func (m *Manager) computeResizeAction(pod *v1.Pod, spec *v1.Container, cs *container.Status, changes *podActions, restart func()) bool {
	if isStaticPod(pod) || cs.Resources.GetLinux() == nil {
		return true // static pods are never resized; without runtime data there is nothing to compare
	}
	desired := desiredResources(spec)
	current := currentResources(cs.Resources.GetLinux())
	if !m.opts.CPUCFSQuota {
		current.cpuLimit = desired.cpuLimit // limits are not enforced, so they cannot differ
	}
	equalizeMinimums(&desired, &current)
	if desired == current {
		return true
	}
	changed := map[v1.ResourceName]bool{
		v1.ResourceMemory: desired.memoryLimit != current.memoryLimit,
		v1.ResourceCPU:    desired.cpuLimit != current.cpuLimit || desired.cpuRequest != current.cpuRequest,
	}
	for _, p := range spec.ResizePolicy {
		if changed[p.ResourceName] && p.RestartPolicy == v1.RestartContainer {
			changes.ContainersToKill[cs.ID] = containerToKill{
				name: cs.Name, container: spec,
				message: fmt.Sprintf("Container %s resize requires restart", spec.Name),
			}
			restart()
			return false
		}
	}
	changes.ContainersToResize = append(changes.ContainersToResize, spec.Name)
	return true
}

func desiredResources(c *v1.Container) containerResources {
	r := containerResources{
		memoryLimit: c.Resources.Limits.Memory().Value(),
		cpuLimit:    c.Resources.Limits.Cpu().MilliValue(),
		cpuRequest:  c.Resources.Requests.Cpu().MilliValue(),
	}
	if r.cpuRequest == 0 {
		// A missing request defaults to the limit (API defaulting; file pods skip it).
		r.cpuRequest = r.cpuLimit
	}
	return r
}

// currentResources converts the runtime's cgroup values back to bytes and milli-CPUs.
func currentResources(r *runtimeapi.LinuxContainerResources) containerResources {
	var out containerResources
	if r.MemoryLimitInBytes > 0 {
		out.memoryLimit = r.MemoryLimitInBytes
	}
	if r.CpuPeriod > 0 && r.CpuQuota > 0 {
		out.cpuLimit = r.CpuQuota * milliCPUToCPU / r.CpuPeriod
	}
	if r.CpuShares >= minShares {
		out.cpuRequest = int64(math.Ceil(float64(r.CpuShares*milliCPUToCPU) / float64(sharesPerCPU)))
	}
	return out
}

// equalizeMinimums treats CPU values at or below the kernel's minimums as equal, since they
// map to the same cgroup setting.
func equalizeMinimums(desired, current *containerResources) {
	if desired.cpuRequest <= minShares && current.cpuRequest <= minShares {
		desired.cpuRequest = current.cpuRequest
	}
	if desired.cpuLimit <= minMilliCPULimit && current.cpuLimit <= minMilliCPULimit {
		desired.cpuLimit = current.cpuLimit
	}
}
