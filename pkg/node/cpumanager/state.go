package cpumanager

import (
	"maps"
	"slices"

	"k8s.io/utils/cpuset"
)

// cpuState is what the CPU manager keeps, and checkpoints: the default set (the shared
// pool) and the exclusive CPUs of containers, by pod UID and container name. It is not
// safe for concurrent use; the manager serializes access. changed tells the manager
// the state needs writing out.
type cpuState struct {
	defaultSet  cpuset.CPUSet
	assignments map[string]map[string]cpuset.CPUSet
	changed     bool
}

func newCPUState() *cpuState {
	return &cpuState{defaultSet: cpuset.New(), assignments: map[string]map[string]cpuset.CPUSet{}}
}

func (s *cpuState) get(podUID, container string) (cpuset.CPUSet, bool) {
	cpus, ok := s.assignments[podUID][container]
	return cpus, ok
}

// getOrDefault is the container's exclusive CPUs, or the shared pool.
func (s *cpuState) getOrDefault(podUID, container string) cpuset.CPUSet {
	if cpus, ok := s.get(podUID, container); ok {
		return cpus
	}
	return s.defaultSet
}

func (s *cpuState) set(podUID, container string, cpus cpuset.CPUSet) {
	if s.assignments[podUID] == nil {
		s.assignments[podUID] = map[string]cpuset.CPUSet{}
	}
	s.assignments[podUID][container] = cpus
	s.changed = true
}

func (s *cpuState) setDefault(cpus cpuset.CPUSet) {
	s.defaultSet = cpus
	s.changed = true
}

func (s *cpuState) delete(podUID, container string) {
	if _, ok := s.assignments[podUID][container]; !ok {
		return
	}
	delete(s.assignments[podUID], container)
	if len(s.assignments[podUID]) == 0 {
		delete(s.assignments, podUID)
	}
	s.changed = true
}

// assigned is every exclusively assigned CPU.
func (s *cpuState) assigned() cpuset.CPUSet {
	all := cpuset.New()
	for _, containers := range s.assignments {
		for _, cpus := range containers {
			all = all.Union(cpus)
		}
	}
	return all
}

// each calls f for every assignment, in pod and container name order.
func (s *cpuState) each(f func(podUID, container string, cpus cpuset.CPUSet)) {
	for _, pod := range slices.Sorted(maps.Keys(s.assignments)) {
		for _, container := range slices.Sorted(maps.Keys(s.assignments[pod])) {
			f(pod, container, s.assignments[pod][container])
		}
	}
}
