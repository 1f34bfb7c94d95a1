// Package deviceplugin is nodelet's device manager, upstream's
// pkg/kubelet/cm/devicemanager: device plugins register on kubelet.sock, the manager
// streams their devices (ListAndWatch) into the node's capacity and allocatable, allocates
// devices to containers at admission (Allocate, GetPreferredAllocation), hands the
// runtime the envs, mounts, device nodes, annotations and CDI devices the plugins
// answered (PreStartContainer first when asked), and keeps the allocations in upstream's
// kubelet_internal_checkpoint so that they survive a restart. As a topology manager
// hint provider (HintProvider) it gives the NUMA placements its devices allow, and
// picks devices on the NUMA nodes the topology manager chose (SetAffinity).
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/node/deviceplugin/checkpoint"
	"github.com/nodelet/nodelet/pkg/node/topologymanager"
)

const (
	// DefaultDir is upstream's device plugin directory. Upstream's kubelet uses it
	// whatever its --root-dir: plugins are built to look for kubelet.sock there.
	DefaultDir = pluginapi.DevicePluginPath
	// KubeletSocketName is the Registration service's socket in the directory.
	KubeletSocketName = "kubelet.sock"
	// DefaultStopGracePeriod is upstream's endpointStopGracePeriod: how long the resource
	// of a plugin that stopped stays on the node before it is deleted.
	DefaultStopGracePeriod = 5 * time.Minute
	// updatesBuffer is the size of upstream's device health update channel.
	updatesBuffer = 100
)

// ActivePodsFunc lists the pods admitted and not yet terminated; devices of other pods
// are freed.
type ActivePodsFunc func() []*v1.Pod

// ContainerKey names a container of a pod.
type ContainerKey struct {
	PodUID        string
	ContainerName string
}

// Options configure a Manager. All are optional.
type Options struct {
	// Dir holds kubelet.sock, the plugins' sockets and the checkpoint. Default DefaultDir.
	Dir string
	// Clock times the stop grace period. Default the real clock.
	Clock clock.PassiveClock
	// StopGracePeriod overrides DefaultStopGracePeriod (tests).
	StopGracePeriod time.Duration
	// DisableResourceHealthStatus turns off the pod updates sent on Updates when an
	// allocated device's health changes (upstream's ResourceHealthStatus gate, on by
	// default in v1.37).
	DisableResourceHealthStatus bool
}

// StartOptions are what the manager needs from the kubelet once it runs.
type StartOptions struct {
	// ActivePods lists the active pods. Required.
	ActivePods ActivePodsFunc
	// SourcesReady reports whether all pod sources have been seen; until then no
	// allocation is freed and containers found running are not allocated again. Nil
	// means always ready.
	SourcesReady func() bool
	// RunningContainers are the containers the runtime reported running when the kubelet
	// started: while sources are not ready, allocating for one of them is a no-op (the
	// kubelet restarted; the container has its devices already).
	RunningContainers []ContainerKey
}

// ResourceUpdate names the pods whose allocated devices changed health.
type ResourceUpdate struct {
	PodUIDs []string
}

// Manager manages the device plugins of the node.
type Manager struct {
	dir                string
	clock              clock.PassiveClock
	stopGracePeriod    time.Duration
	reportDeviceHealth bool
	server             *registrationServer
	logger             klog.Logger

	// allocMu serializes allocations: devicesToReuse and the devices being picked are
	// only consistent within one Allocate.
	allocMu sync.Mutex
	// writeMu keeps checkpoint writes in the order of the states they snapshot.
	writeMu sync.Mutex

	mu sync.Mutex
	// endpointStore holds every connected plugin by resource and socket; endpoints the
	// one serving each resource (which may be stopped, during the grace period).
	endpointStore map[string]map[string]*endpoint
	endpoints     map[string]*endpoint
	// allDevices are the devices the plugins listed; healthyDevices and
	// unhealthyDevices their IDs by health. A resource in healthyDevices is registered,
	// even with no device (after a restart, until its plugin registers again).
	allDevices       ResourceDeviceInstances
	healthyDevices   map[string]sets.Set[string]
	unhealthyDevices map[string]sets.Set[string]
	// allocatedDevices are the device IDs in use, by resource.
	allocatedDevices map[string]sets.Set[string]
	podDevices       podDevices
	// devicesToReuse are the devices of the pod being admitted that its (non-restartable)
	// init containers released for the next containers, by resource.
	devicesToReuse map[string]map[string]sets.Set[string]
	activePods     ActivePodsFunc
	sourcesReady   func() bool
	runningAtStart sets.Set[ContainerKey]
	// affinity gives the NUMA nodes chosen for a container (nil: none);
	// machineNUMANodes are the machine's NUMA nodes, nil when unknown.
	affinity         topologymanager.Store
	machineNUMANodes []int

	capacityChanged chan struct{}
	updates         chan ResourceUpdate
}

// New returns a manager for the plugins of opts.Dir, which it creates.
func New(opts Options) (*Manager, error) {
	if opts.Dir == "" {
		opts.Dir = DefaultDir
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.StopGracePeriod == 0 {
		opts.StopGracePeriod = DefaultStopGracePeriod
	}
	// Upstream's checkpoint manager creates the directory when the manager is built.
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("failed to initialize checkpoint manager: %v", err)
	}
	m := &Manager{
		dir:                opts.Dir,
		clock:              opts.Clock,
		stopGracePeriod:    opts.StopGracePeriod,
		reportDeviceHealth: !opts.DisableResourceHealthStatus,
		logger:             klog.Background(),
		endpointStore:      map[string]map[string]*endpoint{},
		endpoints:          map[string]*endpoint{},
		allDevices:         ResourceDeviceInstances{},
		healthyDevices:     map[string]sets.Set[string]{},
		unhealthyDevices:   map[string]sets.Set[string]{},
		allocatedDevices:   map[string]sets.Set[string]{},
		podDevices:         podDevices{},
		devicesToReuse:     map[string]map[string]sets.Set[string]{},
		activePods:         func() []*v1.Pod { return nil },
		sourcesReady:       func() bool { return true },
		runningAtStart:     sets.New[ContainerKey](),
		capacityChanged:    make(chan struct{}, 1),
		updates:            make(chan ResourceUpdate, updatesBuffer),
	}
	m.server = newRegistrationServer(m, opts.Dir)
	return m, nil
}

// SocketPath is the Registration service's socket.
func (m *Manager) SocketPath() string { return m.server.socketPath() }

// Start restores the allocations from the checkpoint and serves the Registration
// service. A checkpoint that cannot be read is logged and ignored, as upstream does.
func (m *Manager) Start(ctx context.Context, opts StartOptions) error {
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Starting Device Plugin manager")
	m.mu.Lock()
	m.logger = logger
	if opts.ActivePods != nil {
		m.activePods = opts.ActivePods
	}
	if opts.SourcesReady != nil {
		m.sourcesReady = opts.SourcesReady
	}
	m.runningAtStart = sets.New(opts.RunningContainers...)
	m.mu.Unlock()
	if err := m.readCheckpoint(logger); err != nil {
		logger.Error(err, "Continue after failing to read checkpoint file. Device allocation info may NOT be up-to-date")
	}
	return m.server.start(logger)
}

// Stop disconnects the plugins and stops the Registration service. It may be called
// without Start and more than once.
func (m *Manager) Stop(ctx context.Context) {
	m.server.stop(klog.FromContext(ctx))
}

// Name is the manager's health check name (upstream's "device-plugin" healthz check);
// with Check it makes the manager a healthz.HealthChecker.
func (m *Manager) Name() string { return "device-plugin" }

// Check returns why the Registration service stopped serving, if it failed.
func (m *Manager) Check(req *http.Request) error { return m.server.check(req) }

// CapacityChanged is signalled (coalesced) whenever GetCapacity may return something
// new: a plugin's devices changed, a plugin stopped, or a resource was deleted. The node
// status updater can listen to it to report the change before its next period.
func (m *Manager) CapacityChanged() <-chan struct{} { return m.capacityChanged }

// Updates receives the pods whose allocated devices changed health (upstream's
// Updates), for their status' allocatedResourcesStatus.
func (m *Manager) Updates() <-chan ResourceUpdate { return m.updates }

func (m *Manager) notifyCapacityChanged() {
	select {
	case m.capacityChanged <- struct{}{}:
	default:
	}
}

// ShouldResetExtendedResourceCapacity reports whether the node's extended resources
// should be zeroed: the directory holds no file at all (upstream lists its checkpoint
// store, every file not starting with "."), which means the node was recreated.
func (m *Manager) ShouldResetExtendedResourceCapacity() bool {
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.Name()[0] != '.' {
			return false
		}
	}
	return true
}

// readCheckpoint restores the allocations; every resource that had healthy devices is
// registered again with no device and a stopped endpoint, so that its capacity stays
// zero until its plugin registers again, and it is deleted after the grace period if the
// plugin does not.
func (m *Manager) readCheckpoint(logger klog.Logger) error {
	entries, registered, err := checkpoint.Read(m.dir)
	if errors.Is(err, checkpoint.ErrNotFound) {
		logger.Error(err, "Failed to read data from checkpoint", "checkpoint", checkpoint.FileName)
		return nil
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.podDevices.fromCheckpointData(logger, entries)
	m.allocatedDevices = m.podDevices.devices()
	for resource := range registered {
		m.healthyDevices[resource] = sets.New[string]()
		m.unhealthyDevices[resource] = sets.New[string]()
		m.endpoints[resource] = newStoppedEndpoint(resource, m.clock.Now())
	}
	logger.V(4).Info("Read data from checkpoint file", "checkpoint", checkpoint.FileName)
	return nil
}

// writeCheckpoint stores the allocations and the healthy devices.
func (m *Manager) writeCheckpoint(logger klog.Logger) error {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	m.mu.Lock()
	registered := make(map[string][]string, len(m.healthyDevices))
	for resource, devices := range m.healthyDevices {
		registered[resource] = devices.UnsortedList()
	}
	entries := m.podDevices.toCheckpointData(logger)
	m.mu.Unlock()
	if err := checkpoint.Write(m.dir, entries, registered); err != nil {
		logger.Error(err, "Failed to write checkpoint file")
		return fmt.Errorf("failed to write checkpoint file %q: %v", checkpoint.FileName, err)
	}
	logger.V(4).Info("Checkpoint file written", "checkpoint", checkpoint.FileName)
	return nil
}
