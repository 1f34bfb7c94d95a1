package status

import (
	"net"
	"slices"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	utilnet "k8s.io/utils/net"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Feature gates fixed at their upstream defaults for the Kubernetes version nodelet follows:
// ContainerRestartRules on (beta), PodReadyToStartContainersCondition on (beta),
// PodObservedGenerationTracking on (GA), InPlacePodVerticalScaling on (GA),
// RecursiveReadOnlyMounts on (GA), ChangeContainerStatusOnKubeletRestart off (deprecated),
// RestartAllContainersOnContainerExits off (alpha).

// isRestartableInitContainer reports a sidecar: an init container with restartPolicy Always.
func isRestartableInitContainer(c *v1.Container) bool {
	return c != nil && c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// hasAnyRegularContainerStarted reports whether any regular container ever left the waiting
// state, judged from API statuses: proof that the pod was initialized once.
func hasAnyRegularContainerStarted(spec *v1.PodSpec, statuses []v1.ContainerStatus) bool {
	for _, s := range statuses {
		if !hasContainerNamed(spec.Containers, s.Name) {
			continue
		}
		if s.State.Running != nil || s.State.Terminated != nil {
			return true
		}
	}
	return false
}

// hasAnyRegularContainerCreated reports whether the runtime has any instance of a regular
// container, which implies all init containers completed.
func hasAnyRegularContainerCreated(pod *v1.Pod, podStatus *container.PodStatus) bool {
	for _, c := range pod.Spec.Containers {
		s := podStatus.FindContainerStatusByName(c.Name)
		if s == nil {
			continue
		}
		switch s.State {
		case container.ContainerStateCreated, container.ContainerStateRunning, container.ContainerStateExited:
			return true
		}
	}
	return false
}

// hasAnyActiveRegularContainerStarted reports whether a regular container exists in the
// pod's current sandbox (upstream's HasAnyActiveRegularContainerStarted over
// PodStatus.ActiveContainerStatuses). The runtime status here carries no sandbox ID per
// container, so "in the current sandbox" is read as "created after the newest sandbox,
// which is ready": a container of an older sandbox was necessarily created before it.
func hasAnyActiveRegularContainerStarted(spec *v1.PodSpec, podStatus *container.PodStatus) bool {
	if podStatus == nil || len(podStatus.SandboxStatuses) == 0 {
		return false
	}
	sandbox := podStatus.SandboxStatuses[0]
	if sandbox.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		return false
	}
	for _, s := range podStatus.ContainerStatuses {
		if hasContainerNamed(spec.Containers, s.Name) && s.CreatedAt.UnixNano() >= sandbox.GetCreatedAt() {
			return true
		}
	}
	return false
}

func hasContainerNamed(containers []v1.Container, name string) bool {
	return slices.ContainsFunc(containers, func(c v1.Container) bool { return c.Name == name })
}

// containerSpec finds a container of any kind (init, regular, ephemeral) by name.
func containerSpec(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			return (*v1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		}
	}
	return nil
}

// findStatus returns the named status, as upstream's podutil.GetContainerStatus.
func findStatus(statuses []v1.ContainerStatus, name string) (v1.ContainerStatus, bool) {
	for i := range statuses {
		if statuses[i].Name == name {
			return statuses[i], true
		}
	}
	return v1.ContainerStatus{}, false
}

// sandboxNeedsReplacing mirrors the runtime manager's PodSandboxChanged without the attempt
// bookkeeping: a pod needs a new sandbox when it has none, more than one ready, the newest not
// ready, the wrong network namespace mode, or (pod network) no IP.
func sandboxNeedsReplacing(pod *v1.Pod, podStatus *container.PodStatus) bool {
	if podStatus == nil || len(podStatus.SandboxStatuses) == 0 {
		return true
	}
	ready := 0
	for _, s := range podStatus.SandboxStatuses {
		if s.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			ready++
		}
	}
	newest := podStatus.SandboxStatuses[0]
	if ready > 1 || newest.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		return true
	}
	if newest.GetLinux().GetNamespaces().GetOptions().GetNetwork() != networkNamespaceMode(pod) {
		return true
	}
	return !pod.Spec.HostNetwork && newest.GetNetwork() != nil && newest.GetNetwork().GetIp() == ""
}

func networkNamespaceMode(pod *v1.Pod) runtimeapi.NamespaceMode {
	if pod.Spec.HostNetwork {
		return runtimeapi.NamespaceMode_NODE
	}
	return runtimeapi.NamespaceMode_POD
}

// sortPodIPs keeps the first IP of the node's primary family, then the first of the other
// family: at most one of each, primary first (upstream's sortPodIPs). The primary family is
// that of hostIPs[0], IPv4 when unknown. IPs are re-printed in canonical form.
func sortPodIPs(podIPs, hostIPs []string) []string {
	primary, secondary := utilnet.IsIPv4, utilnet.IsIPv6
	if len(hostIPs) > 0 && utilnet.IsIPv6String(hostIPs[0]) {
		primary, secondary = utilnet.IsIPv6, utilnet.IsIPv4
	}
	var out []string
	for _, family := range []func(net.IP) bool{primary, secondary} {
		for _, s := range podIPs {
			if ip := utilnet.ParseIPSloppy(s); ip != nil && family(ip) {
				out = append(out, ip.String())
				break
			}
		}
	}
	return out
}
