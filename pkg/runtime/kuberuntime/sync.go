package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/metrics/podstartup"
	"github.com/nodelet/nodelet/pkg/outage"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/pkg/runtime/images"
)

// SyncPod makes the runtime match pod, in upstream's steps:
//
//  1. compute sandbox and container changes;
//  2. kill the pod if its sandbox changed (or nothing is left to run);
//  3. otherwise kill the containers that must not run;
//  4. create the sandbox if needed;
//  5. resize the pod and its running containers in place;
//  6. start ephemeral containers;
//  7. start init containers;
//  8. start regular containers.
//
// backOff rate-limits container restarts (CrashLoopBackOff).
func (m *Manager) SyncPod(ctx context.Context, pod *v1.Pod, podStatus *container.PodStatus, pullSecrets []v1.Secret, backOff *flowcontrol.Backoff) (result container.PodSyncResult) {
	if podStatus == nil {
		podStatus = &container.PodStatus{ID: pod.UID, Name: pod.Name, Namespace: pod.Namespace}
	}
	// One ImageStatus per image for the whole sync (see images.WithImageStatusMemo).
	ctx = images.WithImageStatusMemo(ctx)
	m.initializeActuated(pod)
	changes := m.computePodActions(pod, podStatus)
	klog.V(3).InfoS("computePodActions got for pod", "podActions", changes, "pod", klog.KObj(pod))
	if changes.CreateSandbox && changes.SandboxID != "" {
		m.recordPodEvent(pod, v1.EventTypeNormal, eventSandboxChanged, "Pod sandbox changed, it will be killed and re-created.")
	}

	if !m.killForSync(ctx, pod, podStatus, changes, &result) {
		return result
	}
	// Keep terminated init containers in check; GC would get them too, later.
	m.pruneInitContainersBeforeStart(ctx, pod, podStatus)
	traceInitContainers(ctx, pod, podStatus)

	if hasWorkToStart(changes) && !m.canMountVolumes(pod, &result) {
		return result
	}

	// The images are looked up while the sandbox is being created.
	waitForImageLookups := m.lookUpImages(ctx, pod, changes)
	defer waitForImageLookups()

	// Containers learn the pod IPs (hosts file, downward API) from here, not from the
	// status manager, which may not know a new sandbox's IPs yet.
	podIPs := podStatus.IPs
	sandboxID := changes.SandboxID
	if changes.CreateSandbox {
		id, ips, ok := m.createSandboxForSync(ctx, pod, changes.Attempt, &result)
		if !ok {
			return result
		}
		sandboxID = id
		if !pod.Spec.HostNetwork {
			// A host-network pod keeps the IPs it had.
			podIPs = ips
		}
	}

	if changes.needsResize() {
		result.AddSyncResult(m.resizePod(ctx, pod, &changes))
	}
	// The sandbox config is built only to start containers, as upstream's does: building
	// it resolves the pod's DNS, which warns (MissingClusterDNS, to the pod and the node)
	// on every call for a ClusterFirst pod when no clusterDNS is configured; at every
	// resync of every pod that was an event a second with 110 pods.
	if !hasContainersToStart(changes) {
		return result
	}
	configResult := container.NewSyncResult(container.ConfigPodSandbox, sandboxID)
	result.AddSyncResult(configResult)
	sandboxConfig, err := m.generateSandboxConfig(ctx, pod, changes.Attempt)
	if err != nil {
		klog.ErrorS(err, "GeneratePodSandboxConfig for pod failed", "pod", klog.KObj(pod))
		configResult.Fail(container.ErrConfigPodSandbox, fmt.Sprintf("GeneratePodSandboxConfig for pod %q failed: %v", podFullName(pod), err))
		return result
	}
	s := &podStarter{m: m, pod: pod, status: podStatus, sandboxID: sandboxID, sandboxConfig: sandboxConfig,
		podIPs: podIPs, pullSecrets: pullSecrets, backOff: backOff, result: &result}
	s.startAll(ctx, changes)
	return result
}

// killForSync runs steps 2 and 3; it returns false when SyncPod must stop.
func (m *Manager) killForSync(ctx context.Context, pod *v1.Pod, status *container.PodStatus, changes podActions, result *container.PodSyncResult) bool {
	if changes.KillPod {
		if changes.CreateSandbox {
			klog.V(4).InfoS("Stopping PodSandbox for pod, will start new one", "pod", klog.KObj(pod))
		} else {
			klog.V(4).InfoS("Stopping PodSandbox for pod, because all other containers are dead", "pod", klog.KObj(pod))
		}
		killResult := m.killPodWithSyncResult(ctx, pod, container.ConvertPodStatusToRunningPod(m.runtimeName, status), nil)
		result.AddPodSyncResult(killResult)
		if err := killResult.Error(); err != nil {
			outage.ErrorS(err, "killPodWithSyncResult failed")
			return false
		}
		if changes.CreateSandbox {
			m.purgeInitContainers(ctx, pod, status)
		}
		return true
	}
	for id, info := range changes.ContainersToKill {
		klog.V(3).InfoS("Killing unwanted container for pod", "containerName", info.name, "containerID", id, "pod", klog.KObj(pod))
		killResult := container.NewSyncResult(container.KillContainer, info.name)
		result.AddSyncResult(killResult)
		if err := m.killContainer(ctx, pod, id, info.name, info.message, info.reason, nil, nil); err != nil {
			killResult.Fail(container.ErrKillContainer, err.Error())
			outage.ErrorS(err, "killContainer for pod failed", "containerName", info.name, "containerID", id, "pod", klog.KObj(pod))
			return false
		}
	}
	return true
}

func hasWorkToStart(c podActions) bool {
	return c.CreateSandbox || hasContainersToStart(c)
}

func hasContainersToStart(c podActions) bool {
	return len(c.InitContainersToStart)+len(c.ContainersToStart)+len(c.EphemeralContainersToStart) > 0
}

// canMountVolumes refuses to start a pod with volumes when there is no volume manager to
// mount them: its containers would run without them. Setting the volumes up is the
// kubelet's, before SyncPod.
func (m *Manager) canMountVolumes(pod *v1.Pod, result *container.PodSyncResult) bool {
	if m.volumes != nil || len(pod.Spec.Volumes) == 0 {
		return true
	}
	result.Fail(fmt.Errorf("pod %q has volumes but nodelet's runtime manager has no volume manager", podFullName(pod)))
	return false
}

// createSandboxForSync runs step 4: a new sandbox and its IPs; ok=false when SyncPod must stop.
func (m *Manager) createSandboxForSync(ctx context.Context, pod *v1.Pod, attempt uint32, result *container.PodSyncResult) (string, []string, bool) {
	if !m.prepareDynamicResources(ctx, pod, result) {
		return "", nil, false
	}
	klog.V(4).InfoS("Creating PodSandbox for pod", "pod", klog.KObj(pod))
	metrics.StartedPodsTotal.Inc()
	createResult := container.NewSyncResult(container.CreatePodSandbox, podFullName(pod))
	result.AddSyncResult(createResult)
	endSandbox := podstartup.FromContext(ctx).Begin(podstartup.Sandbox)
	id, msg, err := m.createPodSandbox(ctx, pod, attempt)
	endSandbox()
	if err != nil {
		if pod.DeletionTimestamp != nil || m.podState.IsPodDeleted(pod.UID) {
			// Errors are expected while a deleted pod's resources go away.
			klog.V(4).InfoS("Pod was deleted and sandbox failed to be created", "pod", klog.KObj(pod), "podUID", pod.UID)
			return "", nil, false
		}
		metrics.StartedPodsErrorsTotal.Inc()
		createResult.Fail(container.ErrCreatePodSandbox, msg)
		outage.ErrorS(err, "CreatePodSandbox for pod failed", "pod", klog.KObj(pod))
		m.recordPodEvent(pod, v1.EventTypeWarning, eventFailedCreatePodSandbox, "Failed to create pod sandbox: %v", err)
		return "", nil, false
	}
	klog.V(4).InfoS("Created PodSandbox for pod", "podSandboxID", id, "pod", klog.KObj(pod))

	resp, err := m.runtime.PodSandboxStatus(ctx, id, false)
	if err != nil {
		m.recordPodEvent(pod, v1.EventTypeWarning, eventFailedStatusPodSandbox, "Unable to get pod sandbox status: %v", err)
		outage.ErrorS(err, "Failed to get pod sandbox status; Skipping pod", "pod", klog.KObj(pod))
		result.Fail(err)
		return "", nil, false
	}
	if resp.GetStatus() == nil {
		result.Fail(errors.New("pod sandbox status is nil"))
		return "", nil, false
	}
	ips := determinePodSandboxIPs(pod.Namespace, pod.Name, resp.GetStatus())
	klog.V(4).InfoS("Determined the ip for pod after sandbox changed", "IPs", ips, "pod", klog.KObj(pod))
	return id, ips, true
}

// createPodSandbox creates the pod's log directory and sandbox; it returns the sandbox ID,
// or a message and the error.
func (m *Manager) createPodSandbox(ctx context.Context, pod *v1.Pod, attempt uint32) (string, string, error) {
	config, err := m.generateSandboxConfig(ctx, pod, attempt)
	if err != nil {
		return "", fmt.Sprintf("Failed to generate sandbox config for pod %q: %v", podFullName(pod), err), err
	}
	if err := os.MkdirAll(config.GetLogDirectory(), 0o755); err != nil {
		return "", fmt.Sprintf("Failed to create log directory for pod %q: %v", podFullName(pod), err), err
	}
	handler, err := m.runtimeHandler(pod)
	if err != nil {
		return "", fmt.Sprintf("Failed to create sandbox for pod %q: %v", podFullName(pod), err), err
	}
	if handler != "" {
		klog.V(2).InfoS("Running pod with runtime handler", "pod", klog.KObj(pod), "runtimeHandler", handler)
	}
	release, err := m.starts.acquire(ctx, pod, sandboxPriority)
	if err != nil {
		return "", fmt.Sprintf("Failed to create sandbox for pod %q: %v", podFullName(pod), err), err
	}
	id, err := m.runtime.RunPodSandbox(ctx, config, handler)
	release()
	if err != nil {
		return "", fmt.Sprintf("Failed to create sandbox for pod %q: %v", podFullName(pod), err), err
	}
	return id, "", nil
}

func (m *Manager) generateSandboxConfig(ctx context.Context, pod *v1.Pod, attempt uint32) (*runtimeapi.PodSandboxConfig, error) {
	cgroupParent := ""
	if m.opts.CgroupParent != nil {
		cgroupParent = m.opts.CgroupParent(pod)
	}
	userNamespace, err := m.userNamespace(ctx, pod)
	if err != nil {
		return nil, err
	}
	return criconfig.GeneratePodSandboxConfig(pod, attempt, criconfig.SandboxOptions{
		UserNamespace:  userNamespace,
		DNS:            m.opts.DNS,
		ClusterDomain:  m.opts.ClusterDomain,
		PodLogsDir:     m.opts.PodLogsDir,
		CgroupParent:   cgroupParent,
		SeccompDefault: m.opts.SeccompDefault,
		Resources:      m.resourceOptions(),
	})
}

// userNamespace is the pod's user namespace for its sandbox (and, through the sandbox
// config, its containers); nil without a user namespace manager.
func (m *Manager) userNamespace(ctx context.Context, pod *v1.Pod) (*runtimeapi.UserNamespace, error) {
	if m.opts.UserNamespaces == nil {
		return nil, nil
	}
	handler, err := m.runtimeHandler(pod)
	if err != nil {
		return nil, err
	}
	return m.opts.UserNamespaces.GetOrCreateUserNamespaceMappings(ctx, pod, handler)
}

// RuntimeClassLookup resolves a runtimeClassName to a runtime handler (pkg/runtime/runtimeclass).
type RuntimeClassLookup interface {
	LookupRuntimeHandler(runtimeClassName *string) (string, error)
}

// imageRuntimeHandler is the handler image calls carry: the runtime's default, as upstream
// passes the pod's handler only with its alpha RuntimeClassInImageCriApi gate.
const imageRuntimeHandler = ""

// runtimeHandler is the handler of the pod's RuntimeClass ("" for the default one).
func (m *Manager) runtimeHandler(pod *v1.Pod) (string, error) {
	if m.opts.RuntimeClasses == nil {
		return "", nil
	}
	return m.opts.RuntimeClasses.LookupRuntimeHandler(pod.Spec.RuntimeClassName)
}

// podStarter starts the containers of one SyncPod (steps 5–8).
type podStarter struct {
	m             *Manager
	pod           *v1.Pod
	status        *container.PodStatus
	sandboxID     string
	sandboxConfig *runtimeapi.PodSandboxConfig
	podIPs        []string
	pullSecrets   []v1.Secret
	backOff       *flowcontrol.Backoff
	result        *container.PodSyncResult
	// imagePulls are the pulls of the pod's image volumes, by volume name (nil: none).
	imagePulls map[string]imageVolumePull
}

func (s *podStarter) startAll(ctx context.Context, changes podActions) {
	pod := s.pod
	// The image volumes are pulled before any container starts (SyncPod calls startAll
	// only when one does).
	s.imagePulls = s.m.pullImageVolumes(ctx, s)
	// Ephemeral containers go first so a debugging container can run even when an init
	// container keeps failing.
	for _, idx := range changes.EphemeralContainersToStart {
		ec := &pod.Spec.EphemeralContainers[idx]
		s.start(ctx, "ephemeral container", (*v1.Container)(&ec.EphemeralContainerCommon), ec)
	}
	for _, idx := range changes.InitContainersToStart {
		c := &pod.Spec.InitContainers[idx]
		if err := s.start(ctx, "init container", c, nil); err != nil {
			if isRestartableInitContainer(c) {
				klog.V(4).InfoS("Failed to start the restartable init container for the pod, skipping", "initContainerName", c.Name, "pod", klog.KObj(pod))
				continue
			}
			klog.V(4).InfoS("Failed to initialize the pod, as the init container failed to start, aborting", "initContainerName", c.Name, "pod", klog.KObj(pod))
			return
		}
		klog.V(4).InfoS("Completed init container for pod", "containerName", c.Name, "pod", klog.KObj(pod))
	}
	for _, idx := range changes.ContainersToStart {
		s.start(ctx, "container", &pod.Spec.Containers[idx], nil)
	}
}

// start starts one container unless it is backing off; ec is set for ephemeral containers.
func (s *podStarter) start(ctx context.Context, typeName string, c *v1.Container, ec *v1.EphemeralContainer) error {
	r := container.NewSyncResult(container.StartContainer, c.Name)
	s.result.AddSyncResult(r)
	if inBackOff, msg, err := s.m.doBackOff(s.pod, c, s.status, s.backOff); inBackOff {
		r.Fail(err, msg)
		klog.V(4).InfoS("Backing Off restarting container in pod", "containerType", typeName, "container", c.Name, "pod", klog.KObj(s.pod))
		return err
	}
	klog.V(4).InfoS("Creating container in pod", "containerType", typeName, "container", c.Name, "pod", klog.KObj(s.pod))
	metricLabel := containerTypeLabels[typeName]
	metrics.StartedContainersTotal.WithLabelValues(metricLabel).Inc()
	// Failing on an image volume's pull only now gives the container the pull's reason.
	vols, msg, err := s.imageVolumesFor(c)
	if err != nil {
		r.Fail(err, msg)
		return err
	}
	msg, err = s.m.startContainer(ctx, s, c, ec, vols)
	countImageVolumes(err, msg, c, vols)
	if err != nil {
		// The errors are container.Err* and images.Err* reasons: few, and telling server
		// errors from user errors.
		metrics.StartedContainersErrorsTotal.WithLabelValues(metricLabel, err.Error()).Inc()
		r.Fail(err, msg)
		klog.V(3).InfoS("Container start failed in pod", "containerType", typeName, "container", c.Name, "pod", klog.KObj(s.pod), "containerMessage", msg, "err", err)
		return err
	}
	return nil
}

// containerTypeLabels map start's type names to the container_type metric label.
var containerTypeLabels = map[string]string{
	"container":           metrics.Container,
	"init container":      metrics.InitContainer,
	"ephemeral container": metrics.EphemeralContainer,
}

// traceInitContainers tells the pod's start-up trace, if any, how long its init
// containers (not sidecars) ran, as the runtime reports it.
func traceInitContainers(ctx context.Context, pod *v1.Pod, status *container.PodStatus) {
	trace := podstartup.FromContext(ctx)
	if trace == nil {
		return
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if isRestartableInitContainer(c) {
			continue
		}
		for _, cs := range status.ContainerStatuses {
			if cs.Name == c.Name && cs.State == container.ContainerStateExited {
				trace.InitContainerRan(cs.ID.ID, cs.StartedAt, cs.FinishedAt)
			}
		}
	}
}
