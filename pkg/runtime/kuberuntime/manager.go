// Package kuberuntime is nodelet's runtime manager (upstream's kubeGenericRuntimeManager): it
// turns a v1.Pod plus the runtime's current state into CRI calls — sandboxes, containers,
// lifecycle hooks, restarts with back-off, kills with grace periods, garbage collection — and
// reports the runtime's state back as container.Pod and container.PodStatus.
package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/pod/allocation"
	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/pkg/runtime/images"
)

const (
	// kubeRuntimeAPIVersion is the only CRI "version" field value kubelets accept.
	kubeRuntimeAPIVersion = "0.1.0"
	// minimumGracePeriodInSeconds is the shortest stop window a container gets, to avoid
	// needless SIGKILLs.
	minimumGracePeriodInSeconds = 2
	// versionCacheTTL is how long APIVersion answers from its cache.
	versionCacheTTL = 60 * time.Second
	// defaultLegacyLogSymlinkDir is where kubelets link container logs for log shippers.
	defaultLegacyLogSymlinkDir = "/var/log/containers"
)

// ErrVersionNotSupported is returned when the runtime speaks another CRI version.
var ErrVersionNotSupported = errors.New("runtime api version is not supported")

// VolumeManager says where a pod's volumes are mounted (implemented by *volumes.Manager).
// The kubelet sets the volumes up before it calls SyncPod, as upstream's waits for its
// volume manager: the runtime manager only mounts them into containers.
type VolumeManager interface {
	// MountsFor returns the CRI mounts of container c; env is its environment, for
	// subPathExpr.
	MountsFor(pod *v1.Pod, c *v1.Container, env map[string]string) ([]*runtimeapi.Mount, error)
	// DevicesFor returns the CRI devices of container c's volumeDevices (raw block
	// volumes).
	DevicesFor(pod *v1.Pod, c *v1.Container) ([]*runtimeapi.Device, error)
	// PodDir is the pod's directory on the host (holds termination-message files).
	PodDir(uid types.UID) string
}

// UserNamespaces gives each pod its user namespace (implemented by *userns.Manager):
// the node's for a pod that shares it, the pod's own ID mappings for hostUsers: false,
// or an error saying why the pod cannot have one.
type UserNamespaces interface {
	GetOrCreateUserNamespaceMappings(ctx context.Context, pod *v1.Pod, runtimeHandler string) (*runtimeapi.UserNamespace, error)
}

// PodStateProvider tells the garbage collector which pods are gone.
type PodStateProvider interface {
	// IsPodDeleted reports a pod that no longer exists anywhere: all its runtime
	// leftovers and logs may go.
	IsPodDeleted(uid types.UID) bool
	// IsPodTerminated reports a pod that exists but will never run again.
	IsPodTerminated(uid types.UID) bool
}

// Options configures a Manager. RuntimeService, ImageService and Recorder are required.
type Options struct {
	RuntimeService internalapi.RuntimeService
	ImageService   internalapi.ImageManagerService
	// Recorder receives pod and container events; tests pass record.NewFakeRecorder.
	Recorder record.EventRecorder
	// LivenessManager and StartupManager hold probe results; nil means empty managers.
	LivenessManager, StartupManager results.Manager
	// Volumes may be nil: pods with volumes then fail to start.
	Volumes VolumeManager
	// SupportsRecursiveReadOnly says whether a pod's runtime handler can make recursively
	// read-only mounts, for the recursiveReadOnly of image volume mounts (the volume
	// manager resolves the others); nil: none can.
	SupportsRecursiveReadOnly func(pod *v1.Pod) bool
	// DNS may be nil (sandboxes then get no DNS config).
	DNS criconfig.DNSConfigurer
	// EnvSources reads the secrets, config maps and services of container environments
	// (cluster mode); nil in standalone mode, see criconfig.ContainerOptions.
	EnvSources criconfig.EnvSources
	// PodState may be nil: every pod then counts as existing, so GC removes nothing that
	// belongs to a live pod beyond the count limits of the policy.
	PodState PodStateProvider
	// UserNamespaces may be nil: configs then carry no user namespace, and pods with
	// hostUsers: false are refused (criconfig.ErrUserNamespacesNotSupported).
	UserNamespaces UserNamespaces

	RootDir, PodLogsDir, ClusterDomain, NodeName string
	NodeIPs                                      []string
	// CgroupParent returns the pod's cgroup parent; nil means "".
	CgroupParent                func(pod *v1.Pod) string
	SeccompDefault, CPUCFSQuota bool
	CPUCFSQuotaPeriod           time.Duration
	MachineMemory               int64
	ImageOptions                images.Options
	// DeviceOptions gives a container the devices the device plugins allocated to it
	// (upstream's device manager run options); nil: no device plugins. An error fails
	// the container's start (CreateContainerConfigError).
	DeviceOptions func(ctx context.Context, pod *v1.Pod, c *v1.Container) (*criconfig.DeviceOptions, error)
	// Pinning gives a container the CPUs and NUMA memory nodes the CPU and memory
	// managers assign it (cpuset_cpus, cpuset_mems), at creation as upstream's internal
	// container lifecycle does; "" leaves the runtime's default. Nil: no pinning.
	Pinning func(pod *v1.Pod, c *v1.Container) (cpus, mems string)
	// ContainerCreated tells the resource managers the ID of a container just created,
	// before it starts (upstream's PreStartContainer); an error fails the start.
	ContainerCreated func(pod *v1.Pod, c *v1.Container, containerID string) error
	// PrepareDynamicResources prepares a pod's DRA resource claims with their drivers
	// before its sandbox is created (upstream's runtimeHelper.PrepareDynamicResources);
	// nil: a pod with claims is not started.
	PrepareDynamicResources func(ctx context.Context, pod *v1.Pod) error
	// RuntimeClasses resolves a pod's runtimeClassName to the handler its sandbox runs
	// with; nil runs every pod under the runtime's default handler.
	RuntimeClasses RuntimeClassLookup
	// Clock drives grace-period and cache arithmetic; nil means the real clock.
	Clock clock.Clock
	// LegacyLogSymlinkDir is where /var/log/containers-style symlinks to container logs
	// go; "" means /var/log/containers.
	LegacyLogSymlinkDir string
	// PodResizer resizes pod cgroups around in-place container resizes (the container
	// manager); nil updates the containers only.
	PodResizer PodResizer

	// Host, SingleProcessOOMKill and MemoryQoS shape container resources with
	// CPUCFSQuota, CPUCFSQuotaPeriod and MachineMemory, as in criconfig.ResourceOptions;
	// the zero Host is a cgroup v1 host without huge pages or swap accounting.
	Host                 criconfig.Host
	SingleProcessOOMKill bool
	MemoryQoS            *criconfig.MemoryQoS
}

// Manager is the runtime manager. It implements container.Runtime,
// container.StreamingRuntime and container.CommandRunner.
type Manager struct {
	// ImageService answers PullImage, GetImageRef, ListImages, RemoveImage, ImageStats.
	container.ImageService

	runtimeName string
	runtime     internalapi.RuntimeService
	images      internalapi.ImageManagerService
	imagePuller images.ImageManager
	// runtimeImages is ImageService's concrete type, for image statuses (image users).
	runtimeImages *images.RuntimeImages
	recorder      record.EventRecorder
	liveness      results.Manager
	startup       results.Manager
	volumes       VolumeManager
	podState      PodStateProvider
	clock         clock.Clock
	hooks         *hookRunner
	// starts bounds the pod starts in the runtime at once (startgate.go).
	starts *startGate
	opts   Options
	// actuated records the resources each container was created or last resized with
	// (<RootDir>/actuated_pods_state; in memory without a RootDir).
	actuated *allocation.Store

	versionMu       sync.Mutex
	cachedVersion   *runtimeapi.VersionResponse
	cachedVersionAt time.Time
}

var (
	_ container.Runtime          = (*Manager)(nil)
	_ container.StreamingRuntime = (*Manager)(nil)
	_ container.CommandRunner    = (*Manager)(nil)
)

// NewManager checks the runtime's CRI version once (its runtime name becomes Type()) and
// builds the manager.
func NewManager(ctx context.Context, opts Options) (*Manager, error) {
	if opts.RuntimeService == nil || opts.ImageService == nil || opts.Recorder == nil {
		return nil, errors.New("kuberuntime: RuntimeService, ImageService and Recorder are required")
	}
	m := &Manager{
		runtime:  opts.RuntimeService,
		images:   opts.ImageService,
		recorder: opts.Recorder,
		liveness: opts.LivenessManager,
		startup:  opts.StartupManager,
		volumes:  opts.Volumes,
		podState: opts.PodState,
		clock:    opts.Clock,
		starts:   defaultStartGate(),
		opts:     opts,
	}
	m.applyDefaults()

	typed, err := m.runtime.Version(ctx, kubeRuntimeAPIVersion)
	if err != nil {
		return nil, fmt.Errorf("get remote runtime typed version failed: %w", err)
	}
	if typed.Version != kubeRuntimeAPIVersion {
		return nil, fmt.Errorf("%w: runtime reports %q, want %q", ErrVersionNotSupported, typed.Version, kubeRuntimeAPIVersion)
	}
	m.runtimeName = typed.RuntimeName
	m.storeVersion(typed)
	if opts.RootDir != "" {
		if m.actuated, err = allocation.NewStore(opts.RootDir, allocation.ActuatedPodsStateFile); err != nil {
			return nil, err
		}
	}
	klog.InfoS("Container runtime initialized", "containerRuntime", typed.RuntimeName,
		"version", typed.RuntimeVersion, "apiVersion", typed.RuntimeApiVersion)

	for _, dir := range []string{opts.PodLogsDir, m.opts.LegacyLogSymlinkDir} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			klog.ErrorS(err, "Failed to create log directory", "path", dir)
		}
	}

	runtimeImages := images.NewRuntimeImagesWithKeyring(opts.ImageService, opts.ImageOptions.NodeKeyring, opts.ImageOptions.CredentialPlugins)
	m.ImageService, m.runtimeImages = runtimeImages, runtimeImages
	m.imagePuller = images.NewImageManager(opts.Recorder, runtimeImages, opts.ImageOptions)
	m.hooks = newHookRunner(m, m, opts.Recorder)
	return m, nil
}

func (m *Manager) applyDefaults() {
	if m.liveness == nil {
		m.liveness = results.NewManager()
	}
	if m.startup == nil {
		m.startup = results.NewManager()
	}
	if m.podState == nil {
		m.podState = everyPodExists{}
	}
	if m.clock == nil {
		m.clock = clock.RealClock{}
	}
	if m.actuated == nil {
		m.actuated = allocation.NewMemoryStore()
	}
	if m.opts.LegacyLogSymlinkDir == "" {
		m.opts.LegacyLogSymlinkDir = defaultLegacyLogSymlinkDir
	}
}

// everyPodExists is the PodStateProvider used when none is given.
type everyPodExists struct{}

func (everyPodExists) IsPodDeleted(types.UID) bool    { return false }
func (everyPodExists) IsPodTerminated(types.UID) bool { return false }

// Type is the runtime's name, e.g. "containerd".
func (m *Manager) Type() string { return m.runtimeName }

// Version asks the runtime for its own version.
func (m *Manager) Version(ctx context.Context) (string, error) {
	typed, err := m.runtime.Version(ctx, kubeRuntimeAPIVersion)
	if err != nil {
		return "", fmt.Errorf("get remote runtime typed version failed: %w", err)
	}
	m.storeVersion(typed)
	return typed.RuntimeVersion, nil
}

// APIVersion returns the runtime's CRI API version, cached for a minute like upstream's
// versionCache.
func (m *Manager) APIVersion(ctx context.Context) (string, error) {
	m.versionMu.Lock()
	cached, at := m.cachedVersion, m.cachedVersionAt
	m.versionMu.Unlock()
	if cached != nil && m.clock.Since(at) < versionCacheTTL {
		return cached.RuntimeApiVersion, nil
	}
	typed, err := m.runtime.Version(ctx, kubeRuntimeAPIVersion)
	if err != nil {
		return "", fmt.Errorf("get remote runtime typed version failed: %w", err)
	}
	m.storeVersion(typed)
	return typed.RuntimeApiVersion, nil
}

func (m *Manager) storeVersion(v *runtimeapi.VersionResponse) {
	m.versionMu.Lock()
	defer m.versionMu.Unlock()
	m.cachedVersion, m.cachedVersionAt = v, m.clock.Now()
}

// Status returns the runtime's conditions; an error means Status itself failed.
func (m *Manager) Status(ctx context.Context) (*runtimeapi.RuntimeStatus, error) {
	resp, err := m.runtime.Status(ctx, false)
	if err != nil {
		return nil, err
	}
	if resp.GetStatus() == nil {
		return nil, errors.New("runtime status is nil")
	}
	return resp.GetStatus(), nil
}

// UpdatePodCIDR passes the node's pod CIDR to the runtime.
func (m *Manager) UpdatePodCIDR(ctx context.Context, cidr string) error {
	klog.InfoS("Updating runtime config through cri with podcidr", "CIDR", cidr)
	return m.runtime.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{
		NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: cidr},
	})
}

// CheckpointContainer passes a checkpoint request to the runtime.
func (m *Manager) CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) error {
	return m.runtime.CheckpointContainer(ctx, req)
}

// ListMetricDescriptors passes through to the runtime.
func (m *Manager) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	return m.runtime.ListMetricDescriptors(ctx)
}

// ListPodSandboxMetrics passes through to the runtime.
func (m *Manager) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	return m.runtime.ListPodSandboxMetrics(ctx)
}

// podDir is the pod's directory on the host: the volume manager's, else <root>/pods/<uid>.
func (m *Manager) podDir(uid types.UID) string {
	if m.volumes != nil {
		return m.volumes.PodDir(uid)
	}
	return filepath.Join(m.opts.RootDir, "pods", string(uid))
}
