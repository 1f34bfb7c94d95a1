package criconfig

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// ContainerOptions is what a container config needs beyond the pod and the
// container spec.
type ContainerOptions struct {
	PodIP    string   // primary pod IP, for status.podIP
	PodIPs   []string // all pod IPs, primary first, for status.podIPs
	HostIPs  []string // the node's IPs, for status.hostIP(s)
	NodeName string   // for spec.nodeName when the pod's is empty

	ImageRef string // resolved image ID, put in ContainerConfig.Image

	// The image's configured user, from ImageStatus: ImageUser when numeric,
	// ImageUserName when a name. When both are unset the image runs as
	// root, and uid 0 is what gets checked and set, as upstream.
	ImageUser     *int64
	ImageUserName string

	// Mounts are the volume mounts, resolved by the caller. The
	// termination-message mount is added here.
	Mounts []*runtimeapi.Mount
	// PodDir is <rootDir>/pods/<uid>. Termination-message files live under
	// <PodDir>/containers/<container>/; "" means no termination-message
	// mount.
	PodDir string
	// PodLogsDir, when set, is the pod log root (as in SandboxOptions): the
	// container's log directory is created in it, as upstream does here.
	PodLogsDir string

	CPUCFSQuota       bool
	CPUCFSQuotaPeriod time.Duration // 0 means 100ms
	MachineMemory     int64         // bytes: for the OOM score and downward API defaults
	// Host, SingleProcessOOMKill and MemoryQoS are as in ResourceOptions.
	Host                 Host
	SingleProcessOOMKill bool
	MemoryQoS            *MemoryQoS

	SeccompDefault bool // RuntimeDefault instead of Unconfined when no profile is set
	// SeccompProfileRoot holds Localhost seccomp profiles; "" means
	// <rootDir>/seccomp, derived from PodDir.
	SeccompProfileRoot string

	// TargetContainerID is, for an ephemeral container, the runtime ID of
	// the container whose PID namespace it joins.
	TargetContainerID string

	// UserNamespace is the pod's user namespace, as in SandboxOptions. In POD mode
	// every mount carries its ID mappings (idmapped mounts).
	UserNamespace *runtimeapi.UserNamespace

	// EnvSources reads the secrets, config maps and services the environment
	// refers to; nil in standalone mode (no service links; secret and config
	// map sources fail with ErrNeedsClusterMode).
	EnvSources EnvSources
	// EnableServiceLinks is the pod's spec.enableServiceLinks (default true):
	// whether the services of its namespace become env vars.
	EnableServiceLinks bool

	// Devices are the container's devices from the device plugins; nil: none.
	Devices *DeviceOptions
}

// ResourceOptions are the options container resources are made with.
func (o ContainerOptions) ResourceOptions() ResourceOptions {
	return ResourceOptions{
		CPUCFSQuota: o.CPUCFSQuota, CPUCFSQuotaPeriod: o.CPUCFSQuotaPeriod, MachineMemory: o.MachineMemory,
		Host: o.Host, SingleProcessOOMKill: o.SingleProcessOOMKill, MemoryQoS: o.MemoryQoS,
	}
}

func (o ContainerOptions) seccompProfileRoot() string {
	if o.SeccompProfileRoot != "" || o.PodDir == "" {
		return o.SeccompProfileRoot
	}
	rootDir := filepath.Dir(filepath.Dir(o.PodDir))
	return filepath.Join(rootDir, "seccomp")
}

// ContainerLogPath returns a container's log file relative to its pod's log
// directory: "<name>/<restartCount>.log".
func ContainerLogPath(containerName string, restartCount int) string {
	return filepath.Join(containerName, fmt.Sprintf("%d.log", restartCount))
}

// GenerateContainerConfig builds the config of one start of a container
// (restartCount is the attempt). It creates the container's log directory
// (when opts.PodLogsDir is set) and the termination-message file the
// container writes its last words to; the returned cleanup removes that
// file, to be called when the container could not be created. cleanup is
// never nil; on error no file is left behind. ctx bounds the reads of the API
// objects the environment refers to.
func GenerateContainerConfig(ctx context.Context, c *v1.Container, pod *v1.Pod, restartCount int, opts ContainerOptions) (*runtimeapi.ContainerConfig, func(), error) {
	noop := func() {}
	uid, username := opts.ImageUser, opts.ImageUserName
	if uid == nil && username == "" {
		uid = new(int64) // an image without a user runs as root
	}
	if err := checkUserNamespace(pod, opts.UserNamespace); err != nil {
		return nil, noop, err
	}
	if err := VerifyRunAsNonRoot(pod, c, uid, username); err != nil {
		return nil, noop, err
	}
	envs, err := MakeEnvironmentVariables(ctx, pod, c, opts)
	if err != nil {
		return nil, noop, err
	}
	linux, err := linuxContainerConfig(pod, c, uid, username, opts)
	if err != nil {
		return nil, noop, err
	}
	if err := makeContainerLogDir(pod, c, opts.PodLogsDir); err != nil {
		return nil, noop, err
	}
	if opts.Devices != nil {
		// The plugins' variables first, as upstream: the container's own win.
		envs = append(append([]*runtimeapi.KeyValue(nil), opts.Devices.Envs...), envs...)
	}
	config := newContainerConfig(c, pod, restartCount, envs, opts)
	config.Linux = linux
	applyDeviceOptions(config, opts.Devices)
	mount, cleanup := terminationMessageMount(c, opts.PodDir)
	if mount != nil {
		config.Mounts = append(config.Mounts, mount)
	}
	idmapMounts(config.Mounts, opts.UserNamespace)
	return config, cleanup, nil
}

// newContainerConfig fills in what comes straight from the spec.
func newContainerConfig(c *v1.Container, pod *v1.Pod, restartCount int, envs []*runtimeapi.KeyValue, opts ContainerOptions) *runtimeapi.ContainerConfig {
	command, args := ExpandContainerCommandAndArgs(c, envs)
	return &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(restartCount)},
		Image:       &runtimeapi.ImageSpec{Image: opts.ImageRef, UserSpecifiedImage: c.Image},
		Command:     command,
		Args:        args,
		WorkingDir:  c.WorkingDir,
		Envs:        envs,
		Mounts:      append([]*runtimeapi.Mount(nil), opts.Mounts...),
		Labels:      NewContainerLabels(c, pod),
		Annotations: NewContainerAnnotations(c, pod, restartCount),
		LogPath:     ContainerLogPath(c.Name, restartCount),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
	}
}

func makeContainerLogDir(pod *v1.Pod, c *v1.Container, podLogsDir string) error {
	if podLogsDir == "" {
		return nil
	}
	dir := ContainerLogDir(podLogsDir, pod.Namespace, pod.Name, pod.UID, c.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create container log directory for container %s failed: %v", c.Name, err)
	}
	return nil
}

// linuxContainerConfig builds the container's resources and security context.
func linuxContainerConfig(pod *v1.Pod, c *v1.Container, uid *int64, username string, opts ContainerOptions) (*runtimeapi.LinuxContainerConfig, error) {
	sc, err := containerSecurityContext(pod, c, uid, username, opts)
	if err != nil {
		return nil, err
	}
	resources := LinuxContainerResources(pod, c, opts.ResourceOptions())
	return &runtimeapi.LinuxContainerConfig{Resources: resources, SecurityContext: sc}, nil
}

// terminationMessageMount creates an empty, world-writable file for the
// container's termination message and mounts it at terminationMessagePath.
// The file is per start (random name), so a restart does not read the
// previous message; it lives in the pod directory, not the container, so
// that it survives the container. As upstream, a file that cannot be made
// costs the message, not the container: the error is logged and no mount
// returned.
func terminationMessageMount(c *v1.Container, podDir string) (*runtimeapi.Mount, func()) {
	noop := func() {}
	if podDir == "" || c.TerminationMessagePath == "" {
		return nil, noop
	}
	dir := filepath.Join(podDir, "containers", c.Name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		klog.ErrorS(err, "Error on creating termination-log directory", "path", dir)
		return nil, noop
	}
	path := filepath.Join(dir, fmt.Sprintf("%08x", rand.Uint32()))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		klog.ErrorS(err, "Error on creating termination-log file", "path", path)
		return nil, noop
	}
	f.Close()
	// The create was subject to the umask; the container may run as any user.
	if err := os.Chmod(path, 0o666); err != nil {
		klog.ErrorS(err, "Unable to set termination-log file permissions", "path", path)
	}
	cleanup := func() { _ = os.Remove(path) }
	return &runtimeapi.Mount{HostPath: path, ContainerPath: c.TerminationMessagePath}, cleanup
}
