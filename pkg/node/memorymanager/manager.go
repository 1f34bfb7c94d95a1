package memorymanager

import (
	"context"
	"fmt"
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodelet/nodelet/pkg/node/memorymanager/state"
	"github.com/nodelet/nodelet/pkg/node/topologymanager"
)

// The policies, as memoryManagerPolicy spells them.
const (
	PolicyNone   = "None"
	PolicyStatic = "Static"
)

// UnexpectedAdmissionError is the reason admission gives a pod the memory manager
// cannot allocate (upstream's admission.ErrorReasonUnexpected).
const UnexpectedAdmissionError = "UnexpectedAdmissionError"

// AdmissionMessage is the message of that rejection for Allocate's error.
func AdmissionMessage(err error) string {
	return fmt.Sprintf("Allocate failed due to %v, which is unexpected", err)
}

// Options configure a Manager.
type Options struct {
	// Policy is memoryManagerPolicy: None or Static.
	Policy string
	// ReservedMemory is reservedMemory, the memory kept for the system per NUMA node.
	ReservedMemory []kubeletconfig.MemoryReservation
	// ExpectedReservedTotal is kubeReserved + systemReserved + evictionHard, by
	// resource (upstream's node allocatable reservation); the reservedMemory of each
	// memory type must add up to it.
	ExpectedReservedTotal v1.ResourceList
	// StateDir holds the state file (the kubelet's root directory).
	StateDir string
	// SysfsRoot is where sysfs is mounted; "" is /sys.
	SysfsRoot string
	// Affinity gives the topology manager's NUMA affinity of each container; nil
	// gives none, and the manager picks the narrowest placement that fits.
	Affinity topologymanager.Store
	// SourcesReady reports whether all pod sources have been seen: until then the
	// active pods are not all known and no allocation is taken as stale. nil: ready.
	SourcesReady func() bool
}

// Manager assigns NUMA memory to the containers of Guaranteed pods. It is safe for
// concurrent use.
type Manager struct {
	policyName   string
	static       *staticPolicy // nil with the None policy
	stateDir     string
	sourcesReady func() bool
	metrics      *metrics
	logger       klog.Logger

	mu          sync.Mutex
	state       memoryState
	allocatable []state.Block
	activePods  func() []*v1.Pod
}

var _ topologymanager.HintProvider = (*Manager)(nil)

// New makes the manager of the policy and restores its state file, creating it when
// there is none. With the Static policy it reads the machine's NUMA memory and checks
// reservedMemory. A state file of another policy, or whose machine state does not
// match, is an error: upstream's kubelet refuses to start then.
func New(opts Options) (*Manager, error) {
	m := &Manager{
		policyName:   opts.Policy,
		stateDir:     opts.StateDir,
		sourcesReady: opts.SourcesReady,
		metrics:      newMetrics(),
		logger:       klog.Background().WithName("memorymanager"),
	}
	if m.sourcesReady == nil {
		m.sourcesReady = func() bool { return true }
	}
	switch opts.Policy {
	case PolicyNone:
	case PolicyStatic:
		p, err := newStaticPolicy(opts, m.metrics)
		if err != nil {
			return nil, err
		}
		m.static = p
	default:
		return nil, fmt.Errorf("unknown policy: %q", opts.Policy)
	}
	if err := m.restoreState(); err != nil {
		return nil, err
	}
	return m, nil
}

func newStaticPolicy(opts Options, mx *metrics) (*staticPolicy, error) {
	root := opts.SysfsRoot
	if root == "" {
		root = "/sys"
	}
	nodes, err := readNUMANodes(root)
	if err != nil {
		return nil, err
	}
	ids := make([]int, len(nodes))
	for i, n := range nodes {
		ids[i] = n.id
	}
	reserved, err := systemReservedMemory(ids, opts.ReservedMemory, opts.ExpectedReservedTotal)
	if err != nil {
		return nil, err
	}
	if err := requireReservedMemory(reserved); err != nil {
		return nil, err
	}
	machine, err := defaultMachineState(nodes, reserved)
	if err != nil {
		return nil, err
	}
	return &staticPolicy{affinity: opts.Affinity, defaultMachine: machine, reusable: reusableMemory{}, metrics: mx}, nil
}

// restoreState loads the state file and, for the Static policy, validates it against
// the machine, filling in the machine state of a new file.
func (m *Manager) restoreState() error {
	d, err := state.Load(m.stateDir, m.policyName)
	if err != nil {
		m.logger.Error(err, "Could not initialize checkpoint manager, please drain node and remove policy state file")
		return err
	}
	m.state = memoryState{machine: d.MachineState, assignments: d.Entries}
	if m.state.assignments == nil { // "entries": null
		m.state.assignments = state.ContainerMemoryAssignments{}
	}
	if m.static == nil {
		return nil
	}
	wasEmpty := len(m.state.machine) == 0
	diff, err := m.static.validateState(&m.state)
	if err != nil {
		m.logger.Error(err, "Invalid state, please drain node and remove policy state file", "difference", diff)
		return err
	}
	if wasEmpty {
		if err := m.save(); err != nil {
			return err
		}
	}
	m.allocatable = allocatableBlocks(m.state.machine)
	return nil
}

// Start begins the manager's work with the kubelet's active pods, from which the
// allocations of containers that are gone are found and freed, as upstream's
// removeStaleState does, before every allocation and hint request. activePods must
// include the pod being admitted.
func (m *Manager) Start(ctx context.Context, activePods func() []*v1.Pod) error {
	klog.FromContext(ctx).Info("Starting memorymanager", "policy", m.policyName)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.activePods = activePods
	return nil
}

// Allocate assigns the container its NUMA memory, at the pod's admission, once the
// topology manager has stored the container's affinity. Init containers must come
// before app containers, in order. The error has upstream's message; admission
// rejects the pod with UnexpectedAdmissionError and AdmissionMessage(err).
func (m *Manager) Allocate(pod *v1.Pod, container *v1.Container) error {
	m.removeStaleState()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.static == nil {
		return nil
	}
	changed, err := m.static.allocate(&m.state, pod, container)
	if err != nil {
		m.logger.Error(err, "Allocate error", "pod", klog.KObj(pod), "containerName", container.Name)
		return err
	}
	if changed {
		_ = m.save() // logged; the allocation stands, as upstream's does
	}
	return nil
}

// AddContainer is called when the container is created. Regular init containers run
// one after the other, so the allocations of those before it are freed: their memory
// was reused or may now go to other pods. Allocations are keyed by pod and container
// name (RemoveContainer too), so containerID is not kept.
func (m *Manager) AddContainer(pod *v1.Pod, container *v1.Container, containerID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.static == nil {
		return
	}
	changed := false
	for i := range pod.Spec.InitContainers {
		init := &pod.Spec.InitContainers[i]
		if init.Name == container.Name {
			break
		}
		if !isRestartable(init) && m.static.removeContainer(&m.state, string(pod.UID), init.Name) {
			changed = true
		}
	}
	if changed {
		_ = m.save()
	}
}

// RemoveContainer frees the container's memory. Removing a container without memory
// is not an error; the error is that of writing the state file.
func (m *Manager) RemoveContainer(podUID, containerName string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.static == nil || !m.static.removeContainer(&m.state, podUID, containerName) {
		return nil
	}
	return m.save()
}

// MemoryNUMANodesFor returns the NUMA nodes of the container's memory, lowest first,
// for cpuset.mems; ok is false when its memory is not restricted.
func (m *Manager) MemoryNUMANodesFor(pod *v1.Pod, container *v1.Container) (nodes []int, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[int]bool{}
	for _, b := range m.state.assignments[string(pod.UID)][container.Name] {
		for _, id := range b.NUMAAffinity {
			if !seen[id] {
				seen[id] = true
				nodes = append(nodes, id)
			}
		}
	}
	sort.Ints(nodes)
	return nodes, len(nodes) > 0
}

// GetMemory returns the container's memory blocks for the pod resources API, empty
// when it has none.
func (m *Manager) GetMemory(podUID, containerName string) []*podresourcesv1.ContainerMemory {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []*podresourcesv1.ContainerMemory{}
	for _, b := range m.state.assignments[podUID][containerName] {
		out = append(out, containerMemory(b))
	}
	return out
}

// GetAllocatableMemory returns, for the pod resources API, the allocatable memory of
// every type on every NUMA node, by node then type; none with the None policy.
func (m *Manager) GetAllocatableMemory() []*podresourcesv1.ContainerMemory {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*podresourcesv1.ContainerMemory, 0, len(m.allocatable))
	for _, b := range m.allocatable {
		out = append(out, containerMemory(b))
	}
	return out
}

// GetTopologyHints gives the topology manager the NUMA placements of the container's
// memory and huge pages, by resource; nil when it gets none of its own.
func (m *Manager) GetTopologyHints(pod *v1.Pod, container *v1.Container) map[string][]topologymanager.TopologyHint {
	m.removeStaleState()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.static == nil {
		return nil
	}
	return m.static.containerHints(&m.state, pod, container)
}

// GetPodTopologyHints is GetTopologyHints for the pod as a whole (pod scope).
func (m *Manager) GetPodTopologyHints(pod *v1.Pod) map[string][]topologymanager.TopologyHint {
	m.removeStaleState()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.static == nil {
		return nil
	}
	return m.static.podHints(&m.state, pod)
}

// removeStaleState frees the allocations of containers no active pod has, once the
// pod sources are ready.
func (m *Manager) removeStaleState() {
	m.mu.Lock()
	activePods := m.activePods
	m.mu.Unlock()
	if m.static == nil || activePods == nil || !m.sourcesReady() {
		return
	}
	active := map[string]map[string]bool{}
	for _, pod := range activePods() {
		names := map[string]bool{}
		for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for i := range list {
				names[list[i].Name] = true
			}
		}
		active[string(pod.UID)] = names
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := false
	for podUID, containers := range m.state.assignments {
		for name := range containers {
			if !active[podUID][name] {
				m.logger.V(2).Info("RemoveStaleState removing state", "podUID", podUID, "containerName", name)
				changed = m.static.removeContainer(&m.state, podUID, name) || changed
			}
		}
	}
	if changed {
		_ = m.save()
	}
}

// save writes the state file; a failure is logged, as upstream does, and returned.
func (m *Manager) save() error {
	err := state.Save(m.stateDir, state.Data{PolicyName: m.policyName, MachineState: m.state.machine, Entries: m.state.assignments})
	if err != nil {
		m.logger.Error(err, "Failed to store state to checkpoint")
	}
	return err
}

// allocatableBlocks is a block per NUMA node and type with allocatable memory.
func allocatableBlocks(machine state.NUMANodeMap) []state.Block {
	var out []state.Block
	for _, id := range sortedNodeIDs(machine) {
		for _, name := range sortedNames(machine[id].MemoryMap) {
			if a := machine[id].MemoryMap[name].Allocatable; a != 0 {
				out = append(out, state.Block{NUMAAffinity: []int{id}, Type: name, Size: a})
			}
		}
	}
	return out
}

// containerMemory is a block as the pod resources API reports it.
func containerMemory(b state.Block) *podresourcesv1.ContainerMemory {
	nodes := make([]*podresourcesv1.NUMANode, 0, len(b.NUMAAffinity))
	for _, id := range b.NUMAAffinity {
		nodes = append(nodes, &podresourcesv1.NUMANode{ID: int64(id)})
	}
	return &podresourcesv1.ContainerMemory{MemoryType: string(b.Type), Size: b.Size, Topology: &podresourcesv1.TopologyInfo{Nodes: nodes}}
}
