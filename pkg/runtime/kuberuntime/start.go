package kuberuntime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"

	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/metrics/podstartup"
	"github.com/nodelet/nodelet/pkg/outage"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/pkg/runtime/images"
)

// startContainer pulls the image, creates and starts the container, links its log for log
// shippers and runs its postStart hook; vols are the image volumes it mounts. On failure
// it returns a message and one of the container.Err* reasons (or an images.Err* reason
// from the pull).
func (m *Manager) startContainer(ctx context.Context, s *podStarter, c *v1.Container, ec *v1.EphemeralContainer, vols imageVolumes) (string, error) {
	pod := s.pod
	imageRef, msg, err := m.imagePuller.EnsureImageExists(ctx, container.ContainerRef(pod, c), pod, c.Image,
		podPullSecrets(pod, s.pullSecrets), s.sandboxConfig, imageRuntimeHandler, c.ImagePullPolicy)
	if err != nil {
		m.recordContainerEvent(pod, c, "", v1.EventTypeWarning, eventFailedToCreate, "Error: %v", grpcMessage(err))
		return msg, err
	}

	trace := podstartup.FromContext(ctx)
	endCreate := trace.Begin(podstartup.ContainerCreate)
	config, cleanup, msg, err := m.containerConfig(ctx, s, c, ec, imageRef, vols)
	if err != nil {
		endCreate()
		m.recordContainerEvent(pod, c, "", v1.EventTypeWarning, eventFailedToCreate, "Error: %v", msg)
		return msg, container.ErrCreateContainerConfig
	}
	// One slot from the create to the start (startgate.go); released before the
	// postStart hook.
	release, err := m.starts.acquire(ctx, pod, containerPriority)
	if err != nil {
		endCreate()
		cleanup()
		return grpcMessage(err), container.ErrCreateContainer
	}
	defer release()
	// The container is created with these resources: they are its actuated ones.
	m.setActuated(pod, c)

	id, err := m.runtime.CreateContainer(ctx, s.sandboxID, config, s.sandboxConfig)
	endCreate()
	if err != nil {
		// The termination-message file is per container instance: drop the unused one.
		cleanup()
		msg := grpcMessage(err)
		m.recordContainerEvent(pod, c, id, v1.EventTypeWarning, eventFailedToCreate, "Error: %v", msg)
		return msg, container.ErrCreateContainer
	}
	m.recordContainerEvent(pod, c, id, v1.EventTypeNormal, eventCreatedContainer, "Created container: %v", c.Name)
	if m.opts.ContainerCreated != nil {
		if err := m.opts.ContainerCreated(pod, c, id); err != nil {
			msg := fmt.Sprintf("Internal PreStartContainer hook failed: %v", err)
			m.recordContainerEvent(pod, c, id, v1.EventTypeWarning, eventFailedToStart, "%s", msg)
			return msg, container.ErrPreStartHook
		}
	}

	// A container has started once its postStart hook has run.
	defer trace.Begin(podstartup.ContainerStart)()
	if err := m.runtime.StartContainer(ctx, id); err != nil {
		msg := grpcMessage(err)
		m.recordContainerEvent(pod, c, id, v1.EventTypeWarning, eventFailedToStart, "Error: %v", msg)
		return msg, container.ErrRunContainer
	}
	release()
	m.recordContainerEvent(pod, c, id, v1.EventTypeNormal, eventStartedContainer, "Started container %v", c.Name)

	m.createLegacyLogSymlink(id, config, s.sandboxConfig)
	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		return m.runPostStartHook(ctx, pod, c, id)
	}
	return "", nil
}

// containerConfig works out the restart count, image user and mounts and generates the
// CRI container config. cleanup removes the config's termination-message file, for when
// the container is not created; on failure msg says why.
func (m *Manager) containerConfig(ctx context.Context, s *podStarter, c *v1.Container, ec *v1.EphemeralContainer, imageRef string, vols imageVolumes) (*runtimeapi.ContainerConfig, func(), string, error) {
	pod := s.pod
	restartCount := m.nextRestartCount(pod, c, s.status)
	target, err := ephemeralTarget(ec, s.status)
	if err != nil {
		return nil, nil, err.Error(), err
	}
	uid, username, err := m.imageUser(ctx, pod, c.Image)
	if err != nil {
		return nil, nil, grpcMessage(err), err
	}
	podIP := ""
	if len(s.podIPs) > 0 {
		podIP = s.podIPs[0]
	}
	opts := criconfig.ContainerOptions{
		PodIP:              podIP,
		PodIPs:             s.podIPs,
		HostIPs:            m.opts.NodeIPs,
		NodeName:           m.opts.NodeName,
		ImageRef:           imageRef,
		ImageUser:          uid,
		ImageUserName:      username,
		PodDir:             m.podDir(pod.UID),
		PodLogsDir:         m.opts.PodLogsDir,
		CPUCFSQuota:        m.opts.CPUCFSQuota,
		CPUCFSQuotaPeriod:  m.opts.CPUCFSQuotaPeriod,
		MachineMemory:      m.opts.MachineMemory,
		SeccompDefault:     m.opts.SeccompDefault,
		SeccompProfileRoot: m.seccompProfileRoot(),
		TargetContainerID:  target,
		// The sandbox's user namespace: a container must be in its pod's.
		UserNamespace:      s.sandboxConfig.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(),
		EnableServiceLinks: pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks,
		EnvSources:         m.opts.EnvSources,

		// Resources are made as on resize (resourceOptions).
		Host: m.opts.Host, SingleProcessOOMKill: m.opts.SingleProcessOOMKill, MemoryQoS: m.opts.MemoryQoS,
	}
	if opts.Mounts, err = m.mounts(ctx, pod, c, opts, vols); err != nil {
		return nil, nil, err.Error(), err
	}
	if m.opts.DeviceOptions != nil {
		if opts.Devices, err = m.opts.DeviceOptions(ctx, pod, c); err != nil {
			return nil, nil, err.Error(), err
		}
	}
	if opts.Devices, err = m.withBlockVolumes(pod, c, opts.Devices); err != nil {
		return nil, nil, err.Error(), err
	}
	config, cleanup, err := criconfig.GenerateContainerConfig(ctx, c, pod, restartCount, opts)
	if err != nil {
		return nil, nil, grpcMessage(err), err
	}
	m.pin(pod, c, config)
	return config, cleanup, "", nil
}

// withBlockVolumes adds the container's raw block volumes after the device plugins'
// devices, as upstream's kubelet orders them.
func (m *Manager) withBlockVolumes(pod *v1.Pod, c *v1.Container, d *criconfig.DeviceOptions) (*criconfig.DeviceOptions, error) {
	if m.volumes == nil || len(c.VolumeDevices) == 0 {
		return d, nil
	}
	devices, err := m.volumes.DevicesFor(pod, c)
	if err != nil {
		return nil, err
	}
	out := &criconfig.DeviceOptions{}
	if d != nil {
		*out = *d
	}
	out.Devices = append(slices.Clone(out.Devices), devices...)
	return out, nil
}

// mounts are the container's volume mounts, then the pod's kubelet-managed /etc/hosts.
func (m *Manager) mounts(ctx context.Context, pod *v1.Pod, c *v1.Container, opts criconfig.ContainerOptions, vols imageVolumes) ([]*runtimeapi.Mount, error) {
	mounts, err := m.volumeMounts(ctx, pod, c, opts, vols)
	if err != nil || opts.PodDir == "" {
		return mounts, err
	}
	hosts, err := criconfig.HostsMount(pod, c, criconfig.HostsFile{PodDir: opts.PodDir, PodIPs: opts.PodIPs, ClusterDomain: m.opts.ClusterDomain})
	if err != nil {
		return nil, fmt.Errorf("failed to write the pod's hosts file: %w", err)
	}
	if hosts != nil {
		mounts = append(mounts, hosts)
	}
	return mounts, nil
}

// volumeMounts are the container's volume mounts: the volume manager's, and the image
// volumes' (vols), which the runtime mounts. A subPathExpr is expanded from the
// container's environment, which is worked out for it only when one is used.
func (m *Manager) volumeMounts(ctx context.Context, pod *v1.Pod, c *v1.Container, opts criconfig.ContainerOptions, vols imageVolumes) ([]*runtimeapi.Mount, error) {
	if m.volumes == nil {
		return nil, nil
	}
	env, err := subPathEnv(ctx, pod, c, opts)
	if err != nil {
		return nil, err
	}
	mounts, err := m.volumes.MountsFor(pod, c, env)
	if err != nil || !mountsImageVolume(pod, c) {
		return mounts, err
	}
	return withImageMounts(pod, c, mounts, vols, env, m.supportsRecursiveReadOnly(pod))
}

// subPathEnv is the container's environment when a volumeMount has a subPathExpr, else nil.
func subPathEnv(ctx context.Context, pod *v1.Pod, c *v1.Container, opts criconfig.ContainerOptions) (map[string]string, error) {
	if !slices.ContainsFunc(c.VolumeMounts, func(vm v1.VolumeMount) bool { return vm.SubPathExpr != "" }) {
		return nil, nil
	}
	kvs, err := criconfig.MakeEnvironmentVariables(ctx, pod, c, opts)
	if err != nil {
		return nil, err
	}
	env := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		env[kv.Key] = string(kv.Value)
	}
	return env, nil
}

// mountsImageVolume says whether one of c's volumeMounts is of an image volume.
func mountsImageVolume(pod *v1.Pod, c *v1.Container) bool {
	for _, vol := range pod.Spec.Volumes {
		if vol.Image != nil && slices.ContainsFunc(c.VolumeMounts, func(vm v1.VolumeMount) bool { return vm.Name == vol.Name }) {
			return true
		}
	}
	return false
}

// seccompProfileRoot is <root>/seccomp, where Localhost profiles live.
func (m *Manager) seccompProfileRoot() string {
	if m.opts.RootDir == "" {
		return ""
	}
	return filepath.Join(m.opts.RootDir, "seccomp")
}

// nextRestartCount is the previous instance's count plus one. Without any previous
// instance (the runtime may have lost its state, e.g. on reboot) the count is recovered
// from the log files, so a new instance never overwrites an old log.
func (m *Manager) nextRestartCount(pod *v1.Pod, c *v1.Container, status *container.PodStatus) int {
	if cs := status.FindContainerStatusByName(c.Name); cs != nil {
		return cs.RestartCount + 1
	}
	logDir := criconfig.ContainerLogDir(m.opts.PodLogsDir, pod.Namespace, pod.Name, pod.UID, c.Name)
	count, err := calcRestartCountByLogDir(logDir)
	if err != nil {
		klog.InfoS("Cannot calculate restartCount from the log directory", "logDir", logDir, "err", err)
		return 0
	}
	return count
}

var restartCountLogFile = regexp.MustCompile(`^(\d+)\.log(\..*)?`)

// calcRestartCountByLogDir returns one more than the highest N of the N.log files (and
// their rotated N.log.* siblings) in dir; 0 when there are none.
func calcRestartCountByLogDir(dir string) (int, error) {
	if _, err := os.Stat(dir); err != nil {
		return 0, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	restartCount := 0
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		match := restartCountLogFile.FindStringSubmatch(e.Name())
		if match == nil {
			continue
		}
		n, err := strconv.Atoi(match[1])
		if err != nil {
			continue // not a name the kubelet wrote
		}
		restartCount = max(restartCount, n+1)
	}
	return restartCount, nil
}

// imageUser returns the image's numeric user, or its user name; an image with neither runs
// as root (uid 0). The status is the one EnsureImageExists got, from the sync's memo.
func (m *Manager) imageUser(ctx context.Context, pod *v1.Pod, image string) (*int64, string, error) {
	spec, err := images.ImageSpecFor(pod, image, imageRuntimeHandler)
	if err != nil {
		return nil, "", err
	}
	img, err := m.runtimeImages.ImageStatus(ctx, spec)
	if err != nil {
		return nil, "", err
	}
	if img != nil {
		if img.Uid != nil {
			uid := img.Uid.Value
			return &uid, "", nil
		}
		if img.Username != "" {
			return nil, img.Username, nil
		}
	}
	return new(int64), "", nil
}

// ephemeralTarget is the runtime ID of the container whose process namespace an
// ephemeral container joins, or "".
func ephemeralTarget(ec *v1.EphemeralContainer, status *container.PodStatus) (string, error) {
	if ec == nil || ec.TargetContainerName == "" {
		return "", nil
	}
	target := status.FindContainerStatusByName(ec.TargetContainerName)
	if target == nil {
		return "", fmt.Errorf("unable to find target container %v", ec.TargetContainerName)
	}
	return target.ID.ID, nil
}

// podPullSecrets picks, from the secrets the caller resolved, those the pod names in
// spec.imagePullSecrets.
func podPullSecrets(pod *v1.Pod, secrets []v1.Secret) []v1.Secret {
	wanted := map[string]bool{}
	for _, ref := range pod.Spec.ImagePullSecrets {
		wanted[ref.Name] = true
	}
	var out []v1.Secret
	for _, s := range secrets {
		if wanted[s.Name] && (s.Namespace == "" || s.Namespace == pod.Namespace) {
			out = append(out, s)
		}
	}
	return out
}

// runPostStartHook runs the postStart hook; on failure the container is killed and the
// hook's message returned with ErrPostStartHook.
func (m *Manager) runPostStartHook(ctx context.Context, pod *v1.Pod, c *v1.Container, id string) (string, error) {
	cid := container.BuildContainerID(m.runtimeName, id)
	msg, err := m.hooks.run(ctx, cid, pod, c, c.Lifecycle.PostStart)
	if err == nil {
		return "", nil
	}
	outage.ErrorS(err, "Failed to execute PostStartHook", "pod", klog.KObj(pod), "podUID", pod.UID, "containerName", c.Name, "containerID", cid.String())
	// The hook's output stays out of the event (it may hold secrets); it is in the result.
	m.recordContainerEvent(pod, c, id, v1.EventTypeWarning, eventFailedPostStartHook, "PostStartHook failed")
	if err := m.killContainer(ctx, pod, cid, c.Name, "FailedPostStartHook", reasonFailedPostStartHook, nil, nil); err != nil {
		outage.ErrorS(err, "Failed to kill container", "pod", klog.KObj(pod), "podUID", pod.UID, "containerName", c.Name, "containerID", cid.String())
	}
	return msg, container.ErrPostStartHook
}

// doBackOff reports whether the container must wait before its next restart. The key is
// the pod and the container's spec hash, so a changed spec starts a fresh back-off; the
// window runs from when the latest instance exited. When not backing off, the back-off is
// advanced for the restart about to happen. Entries expire on their own once the
// container ran for longer than the Backoff's expiry (2 × max by default, or the caller's
// HasExpiredFunc), which resets the delay after a stable run.
func (m *Manager) doBackOff(pod *v1.Pod, c *v1.Container, status *container.PodStatus, backOff *flowcontrol.Backoff) (bool, string, error) {
	if backOff == nil {
		return false, "", nil
	}
	var exited *container.Status
	for _, cs := range status.ContainerStatuses {
		if cs.Name == c.Name && cs.State == container.ContainerStateExited {
			exited = cs
			break
		}
	}
	if exited == nil {
		return false, "", nil
	}
	key := GetStableKey(pod, c)
	if backOff.IsInBackOffSince(key, exited.FinishedAt) {
		m.recordContainerEvent(pod, c, "", v1.EventTypeWarning, eventBackOffStartContainer,
			"Back-off restarting failed container %s in pod %s", c.Name, podFullName(pod))
		err := fmt.Errorf("back-off %s restarting failed container=%s pod=%s", backOff.Get(key), c.Name, podFullName(pod))
		klog.V(3).InfoS("Back-off restarting failed container", "err", err.Error())
		return true, err.Error(), container.ErrCrashLoopBackOff
	}
	backOff.Next(key, exited.FinishedAt)
	return false, "", nil
}

// GetStableKey identifies a (pod, container spec) pair for back-off bookkeeping.
func GetStableKey(pod *v1.Pod, c *v1.Container) string {
	hash := strconv.FormatUint(container.HashContainer(c), 16)
	return fmt.Sprintf("%s_%s_%s_%s_%s", pod.Name, pod.Namespace, string(pod.UID), c.Name, hash)
}

// grpcMessage is the message of a gRPC status error, or the error text.
func grpcMessage(err error) string {
	if s, ok := grpcstatus.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}

// createLegacyLogSymlink links /var/log/containers/<pod>_<ns>_<container>-<id>.log to the
// container's log, where log shippers look. It is skipped when the log does not exist, as
// a dangling link would only be garbage collected later.
func (m *Manager) createLegacyLogSymlink(id string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) {
	sb := sandboxConfig.GetMetadata()
	link := m.legacyLogSymlink(id, config.GetMetadata().GetName(), sb.GetName(), sb.GetNamespace())
	target := filepath.Join(sandboxConfig.GetLogDirectory(), config.GetLogPath())
	if _, err := os.Stat(target); os.IsNotExist(err) {
		return
	}
	if err := os.Symlink(target, link); err != nil && !os.IsExist(err) {
		klog.ErrorS(err, "Failed to create legacy symbolic link", "path", link, "containerID", id, "containerLogPath", target)
	}
}

// lookUpImages asks the runtime in the background about the images this sync may pull
// (imagesToLookUp), so that the answers are in the sync's memo by the time
// EnsureImageExists and imageUser need them: the lookups overlap the sandbox's creation
// and the earlier containers' starts instead of following them. The answers cannot be
// staler than asking later: a pull in this sync makes the memo forget the image it pulled.
// The returned function waits for the lookups.
func (m *Manager) lookUpImages(ctx context.Context, pod *v1.Pod, changes podActions) (wait func()) {
	var wg sync.WaitGroup
	seen := map[string]bool{}
	for _, image := range imagesToLookUp(pod, changes) {
		if seen[image] {
			continue
		}
		seen[image] = true
		spec, err := images.ImageSpecFor(pod, image, imageRuntimeHandler)
		if err != nil {
			continue // EnsureImageExists reports it
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = m.runtimeImages.ImageStatus(ctx, spec)
		}()
	}
	return wg.Wait
}

// imagesToLookUp are the images whose pull policy checks for a present image first: of
// the containers changes starts and, when it starts any, of the pod's image volumes, which
// are pulled before them.
func imagesToLookUp(pod *v1.Pod, changes podActions) []string {
	var out []string
	starting := containersToStart(pod, changes)
	for _, c := range starting {
		if c.ImagePullPolicy != v1.PullAlways {
			out = append(out, c.Image)
		}
	}
	if len(starting) == 0 {
		return out
	}
	for _, vol := range pod.Spec.Volumes {
		if vol.Image != nil && imageVolumePullPolicy(vol.Image) != v1.PullAlways {
			out = append(out, vol.Image.Reference)
		}
	}
	return out
}

// containersToStart lists the containers changes starts, in start order.
func containersToStart(pod *v1.Pod, changes podActions) []*v1.Container {
	var out []*v1.Container
	for _, i := range changes.EphemeralContainersToStart {
		out = append(out, (*v1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	for _, i := range changes.InitContainersToStart {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for _, i := range changes.ContainersToStart {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

// pin puts the container's assigned CPUs and memory nodes into its config.
func (m *Manager) pin(pod *v1.Pod, c *v1.Container, config *runtimeapi.ContainerConfig) {
	if m.opts.Pinning == nil || config.GetLinux().GetResources() == nil {
		return
	}
	cpus, mems := m.opts.Pinning(pod, c)
	r := config.Linux.Resources
	if cpus != "" {
		r.CpusetCpus = cpus
	}
	if mems != "" {
		r.CpusetMems = mems
	}
}
