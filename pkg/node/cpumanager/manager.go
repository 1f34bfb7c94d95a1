package cpumanager

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/node/cpumanager/state"
	"github.com/nodelet/nodelet/pkg/node/cpumanager/topology"
	"github.com/nodelet/nodelet/pkg/node/topologymanager"
)

// The CPU manager policies (cpuManagerPolicy).
const (
	PolicyNone   = "none"
	PolicyStatic = "static"
)

// DefaultReconcilePeriod is upstream's default cpuManagerReconcilePeriod.
const DefaultReconcilePeriod = 10 * time.Second

// Options configure New.
type Options struct {
	// Policy is "none" (the default when empty) or "static".
	Policy string
	// PolicyOptions are cpuManagerPolicyOptions; the none policy takes none.
	PolicyOptions map[string]string
	// AlphaOptionsEnabled is the CPUManagerPolicyAlphaOptions gate (off by default),
	// BetaOptionsDisabled turns off CPUManagerPolicyBetaOptions (on by default).
	AlphaOptionsEnabled, BetaOptionsDisabled bool
	// ReservedSystemCPUs are the CPUs kept from exclusive use (reservedSystemCPUs).
	// When empty, ceil(ReservedCPUs) CPUs are picked by topology, lowest cores first.
	ReservedSystemCPUs cpuset.CPUSet
	// ReservedCPUs is kubeReserved+systemReserved cpu; ignored with ReservedSystemCPUs.
	ReservedCPUs resource.Quantity
	// StateDir holds the checkpoint file, state.FileName (the kubelet's root
	// directory); required.
	StateDir string
	// ReconcilePeriod is how often Start's loop re-applies cpusets
	// (DefaultReconcilePeriod when zero).
	ReconcilePeriod time.Duration
	// SysfsRoot is where Discover reads the topology (topology.DefaultSysfsRoot when
	// empty); Topology, when set, is used instead.
	SysfsRoot string
	Topology  *topology.CPUTopology
	// Affinity gives the topology manager's NUMA affinity of a container; nil for none.
	Affinity topologymanager.Store
	// TopologyManagerPolicy is the topology manager's policy name; align-by-socket is
	// refused with "single-numa-node".
	TopologyManagerPolicy string
	// SourcesReady reports whether the pod sources have been read once, so that the
	// active pods are all known and state of other pods may be dropped. Nil: always.
	SourcesReady func() bool
}

// ContainerRuntime is what the reconcile loop needs of the container runtime.
type ContainerRuntime interface {
	// RunningContainerID is the ID of the container's running instance, if it runs.
	RunningContainerID(podUID, containerName string) (id string, ok bool)
	// UpdateContainerCPUSet sets the container's cpuset (UpdateContainerResources).
	UpdateContainerCPUSet(ctx context.Context, containerID string, cpus cpuset.CPUSet) error
}

// Manager assigns CPUs to containers, upstream's CPU manager. It is safe for concurrent
// use, and is a hint provider of the topology manager.
type Manager struct {
	policyName      string
	static          *staticPolicy // nil with the none policy
	topo            *topology.CPUTopology
	statePath       string
	reconcilePeriod time.Duration
	sourcesReady    func() bool
	metrics         *metrics

	mu    sync.Mutex
	state *cpuState
	// applied is the cpuset each running container was last given (at creation for
	// exclusive ones, or by the reconcile loop), by pod UID and container name.
	applied    map[string]map[string]cpuset.CPUSet
	activePods func() []*v1.Pod
}

var _ topologymanager.HintProvider = (*Manager)(nil)

// New sets the manager up: discovers the topology, reserves CPUs, and restores the
// state file, which must have been written by the same policy with the same reserved
// CPUs on the same CPUs (else the node is to be drained and the file removed, as
// upstream asks).
func New(opts Options) (*Manager, error) {
	m := &Manager{
		policyName:      opts.Policy,
		statePath:       filepath.Join(opts.StateDir, state.FileName),
		reconcilePeriod: opts.ReconcilePeriod,
		sourcesReady:    opts.SourcesReady,
		metrics:         newMetrics(),
		state:           newCPUState(),
		applied:         map[string]map[string]cpuset.CPUSet{},
	}
	if m.policyName == "" {
		m.policyName = PolicyNone
	}
	if m.reconcilePeriod == 0 {
		m.reconcilePeriod = DefaultReconcilePeriod
	}
	if m.sourcesReady == nil {
		m.sourcesReady = func() bool { return true }
	}
	if err := m.setUpPolicy(opts); err != nil {
		return nil, err
	}
	if err := m.restoreState(); err != nil {
		return nil, err
	}
	m.updateGauges()
	return m, nil
}

func (m *Manager) setUpPolicy(opts Options) error {
	topo := opts.Topology
	if topo == nil {
		var err error
		if topo, err = topology.Discover(opts.SysfsRoot); err != nil {
			return err
		}
	}
	m.topo = topo
	switch m.policyName {
	case PolicyNone:
		if len(opts.PolicyOptions) > 0 {
			return fmt.Errorf("new none policy error: None policy: received unsupported options=%v", opts.PolicyOptions)
		}
		return nil
	case PolicyStatic:
		static, err := newStaticFromOptions(topo, opts, m.metrics)
		if err != nil {
			return err
		}
		m.static = static
		return nil
	}
	return fmt.Errorf("unknown policy: %q", m.policyName)
}

func newStaticFromOptions(topo *topology.CPUTopology, opts Options, m *metrics) (*staticPolicy, error) {
	count := opts.ReservedSystemCPUs.Size()
	if count == 0 {
		count = int(math.Ceil(float64(opts.ReservedCPUs.MilliValue()) / 1000))
	}
	if count <= 0 {
		// An empty reservation would let exclusive CPUs take the whole shared pool.
		return nil, fmt.Errorf("[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero")
	}
	policyOpts, err := parsePolicyOptions(opts.PolicyOptions, optionGates{alpha: opts.AlphaOptionsEnabled, beta: !opts.BetaOptionsDisabled})
	if err == nil {
		err = policyOpts.validateForMachine(topo, opts.TopologyManagerPolicy)
	}
	var static *staticPolicy
	if err == nil {
		static, err = newStaticPolicy(topo, policyOpts, count, opts.ReservedSystemCPUs, opts.Affinity, m)
	}
	if err != nil {
		return nil, fmt.Errorf("new static policy error: %w", err)
	}
	return static, nil
}

// restoreState reads the state file (writing a fresh one when there is none) and lets
// the policy check it.
func (m *Manager) restoreState() error {
	cp, err := state.Read(m.statePath)
	switch {
	case errors.Is(err, state.ErrNotFound):
		m.state.changed, err = true, nil
	case err == nil && cp.PolicyName != m.policyName:
		err = fmt.Errorf("configured policy %q differs from state checkpoint policy %q", m.policyName, cp.PolicyName)
	case err == nil:
		m.state.defaultSet, m.state.assignments = cp.DefaultCPUSet, cp.Entries
	}
	if err != nil {
		return fmt.Errorf("could not restore state from checkpoint: %v, please drain this node and delete the CPU manager checkpoint file %q before restarting Kubelet", err, m.statePath)
	}
	if m.static != nil {
		if err := m.static.start(m.state); err != nil {
			return err
		}
	}
	return m.saveState()
}

// saveState writes the state file when the state changed.
func (m *Manager) saveState() error {
	if !m.state.changed {
		return nil
	}
	cp := state.Checkpoint{PolicyName: m.policyName, DefaultCPUSet: m.state.defaultSet, Entries: m.state.assignments}
	if err := state.Write(m.statePath, cp); err != nil {
		return fmt.Errorf("failed to store CPU manager state: %w", err)
	}
	m.state.changed = false
	return nil
}

// commit saves the state and refreshes the gauges after a change; a failed write is
// logged, as upstream logs it, and retried at the next change.
func (m *Manager) commit() {
	if !m.state.changed {
		return
	}
	if err := m.saveState(); err != nil {
		klog.ErrorS(err, "CPU manager: could not write the checkpoint")
	}
	m.updateGauges()
}

func (m *Manager) updateGauges() {
	if m.static == nil {
		return
	}
	m.metrics.update(m.topo, m.static.available(m.state), m.state.assigned())
}

// Collectors are the manager's kubelet_cpu_manager_* metrics, for the caller to
// register.
func (m *Manager) Collectors() []prometheus.Collector { return m.metrics.collectors() }

// Topology is the CPU topology the manager works with.
func (m *Manager) Topology() *topology.CPUTopology { return m.topo }

// Start runs the reconcile loop until ctx ends, with the static policy: every period it
// drops the state of containers no longer in activePods and re-applies, through
// runtime, the cpuset of every running container whose cpuset changed (the shared pool
// shrinks and grows as exclusive CPUs are given and returned). activePods must not call
// back into the manager.
func (m *Manager) Start(ctx context.Context, activePods func() []*v1.Pod, runtime ContainerRuntime) error {
	m.mu.Lock()
	m.activePods = activePods
	m.mu.Unlock()
	klog.FromContext(ctx).Info("CPU manager started", "policy", m.policyName, "reconcilePeriod", m.reconcilePeriod)
	if m.static == nil {
		return nil
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) { m.reconcile(ctx, runtime) }, m.reconcilePeriod)
	return nil
}

// Allocate gives the container its exclusive CPUs at admission, if it asks for any
// (Guaranteed pod, whole CPUs). Its error is an SMTAlignmentError, whose Type is the
// admission reason, or another error (upstream's UnexpectedAdmissionError).
func (m *Manager) Allocate(pod *v1.Pod, container *v1.Container) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removeStaleState()
	if m.static == nil {
		return nil
	}
	err := m.static.allocate(m.state, pod, container)
	m.commit()
	return err
}

// AddContainer records the container as created with the cpuset CPUSetFor gave it, so
// that the reconcile loop leaves an exclusive one alone. Shared-pool containers are
// not recorded, as upstream does not record them: the loop re-applies the pool once,
// in case it changed between creation and now.
func (m *Manager) AddContainer(pod *v1.Pod, container *v1.Container, containerID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cpus, ok := m.state.get(string(pod.UID), container.Name); ok {
		m.setApplied(string(pod.UID), container.Name, cpus)
	}
	klog.V(4).InfoS("CPU manager: added container", "pod", klog.KObj(pod), "containerName", container.Name, "containerID", containerID)
}

// RemoveContainer frees the container's exclusive CPUs (after it was killed or
// removed); the reconcile loop then stops updating it.
func (m *Manager) RemoveContainer(podUID, containerName string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removeContainer(podUID, containerName)
	m.commit()
	return nil
}

func (m *Manager) removeContainer(podUID, containerName string) {
	if m.static != nil {
		m.static.removeContainer(m.state, podUID, containerName)
	}
	delete(m.applied[podUID], containerName)
	if len(m.applied[podUID]) == 0 {
		delete(m.applied, podUID)
	}
}

// CPUSetFor is the cpuset to create the container with (the CRI's cpuset_cpus): its
// exclusive CPUs, or the shared pool; false with the none policy, which sets none.
func (m *Manager) CPUSetFor(pod *v1.Pod, container *v1.Container) (cpuset.CPUSet, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cpus := m.state.getOrDefault(string(pod.UID), container.Name)
	return cpus, !cpus.IsEmpty()
}

// GetExclusiveCPUs is the container's exclusive CPUs, empty if it has none (the
// pod-resources API's cpu_ids).
func (m *Manager) GetExclusiveCPUs(podUID, containerName string) cpuset.CPUSet {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cpus, ok := m.state.get(podUID, containerName); ok {
		return cpus.Clone()
	}
	return cpuset.New()
}

// GetAllocatableCPUs is the CPUs that may be given exclusively: all but the reserved
// ones with the static policy, none with the none policy (pod-resources API).
func (m *Manager) GetAllocatableCPUs() cpuset.CPUSet {
	if m.static == nil {
		return cpuset.New()
	}
	return m.static.allocatable()
}

// GetTopologyHints gives the topology manager the NUMA placements of the container's
// exclusive CPUs ("cpu"); nil when it asks for none.
func (m *Manager) GetTopologyHints(pod *v1.Pod, container *v1.Container) map[string][]topologymanager.TopologyHint {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removeStaleState()
	if m.static == nil {
		return nil
	}
	return m.static.containerHints(m.state, pod, container)
}

// GetPodTopologyHints is GetTopologyHints for the whole pod (topology manager pod scope).
func (m *Manager) GetPodTopologyHints(pod *v1.Pod) map[string][]topologymanager.TopologyHint {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removeStaleState()
	if m.static == nil {
		return nil
	}
	return m.static.podHints(m.state, pod)
}

func (m *Manager) setApplied(podUID, container string, cpus cpuset.CPUSet) {
	if m.applied[podUID] == nil {
		m.applied[podUID] = map[string]cpuset.CPUSet{}
	}
	m.applied[podUID][container] = cpus
}
