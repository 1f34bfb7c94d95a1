package topologymanager

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// ErrorTopologyAffinity is the reason of a pod rejected because its resources could
// not be aligned as the policy demands.
const ErrorTopologyAffinity = "TopologyAffinityError"

// ReasonUnexpectedAdmissionError is the reason of a pod rejected because a provider's
// Allocate failed with an error that names no reason of its own.
const ReasonUnexpectedAdmissionError = "UnexpectedAdmissionError"

// TopologyAffinityError rejects a pod whose merged hint the policy refuses.
type TopologyAffinityError struct{}

func (TopologyAffinityError) Error() string {
	return "Resources cannot be allocated with Topology locality"
}

// Type is the rejection's reason.
func (TopologyAffinityError) Type() string { return ErrorTopologyAffinity }

// Options configure a Manager, as the kubelet's topologyManager* settings.
type Options struct {
	// Policy is none ("" too), best-effort, restricted or single-numa-node.
	Policy string
	// Scope is container ("" too) or pod; the none policy ignores it.
	Scope         string
	PolicyOptions map[string]string
	// SysfsRoot is where the NUMA topology is read, "" for /sys.
	SysfsRoot string
	// NUMA is the machine's NUMA topology; nil to read it from SysfsRoot.
	NUMA *NUMAInfo
}

// Manager is the topology manager: the kubelet's admission handler that aligns the
// hint providers' resources on NUMA nodes, and the Store they read the chosen
// affinities from.
type Manager struct {
	policy policy
	scope  string
	numa   *NUMAInfo

	mu        sync.Mutex
	providers []HintProvider
	// affinity is the chosen hint per pod UID and container name.
	affinity map[string]map[string]TopologyHint
	// containers maps a container ID to its pod and name, for RemoveContainer.
	containers map[string]containerRef
}

type containerRef struct{ podUID, name string }

var _ Store = (*Manager)(nil)

// New makes the manager of the policy and scope, reading the NUMA topology unless
// given, with upstream's errors for unknown policies, scopes and options, and for
// more NUMA nodes than max-allowable-numa-nodes.
func New(opts Options) (*Manager, error) {
	m := &Manager{
		affinity:   map[string]map[string]TopologyHint{},
		containers: map[string]containerRef{},
	}
	if opts.Policy == "" || opts.Policy == PolicyNone {
		// As upstream, the none policy validates neither options nor scope and needs no
		// topology; it is still read, for NUMANodes, when it can be.
		m.policy = policy{name: PolicyNone}
		m.scope = NoneTopologyScope
		m.numa = opts.NUMA
		if m.numa == nil {
			m.numa, _ = ReadNUMAInfo(opts.SysfsRoot)
		}
		return m, nil
	}
	popts, err := NewPolicyOptions(opts.PolicyOptions)
	if err != nil {
		return nil, err
	}
	numa, err := loadNUMAInfo(opts, popts)
	if err != nil {
		return nil, fmt.Errorf("cannot discover NUMA topology: %w", err)
	}
	if len(numa.Nodes) > popts.MaxAllowableNUMANodes {
		return nil, fmt.Errorf("unsupported on machines with more than %v NUMA Nodes", popts.MaxAllowableNUMANodes)
	}
	switch opts.Policy {
	case PolicyBestEffort, PolicyRestricted, PolicySingleNumaNode:
	default:
		return nil, fmt.Errorf("unknown policy: \"%s\"", opts.Policy)
	}
	scope := opts.Scope
	if scope == "" {
		scope = ContainerTopologyScope
	}
	if scope != ContainerTopologyScope && scope != PodTopologyScope {
		return nil, fmt.Errorf("unknown scope: \"%s\"", scope)
	}
	m.policy = policy{name: opts.Policy, numa: numa, opts: popts}
	m.scope = scope
	m.numa = numa
	klog.InfoS("Creating topology manager with policy per scope", "topologyPolicyName", opts.Policy, "topologyScopeName", scope, "topologyPolicyOptions", popts)
	return m, nil
}

func loadNUMAInfo(opts Options, popts PolicyOptions) (*NUMAInfo, error) {
	numa := opts.NUMA
	if numa == nil {
		var err error
		if numa, err = ReadNUMAInfo(opts.SysfsRoot); err != nil {
			return nil, err
		}
	}
	for _, id := range numa.Nodes {
		if id < 0 || id >= 64 {
			return nil, fmt.Errorf("NUMA node %d out of range 0-63", id)
		}
	}
	if popts.PreferClosestNUMA && !numa.hasAllDistances() {
		return nil, errors.New("error getting NUMA distances from cadvisor")
	}
	return numa, nil
}

// AddHintProvider makes the manager consult p at admission, after those added before.
func (m *Manager) AddHintProvider(p HintProvider) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.providers = append(m.providers, p)
}

// GetAffinity is the hint chosen for the container at its admission; the empty hint
// when none was (the none policy, or an unknown container).
func (m *Manager) GetAffinity(podUID, containerName string) TopologyHint {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.affinity[podUID][containerName]
}

func (m *Manager) setAffinity(podUID, containerName string, h TopologyHint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.affinity[podUID] == nil {
		m.affinity[podUID] = map[string]TopologyHint{}
	}
	m.affinity[podUID][containerName] = h
}

// PolicyName is the policy in force, which the CPU manager checks its options against.
func (m *Manager) PolicyName() string { return m.policy.name }

// Scope is the scope in force: container, pod, or none under the none policy.
func (m *Manager) Scope() string { return m.scope }

// NUMANodes is the machine's NUMA node IDs, ascending; nil when unknown (the none
// policy on a machine whose topology could not be read).
func (m *Manager) NUMANodes() []int {
	if m.numa == nil {
		return nil
	}
	ids := slices.Clone(m.numa.Nodes)
	slices.Sort(ids)
	return ids
}

// Admit aligns the pod's resources and has the providers allocate them, as upstream's
// topology manager admit handler. A refused alignment gives TopologyAffinityError; a
// provider's Allocate error gives the error's Type() as reason when it has one, else
// UnexpectedAdmissionError with "Allocate failed due to ..., which is unexpected".
func (m *Manager) Admit(pod *v1.Pod) (ok bool, reason, message string) {
	AdmissionRequestsTotal.Inc()
	start := time.Now()
	err := m.admit(pod)
	// Whole milliseconds, as upstream observes them.
	AdmissionDuration.Observe(float64(time.Since(start).Milliseconds()))
	if err == nil {
		return true, "", ""
	}
	reason, message = admissionFailure(err)
	klog.V(4).InfoS("Pod Admit Result", "pod", klog.KObj(pod), "reason", reason, "message", message)
	return false, reason, message
}

func (m *Manager) admit(pod *v1.Pod) error {
	m.mu.Lock()
	providers := slices.Clone(m.providers)
	m.mu.Unlock()
	switch m.scope {
	case ContainerTopologyScope:
		return m.admitContainerScope(pod, providers)
	case PodTopologyScope:
		return m.admitPodScope(pod, providers)
	}
	return admitNoneScope(pod, providers)
}

// admissionFailure is the reason and message of a rejection for err (upstream's
// admission.GetPodAdmitResult).
func admissionFailure(err error) (reason, message string) {
	var typed interface {
		error
		Type() string
	}
	if errors.As(err, &typed) {
		return typed.Type(), typed.Error()
	}
	return ReasonUnexpectedAdmissionError, fmt.Sprintf("Allocate failed due to %v, which is unexpected", err)
}

// AddContainer records the ID of an admitted container, for RemoveContainer.
func (m *Manager) AddContainer(pod *v1.Pod, container *v1.Container, containerID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.containers[containerID] = containerRef{podUID: string(pod.UID), name: container.Name}
}

// RemoveContainer forgets a container's ID and, unless another ID (a restart of the
// container) still stands for the same pod and name, its affinity. Unknown IDs are
// ignored.
func (m *Manager) RemoveContainer(containerID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ref, ok := m.containers[containerID]
	if !ok {
		return
	}
	delete(m.containers, containerID)
	for _, other := range m.containers {
		if other == ref {
			return
		}
	}
	delete(m.affinity[ref.podUID], ref.name)
	if len(m.affinity[ref.podUID]) == 0 {
		delete(m.affinity, ref.podUID)
	}
}

// RemovePod forgets every affinity and container ID of the pod: for a pod that was
// rejected or is gone.
func (m *Manager) RemovePod(podUID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.affinity, podUID)
	for id, ref := range m.containers {
		if ref.podUID == podUID {
			delete(m.containers, id)
		}
	}
}
