package kuberuntime

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// killReason says why a container is killed; it selects a probe's grace period.
type killReason string

const (
	reasonStartupProbe        killReason = "StartupProbe"
	reasonLivenessProbe       killReason = "LivenessProbe"
	reasonFailedPostStartHook killReason = "FailedPostStartHook"
	reasonUnknown             killReason = "Unknown"
)

// containerToKill is one container SyncPod must stop, and why.
type containerToKill struct {
	container *v1.Container
	name      string
	message   string
	reason    killReason
}

// podActions is what SyncPod must do to converge a pod (upstream's podActions).
type podActions struct {
	// KillPod stops every container and sandbox of the pod.
	KillPod bool
	// CreateSandbox starts a new sandbox (after killing the old one); init containers
	// are then purged and initialization starts over.
	CreateSandbox bool
	// SandboxID is the existing sandbox the containers start in.
	SandboxID string
	// Attempt is the attempt number for a new sandbox, or the current one's.
	Attempt uint32
	// InitContainersToStart are indexes into pod.Spec.InitContainers, in start order.
	InitContainersToStart []int
	// ContainersToStart are indexes into pod.Spec.Containers.
	ContainersToStart []int
	// ContainersToKill maps a running container to why it must stop.
	ContainersToKill map[container.ContainerID]containerToKill
	// EphemeralContainersToStart are indexes into pod.Spec.EphemeralContainers.
	EphemeralContainersToStart []int
	// ContainersToUpdate are the running containers resized in place, per resource, in
	// update order (decreases first).
	ContainersToUpdate map[v1.ResourceName][]containerToUpdate
	// UpdatePodResources says the pod's cgroup must follow containers that restart with
	// new resources.
	UpdatePodResources bool
	// UpdatePodLevelResources says the pod-level resources changed since last applied.
	UpdatePodLevelResources bool
}

func (p podActions) String() string {
	updates := map[v1.ResourceName][]string{}
	for name, list := range p.ContainersToUpdate {
		for _, u := range list {
			updates[name] = append(updates[name], u.spec.Name)
		}
	}
	return fmt.Sprintf("KillPod: %t, CreateSandbox: %t, UpdatePodResources: %t, UpdatePodLevelResources: %t, Attempt: %d, InitContainersToStart: %v, ContainersToStart: %v, EphemeralContainersToStart: %v, ContainersToUpdate: %v, ContainersToKill: %d",
		p.KillPod, p.CreateSandbox, p.UpdatePodResources, p.UpdatePodLevelResources, p.Attempt, p.InitContainersToStart, p.ContainersToStart, p.EphemeralContainersToStart, updates, len(p.ContainersToKill))
}

// computePodActions compares the pod spec with the runtime's state and the probe results
// and decides what SyncPod must do, with upstream's semantics.
func (m *Manager) computePodActions(pod *v1.Pod, status *container.PodStatus) podActions {
	createSandbox, attempt, sandboxID := podSandboxChanged(pod, status)
	changes := podActions{
		KillPod:          createSandbox,
		CreateSandbox:    createSandbox,
		SandboxID:        sandboxID,
		Attempt:          attempt,
		ContainersToKill: map[container.ContainerID]containerToKill{},
	}
	if createSandbox {
		computeNewSandboxActions(pod, status, &changes)
		return changes
	}

	// Ephemeral containers start once, even before initialization completes, and are never
	// restarted.
	for i := range pod.Spec.EphemeralContainers {
		if status.FindContainerStatusByName(pod.Spec.EphemeralContainers[i].Name) == nil {
			changes.EphemeralContainersToStart = append(changes.EphemeralContainersToStart, i)
		}
	}

	initialized := m.computeInitContainerActions(pod, status, &changes)
	changes.UpdatePodResources = changes.UpdatePodResources || m.startsResized(pod, pod.Spec.InitContainers, changes.InitContainersToStart)
	if changes.KillPod || !initialized {
		// Initialization failed or is in progress: regular containers wait.
		return changes
	}

	keepCount := 0
	for idx := range pod.Spec.Containers {
		if m.computeContainerActions(pod, idx, status, &changes) {
			keepCount++
		}
	}
	if keepCount == 0 && len(changes.ContainersToStart) == 0 {
		// Nothing runs and nothing will: the pod is done. Sidecars must not keep it alive.
		changes.KillPod = true
		changes.InitContainersToStart = nil
	}
	changes.UpdatePodLevelResources = m.podLevelResized(pod)
	changes.UpdatePodResources = changes.UpdatePodResources || m.startsResized(pod, pod.Spec.Containers, changes.ContainersToStart)
	return changes
}

// computeNewSandboxActions fills changes when the sandbox must be (re)created: everything
// restarts from the first init container, unless the pod has finished.
func computeNewSandboxActions(pod *v1.Pod, status *container.PodStatus, changes *podActions) {
	if !shouldRestartOnFailure(pod) && !hasContainerLevelRestart(pod) && changes.Attempt != 0 && len(status.ContainerStatuses) != 0 {
		// A Never pod whose containers already ran gets no new sandbox; it is just killed.
		// (No container statuses means none was ever created: retry the sandbox.)
		changes.CreateSandbox = false
		return
	}
	var toStart []int
	for idx := range pod.Spec.Containers {
		if runsInNewSandbox(&pod.Spec.Containers[idx], pod, status) {
			toStart = append(toStart, idx)
		}
	}
	if len(toStart) == 0 && hasAnyRegularContainerCreated(pod, status) {
		// Initialized and nothing left to run: no new sandbox.
		changes.CreateSandbox = false
		return
	}
	if len(pod.Spec.InitContainers) != 0 {
		changes.InitContainersToStart = []int{0}
		return
	}
	changes.ContainersToStart = toStart
}

// runsInNewSandbox says whether a regular container starts again in a new sandbox. One
// that exited runs again only if its restart rules and policies say so for its exit code,
// as the pod phase assumes (so OnFailure skips the succeeded ones); one that was still
// running (or unknown) dies with the old sandbox, a failure.
func runsInNewSandbox(c *v1.Container, pod *v1.Pod, status *container.PodStatus) bool {
	cs := status.FindContainerStatusByName(c.Name)
	switch {
	case cs == nil, cs.State == container.ContainerStateCreated:
		return true // it never ran
	case cs.State == container.ContainerStateExited:
		return container.ContainerShouldRestart(c, &pod.Spec, int32(cs.ExitCode))
	default:
		return mayRestartOnFailure(c, pod)
	}
}

// computeContainerActions decides about one regular container; it returns true when a
// running container is kept as is.
func (m *Manager) computeContainerActions(pod *v1.Pod, idx int, status *container.PodStatus, changes *podActions) bool {
	spec := &pod.Spec.Containers[idx]
	cs := status.FindContainerStatusByName(spec.Name)
	if cs == nil || cs.State != container.ContainerStateRunning {
		if container.ShouldContainerBeRestarted(spec, pod, status) {
			klog.V(3).InfoS("Container of pod is not in the desired state and shall be started", "containerName", spec.Name, "pod", klog.KObj(pod))
			changes.ContainersToStart = append(changes.ContainersToStart, idx)
			if cs != nil && cs.State == container.ContainerStateUnknown {
				// It may still run: kill it first so two instances never run at once.
				changes.ContainersToKill[cs.ID] = containerToKill{
					name: cs.Name, container: spec, reason: reasonUnknown,
					message: fmt.Sprintf("Container is in %q state, try killing it before restart", cs.State),
				}
			}
		}
		return false
	}

	var message string
	var reason killReason
	// A probe failure is a failure without an exit code: restart rules cannot apply yet.
	restart := mayRestartOnFailure(spec, pod)
	if expected := container.HashContainer(spec); cs.Hash != expected {
		message = fmt.Sprintf("Container %s definition changed", spec.Name)
		// A changed spec restarts regardless of the restart policy.
		restart = true
		klog.V(2).InfoS("Container spec hash changed", "containerName", spec.Name, "pod", klog.KObj(pod),
			"hashes", fmt.Sprintf("Container spec hash changed (%d vs %d).", cs.Hash, expected))
	} else if r, ok := m.liveness.Get(cs.ID); ok && r == results.Failure {
		message = fmt.Sprintf("Container %s failed liveness probe", spec.Name)
		reason = reasonLivenessProbe
	} else if r, ok := m.startup.Get(cs.ID); ok && r == results.Failure {
		message = fmt.Sprintf("Container %s failed startup probe", spec.Name)
		reason = reasonStartupProbe
	} else {
		return m.computeResizeAction(pod, spec, cs, changes, func() {
			changes.ContainersToStart = append(changes.ContainersToStart, idx)
		})
	}

	// Restarting only this container: the pod as a whole stays.
	if restart {
		message += ", will be restarted"
		changes.ContainersToStart = append(changes.ContainersToStart, idx)
	}
	changes.ContainersToKill[cs.ID] = containerToKill{name: cs.Name, container: spec, message: message, reason: reason}
	klog.V(2).InfoS("Message for Container of pod", "containerName", spec.Name, "containerStatusID", cs.ID, "pod", klog.KObj(pod), "containerMessage", message)
	return false
}

// computeInitContainerActions fills the init-container part of changes (upstream's
// sidecar-aware computeInitContainerActions): start the first init container not yet
// started, restart failed ones (or kill the pod under restartPolicy Never), and keep
// restartable init containers (sidecars) running. It returns whether the pod has been
// initialized.
func (m *Manager) computeInitContainerActions(pod *v1.Pod, status *container.PodStatus, changes *podActions) bool {
	inits := pod.Spec.InitContainers
	if len(inits) == 0 {
		return true
	}
	// A created or running regular container proves initialization happened, even if
	// the init containers have been removed since.
	podInitialized := regularContainerCreatedOrRunning(pod, status)
	previouslyInitialized := podInitialized

	// Walk backwards: completed init containers may have been removed, so the last one
	// with a status says how far initialization got.
	for i := len(inits) - 1; i >= 0; i-- {
		c := &inits[i]
		cs := status.FindContainerStatusByName(c.Name)
		if cs == nil {
			if previouslyInitialized && isRestartableInitContainer(c) {
				changes.InitContainersToStart = append(changes.InitContainersToStart, i)
			}
			continue
		}
		if previouslyInitialized && !isRestartableInitContainer(c) {
			// After initialization only sidecars need to keep running.
			continue
		}
		var stop bool
		podInitialized, stop = m.initContainerAction(pod, i, cs, previouslyInitialized, podInitialized, changes)
		if stop {
			return false
		}
		previouslyInitialized = true
	}
	if !previouslyInitialized {
		// No init container has started yet.
		changes.InitContainersToStart = append(changes.InitContainersToStart, 0)
	}
	reverse(changes.InitContainersToStart)
	return podInitialized
}

// initContainerAction decides about init container i given its latest status. It returns
// the updated "pod initialized" flag, and stop=true when the pod must be killed.
func (m *Manager) initContainerAction(pod *v1.Pod, i int, cs *container.Status, previouslyInitialized, podInitialized bool, changes *podActions) (bool, bool) {
	c := &pod.Spec.InitContainers[i]
	last := i == len(pod.Spec.InitContainers)-1
	sidecar := isRestartableInitContainer(c)
	restart := func(message string, reason killReason) {
		changes.ContainersToKill[cs.ID] = containerToKill{name: c.Name, container: c, message: message, reason: reason}
		changes.InitContainersToStart = append(changes.InitContainersToStart, i)
	}
	initializedHere := func() {
		if last {
			podInitialized = true
		} else if !previouslyInitialized {
			changes.InitContainersToStart = append(changes.InitContainersToStart, i+1)
		}
	}

	switch cs.State {
	case container.ContainerStateCreated:
		// Created but never started (the runtime failed to start it): start it again.
		changes.InitContainersToStart = append(changes.InitContainersToStart, i)
	case container.ContainerStateRunning:
		if !sidecar {
			// A regular init container: wait for it to finish, resized in place meanwhile
			// (validation allows it no restart policy for resizes).
			m.computeResizeAction(pod, c, cs, changes, func() {
				changes.InitContainersToStart = append(changes.InitContainersToStart, i)
			})
			break
		}
		m.sidecarRunningAction(pod, i, cs, changes, restart, initializedHere)
	case container.ContainerStateExited:
		if sidecar {
			changes.InitContainersToStart = append(changes.InitContainersToStart, i)
			break
		}
		if isInitContainerFailed(cs) {
			if !failedInitContainerRestarts(c, pod, cs) {
				changes.KillPod = true
				changes.InitContainersToStart = nil
				return podInitialized, true
			}
			changes.InitContainersToStart = append(changes.InitContainersToStart, i)
			break
		}
		klog.V(4).InfoS("Init container has been initialized", "pod", klog.KObj(pod), "container", c.Name)
		if last {
			podInitialized = true
		} else {
			changes.InitContainersToStart = append(changes.InitContainersToStart, i+1)
		}
	default: // unknown: it may still run, so kill before restarting
		if !sidecar && !failedInitContainerRestarts(c, pod, cs) {
			changes.KillPod = true
			changes.InitContainersToStart = nil
			return podInitialized, true
		}
		restart(fmt.Sprintf("Init container is in %q state, try killing it before restart", cs.State), reasonUnknown)
	}
	return podInitialized, false
}

// sidecarRunningAction handles a running restartable init container: wait for its startup
// probe, start the next init container once it is started, restart it when its spec
// changed or a probe failed.
func (m *Manager) sidecarRunningAction(pod *v1.Pod, i int, cs *container.Status, changes *podActions, restart func(string, killReason), initializedHere func()) {
	c := &pod.Spec.InitContainers[i]
	if c.StartupProbe != nil {
		r, found := m.startup.Get(cs.ID)
		if !found {
			return // wait for the startup probe
		}
		if r != results.Success {
			if r == results.Failure {
				restart(fmt.Sprintf("Init container %s failed startup probe", c.Name), reasonStartupProbe)
			}
			return
		}
	}
	klog.V(4).InfoS("Init container has been initialized", "pod", klog.KObj(pod), "container", c.Name)
	initializedHere()
	if cs.Hash != container.HashContainer(c) {
		restart(fmt.Sprintf("Init container %s definition changed", c.Name), "")
		return
	}
	// A sidecar's liveness does not hold back the next init container.
	if c.LivenessProbe != nil {
		if r, found := m.liveness.Get(cs.ID); found && r == results.Failure {
			restart(fmt.Sprintf("Init container %s failed liveness probe", c.Name), reasonLivenessProbe)
			return
		}
	}
	m.computeResizeAction(pod, c, cs, changes, func() {
		changes.InitContainersToStart = append(changes.InitContainersToStart, i)
	})
}

// podSandboxChanged says whether the pod needs a new sandbox, with the attempt number to
// use and the current sandbox ID (upstream's PodSandboxChanged): a new one is needed when
// none exists, when more than one is ready, when the newest is not ready, when its network
// namespace mode no longer matches the spec, or when it has no IP.
func podSandboxChanged(pod *v1.Pod, status *container.PodStatus) (bool, uint32, string) {
	if len(status.SandboxStatuses) == 0 {
		klog.V(2).InfoS("No sandbox for pod can be found. Need to start a new one", "pod", klog.KObj(pod))
		return true, 0, ""
	}
	ready, maxAttempt := 0, uint32(0)
	for _, s := range status.SandboxStatuses {
		if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			ready++
		}
		maxAttempt = max(maxAttempt, s.GetMetadata().GetAttempt())
	}
	newest := status.SandboxStatuses[0]
	switch {
	case ready > 1:
		klog.V(2).InfoS("Multiple sandboxes are ready for Pod. Need to reconcile them", "pod", klog.KObj(pod))
		return true, maxAttempt + 1, newest.Id
	case newest.State != runtimeapi.PodSandboxState_SANDBOX_READY:
		klog.V(2).InfoS("No ready sandbox for pod can be found. Need to start a new one", "pod", klog.KObj(pod))
		return true, maxAttempt + 1, newest.Id
	case newest.GetLinux().GetNamespaces().GetOptions().GetNetwork() != networkNamespaceForPod(pod):
		klog.V(2).InfoS("Sandbox for pod has changed. Need to start a new one", "pod", klog.KObj(pod))
		return true, maxAttempt + 1, ""
	case !pod.Spec.HostNetwork && newest.Network != nil && newest.Network.Ip == "":
		klog.V(2).InfoS("Sandbox for pod has no IP address. Need to start a new one", "pod", klog.KObj(pod))
		return true, maxAttempt + 1, newest.Id
	}
	return false, maxAttempt, newest.Id
}

func networkNamespaceForPod(pod *v1.Pod) runtimeapi.NamespaceMode {
	if pod != nil && pod.Spec.HostNetwork {
		return runtimeapi.NamespaceMode_NODE
	}
	return runtimeapi.NamespaceMode_POD
}

func shouldRestartOnFailure(pod *v1.Pod) bool {
	return pod.Spec.RestartPolicy != v1.RestartPolicyNever
}

// mayRestartOnFailure says whether a container that failed without an exit code to judge
// by (probe failure, unknown state) is restarted: its own restart policy decides when set,
// else the pod's (upstream with ContainerRestartRules).
func mayRestartOnFailure(c *v1.Container, pod *v1.Pod) bool {
	if c.RestartPolicy != nil {
		return *c.RestartPolicy != v1.ContainerRestartPolicyNever
	}
	return shouldRestartOnFailure(pod)
}

// failedInitContainerRestarts says whether a failed init container runs again. An exit
// code is judged as the pod phase judges it (restart rules, then the container's policy,
// then the pod's), so that the runtime and the phase agree.
func failedInitContainerRestarts(c *v1.Container, pod *v1.Pod, cs *container.Status) bool {
	if cs.State == container.ContainerStateExited && cs.ExitCode != 0 {
		return container.ContainerShouldRestart(c, &pod.Spec, int32(cs.ExitCode))
	}
	return mayRestartOnFailure(c, pod)
}

// hasContainerLevelRestart reports a regular container whose own restart policy or rules
// may restart it whatever the pod's policy says.
func hasContainerLevelRestart(pod *v1.Pod) bool {
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.RestartPolicy != nil && (*c.RestartPolicy != v1.ContainerRestartPolicyNever || len(c.RestartPolicyRules) > 0) {
			return true
		}
	}
	return false
}

// isInitContainerFailed: exited non-zero, unknown, or OOM-killed.
func isInitContainerFailed(cs *container.Status) bool {
	return cs.Reason == "OOMKilled" ||
		(cs.State == container.ContainerStateExited && cs.ExitCode != 0) ||
		cs.State == container.ContainerStateUnknown
}

func isRestartableInitContainer(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

func hasRestartableInitContainer(pod *v1.Pod) bool {
	if pod == nil {
		return false
	}
	for i := range pod.Spec.InitContainers {
		if isRestartableInitContainer(&pod.Spec.InitContainers[i]) {
			return true
		}
	}
	return false
}

// hasAnyRegularContainerCreated reports that initialization completed at some point.
func hasAnyRegularContainerCreated(pod *v1.Pod, status *container.PodStatus) bool {
	for i := range pod.Spec.Containers {
		cs := status.FindContainerStatusByName(pod.Spec.Containers[i].Name)
		if cs != nil && cs.State != container.ContainerStateUnknown {
			return true
		}
	}
	return false
}

// regularContainerCreatedOrRunning is the "initialized" test of the current sandbox: exited
// containers are left out because after a reboot they belong to an old sandbox.
func regularContainerCreatedOrRunning(pod *v1.Pod, status *container.PodStatus) bool {
	for i := range pod.Spec.Containers {
		cs := status.FindContainerStatusByName(pod.Spec.Containers[i].Name)
		if cs != nil && (cs.State == container.ContainerStateCreated || cs.State == container.ContainerStateRunning) {
			return true
		}
	}
	return false
}

func reverse(s []int) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}
