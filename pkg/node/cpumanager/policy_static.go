package cpumanager

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/node/cpumanager/topology"
	"github.com/nodelet/nodelet/pkg/node/topologymanager"
	"github.com/nodelet/nodelet/pkg/qos"
)

// SMTAlignmentError refuses a full-pcpus-only request that is not made of whole cores,
// or that the free whole cores cannot hold. Type gives the pod's admission reason.
type SMTAlignmentError struct {
	RequestedCPUs         int
	CpusPerCore           int
	AvailablePhysicalCPUs int
	CausedByPhysicalCPUs  bool
}

func (e SMTAlignmentError) Error() string {
	if e.CausedByPhysicalCPUs {
		return fmt.Sprintf("SMT Alignment Error: not enough free physical CPUs: available physical CPUs = %d, requested CPUs = %d, CPUs per core = %d", e.AvailablePhysicalCPUs, e.RequestedCPUs, e.CpusPerCore)
	}
	return fmt.Sprintf("SMT Alignment Error: requested %d cpus not multiple cpus per core = %d", e.RequestedCPUs, e.CpusPerCore)
}

// Type is the admission failure reason, "SMTAlignmentError".
func (e SMTAlignmentError) Type() string { return "SMTAlignmentError" }

// staticPolicy gives guaranteed containers with an integer CPU request CPUs of their
// own, as upstream's static policy. The CPUs are in three groups: the shared pool (the
// state's default set, where every other container runs), the reserved CPUs (part of the
// shared pool, or not even that with strict-cpu-reservation, and never given
// exclusively) and the exclusive assignments.
type staticPolicy struct {
	topo *topology.CPUTopology
	opts policyOptions
	// reserved is never given exclusively; reservedPhysical adds the reserved CPUs'
	// core siblings, which full-pcpus-only cannot give either.
	reserved, reservedPhysical cpuset.CPUSet
	// affinity is the topology manager's choice for a container; nil for none.
	affinity topologymanager.Store
	// cpusToReuse holds, for the pod being admitted, the exclusive CPUs of its init
	// containers, which its later containers may take again.
	cpusToReuse map[string]cpuset.CPUSet
	// cpuGroupSize is the threads per core.
	cpuGroupSize int
	metrics      *metrics
}

// newStaticPolicy sets the policy up and reserves its CPUs: reservedCPUs when given,
// else numReserved CPUs taken by topology, as an allocation would take them.
func newStaticPolicy(topo *topology.CPUTopology, opts policyOptions, numReserved int, reservedCPUs cpuset.CPUSet, affinity topologymanager.Store, m *metrics) (*staticPolicy, error) {
	p := &staticPolicy{
		topo:         topo,
		opts:         opts,
		affinity:     affinity,
		cpusToReuse:  map[string]cpuset.CPUSet{},
		cpuGroupSize: max(topo.CPUsPerCore(), 1),
		metrics:      m,
	}
	reserved := reservedCPUs
	if reserved.IsEmpty() {
		reserved, _ = p.takeByTopology(topo.CPUDetails.CPUs(), numReserved)
	}
	if reserved.Size() != numReserved {
		return nil, fmt.Errorf("[cpumanager] unable to reserve the required amount of CPUs (size of %s did not equal %d)", reserved, numReserved)
	}
	p.reserved = reserved
	p.reservedPhysical = cpuset.New()
	for _, cpu := range reserved.List() {
		core, err := topo.CPUCoreID(cpu)
		if err != nil {
			return nil, fmt.Errorf("[cpumanager] unable to build the reserved physical CPUs from the reserved set: %w", err)
		}
		p.reservedPhysical = p.reservedPhysical.Union(topo.CPUDetails.CPUsInCores(core))
	}
	return p, nil
}

// takeByTopology picks n CPUs of available with the algorithm the options select.
func (p *staticPolicy) takeByTopology(available cpuset.CPUSet, n int) (cpuset.CPUSet, error) {
	spread := p.opts.distributeAcrossCores
	if p.opts.distributeAcrossNUMA {
		groupSize := 1
		if p.opts.fullPCPUsOnly {
			groupSize = p.cpuGroupSize
		}
		return takeByTopologyNUMADistributed(p.topo, available, n, groupSize, spread, p.opts.alignBySocket)
	}
	return takeByTopologyNUMAPacked(p.topo, available, n, spread, p.opts.preferUncoreCache)
}

// poolCPUs is the CPUs the shared pool has when nothing is assigned.
func (p *staticPolicy) poolCPUs() cpuset.CPUSet {
	all := p.topo.CPUDetails.CPUs()
	if p.opts.strictReservation {
		return all.Difference(p.reserved)
	}
	return all
}

// allocatable is every CPU that may be given exclusively.
func (p *staticPolicy) allocatable() cpuset.CPUSet {
	return p.topo.CPUDetails.CPUs().Difference(p.reserved)
}

// available is the CPUs free for exclusive assignment now.
func (p *staticPolicy) available(s *cpuState) cpuset.CPUSet {
	return s.defaultSet.Difference(p.reserved)
}

// start initializes an empty state, or checks that a restored one fits this machine
// and configuration (upstream's validateState, messages included).
func (p *staticPolicy) start(s *cpuState) error {
	pool := p.poolCPUs()
	if s.defaultSet.IsEmpty() {
		if len(s.assignments) != 0 {
			return fmt.Errorf("default cpuset cannot be empty")
		}
		s.setDefault(pool)
		return nil
	}
	if err := p.checkReservedInDefault(s.defaultSet); err != nil {
		return err
	}
	var err error
	s.each(func(pod, container string, cpus cpuset.CPUSet) {
		if err == nil && !cpus.Intersection(s.defaultSet).IsEmpty() {
			err = fmt.Errorf("pod: %s, container: %s cpuset: %q overlaps with default cpuset %q", pod, container, cpus, s.defaultSet)
		}
	})
	if err != nil {
		return err
	}
	// CPUs may have gone offline, or come online, since the state was written.
	if known := s.defaultSet.Union(s.assigned()); !known.Equals(pool) {
		return fmt.Errorf("current set of available CPUs %q doesn't match with CPUs in state %q", pool, known)
	}
	return nil
}

// checkReservedInDefault: the reserved CPUs are all in the shared pool, or, with
// strict-cpu-reservation, none is. A mismatch means the reservation changed since the
// state was written.
func (p *staticPolicy) checkReservedInDefault(defaultSet cpuset.CPUSet) error {
	inDefault := p.reserved.Intersection(defaultSet)
	if p.opts.strictReservation && !inDefault.IsEmpty() {
		return fmt.Errorf("some of strictly reserved cpus: %q are present in defaultCpuSet: %q", inDefault, defaultSet)
	}
	if !p.opts.strictReservation && !inDefault.Equals(p.reserved) {
		return fmt.Errorf("not all reserved cpus: %q are present in defaultCpuSet: %q", p.reserved, defaultSet)
	}
	return nil
}

// guaranteedCPUs is the number of exclusive CPUs the container asks for: its CPU
// request when the pod is Guaranteed and the request is whole CPUs, else 0.
func guaranteedCPUs(pod *v1.Pod, container *v1.Container) int {
	if qos.GetPodQOS(pod) != v1.PodQOSGuaranteed {
		return 0
	}
	cpu := container.Resources.Requests[v1.ResourceCPU]
	if !isIntegral(cpu) {
		return 0
	}
	return int(cpu.Value())
}

func isIntegral(q resource.Quantity) bool { return q.Value()*1000 == q.MilliValue() }

func isRestartableInit(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// podGuaranteedCPUs is the exclusive CPUs the pod needs at its peak: the most of its
// app containers with its sidecars, or of any init container with the sidecars started
// before it.
func podGuaranteedCPUs(pod *v1.Pod) int {
	initPeak, sidecars := 0, 0
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if _, ok := c.Resources.Requests[v1.ResourceCPU]; !ok {
			continue
		}
		n := guaranteedCPUs(pod, c)
		if isRestartableInit(c) {
			sidecars += n
		} else {
			initPeak = max(initPeak, sidecars+n)
		}
	}
	apps := 0
	for i := range pod.Spec.Containers {
		if _, ok := pod.Spec.Containers[i].Resources.Requests[v1.ResourceCPU]; ok {
			apps += guaranteedCPUs(pod, &pod.Spec.Containers[i])
		}
	}
	return max(initPeak, apps+sidecars)
}

// skipsPodLevelResources: upstream leaves pods with pod-level resources to the shared
// pool, without hints, while its PodLevelResourceManagers gate is off (its default).
func skipsPodLevelResources(pod *v1.Pod) bool {
	return resourcehelper.IsPodLevelResourcesSet(pod)
}

// allocate gives the container its exclusive CPUs if it asks for any, following the
// topology manager's affinity and reusing its pod's init containers' CPUs.
func (p *staticPolicy) allocate(s *cpuState, pod *v1.Pod, container *v1.Container) error {
	n := guaranteedCPUs(pod, container)
	if n == 0 || skipsPodLevelResources(pod) {
		return nil
	}
	p.metrics.pinningRequests.Inc()
	err := p.allocateExclusive(s, pod, container, n)
	if err != nil {
		p.metrics.pinningErrors.Inc()
	}
	return err
}

func (p *staticPolicy) allocateExclusive(s *cpuState, pod *v1.Pod, container *v1.Container, n int) error {
	podUID := string(pod.UID)
	// A container already in the state keeps its CPUs, even if they would break the
	// current options (e.g. after a restart with full-pcpus-only newly set).
	if cpus, ok := s.get(podUID, container.Name); ok {
		p.updateCPUsToReuse(pod, container, cpus)
		return nil
	}
	if err := p.checkSMTAlignment(s, n); err != nil {
		return err
	}
	cpus, err := p.allocateCPUs(s, n, p.affinityOf(podUID, container.Name), p.cpusToReuse[podUID])
	if err != nil {
		return err
	}
	s.set(podUID, container.Name, cpus)
	p.updateCPUsToReuse(pod, container, cpus)
	return nil
}

func (p *staticPolicy) affinityOf(podUID, container string) topologymanager.Mask {
	if p.affinity == nil {
		return 0
	}
	return p.affinity.GetAffinity(podUID, container).NUMANodeAffinity
}

// checkSMTAlignment enforces full-pcpus-only: whole cores, and enough free whole cores
// once the reserved CPUs' siblings are counted out.
func (p *staticPolicy) checkSMTAlignment(s *cpuState, n int) error {
	if !p.opts.fullPCPUsOnly {
		return nil
	}
	if n%p.cpuGroupSize != 0 {
		return SMTAlignmentError{RequestedCPUs: n, CpusPerCore: p.cpuGroupSize}
	}
	if free := s.defaultSet.Difference(p.reservedPhysical).Size(); n > free {
		return SMTAlignmentError{RequestedCPUs: n, CpusPerCore: p.cpuGroupSize, AvailablePhysicalCPUs: free, CausedByPhysicalCPUs: true}
	}
	return nil
}

// allocateCPUs takes n CPUs from the available and reusable ones, within the NUMA
// affinity first (widened to sockets with align-by-socket), and removes them from the
// shared pool.
func (p *staticPolicy) allocateCPUs(s *cpuState, n int, affinity topologymanager.Mask, reusable cpuset.CPUSet) (cpuset.CPUSet, error) {
	candidates := p.available(s).Union(reusable)
	result := cpuset.New()
	if !affinity.IsEmpty() {
		aligned := p.alignedCPUs(affinity, candidates)
		cpus, err := p.takeByTopology(aligned, min(n, aligned.Size()))
		if err != nil {
			return cpuset.New(), err
		}
		result = cpus
	}
	rest, err := p.takeByTopology(candidates.Difference(result), n-result.Size())
	if err != nil {
		return cpuset.New(), err
	}
	result = result.Union(rest)
	s.setDefault(s.defaultSet.Difference(result))
	return result, nil
}

// alignedCPUs is the candidates on the affinity's NUMA nodes, or on their sockets with
// align-by-socket.
func (p *staticPolicy) alignedCPUs(affinity topologymanager.Mask, candidates cpuset.CPUSet) cpuset.CPUSet {
	details := p.topo.CPUDetails
	if p.opts.alignBySocket {
		sockets := details.SocketsInNUMANodes(affinity.Bits()...).List()
		return candidates.Intersection(details.CPUsInSockets(sockets...))
	}
	return candidates.Intersection(details.CPUsInNUMANodes(affinity.Bits()...))
}

// updateCPUsToReuse records that an init container's CPUs may be taken again by its
// pod's later containers (not a sidecar's: it keeps running), and that an app
// container's may not. Only the pod being admitted is remembered.
func (p *staticPolicy) updateCPUsToReuse(pod *v1.Pod, container *v1.Container, cpus cpuset.CPUSet) {
	podUID := string(pod.UID)
	for uid := range p.cpusToReuse {
		if uid != podUID {
			delete(p.cpusToReuse, uid)
		}
	}
	reuse, ok := p.cpusToReuse[podUID]
	if !ok {
		reuse = cpuset.New()
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name != container.Name {
			continue
		}
		if !isRestartableInit(&pod.Spec.InitContainers[i]) {
			p.cpusToReuse[podUID] = reuse.Union(cpus)
			return
		}
		break
	}
	p.cpusToReuse[podUID] = reuse.Difference(cpus)
}

// removeContainer returns the container's exclusive CPUs to the shared pool, but for
// those another container of the pod still holds (reused init container CPUs).
func (p *staticPolicy) removeContainer(s *cpuState, podUID, container string) {
	cpus, ok := s.get(podUID, container)
	if !ok {
		return
	}
	s.delete(podUID, container)
	for _, siblingCPUs := range s.assignments[podUID] {
		cpus = cpus.Difference(siblingCPUs)
	}
	s.setDefault(s.defaultSet.Union(cpus))
}
