package cpumanager

import (
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/node/cpumanager/topology"
	"github.com/nodelet/nodelet/pkg/node/topologymanager"
)

// The topologies of upstream's cpumanager tests (policy_test.go), rebuilt as data.
// Their counts are upstream's, NumNUMANodes left at zero where upstream leaves it: the
// allocation algorithm compares NumSockets with it.

// topoSingleSocketHT: 1 socket, 4 cores of 2 threads; CPU n and n+4 are siblings.
var topoSingleSocketHT = &topology.CPUTopology{
	NumCPUs: 8, NumSockets: 1, NumCores: 4,
	CPUDetails: detailsOf(8, func(cpu int) topology.CPUInfo {
		return topology.CPUInfo{CoreID: cpu % 4}
	}),
}

// topoDualSocketHT: 2 sockets (= NUMA nodes) of 3 cores of 2 threads; even CPUs on
// socket 0, odd on socket 1, CPU n and n+6 siblings.
var topoDualSocketHT = &topology.CPUTopology{
	NumCPUs: 12, NumSockets: 2, NumCores: 6, NumUncoreCache: 1,
	CPUDetails: detailsOf(12, func(cpu int) topology.CPUInfo {
		return topology.CPUInfo{CoreID: cpu % 6, SocketID: cpu % 2, NUMANodeID: cpu % 2}
	}),
}

// topoDualSocketNoHT: 2 sockets (= NUMA nodes) of 4 single-thread cores.
var topoDualSocketNoHT = &topology.CPUTopology{
	NumCPUs: 8, NumSockets: 2, NumCores: 8,
	CPUDetails: detailsOf(8, func(cpu int) topology.CPUInfo {
		return topology.CPUInfo{CoreID: cpu, SocketID: cpu / 4, NUMANodeID: cpu / 4}
	}),
}

// topoDualSocketMultiNumaPerSocketHT: 2 sockets of 2 NUMA nodes of 10 cores of 2
// threads; NUMA node n holds CPUs 10n..10n+9 and their siblings 40 above.
var topoDualSocketMultiNumaPerSocketHT = linearTopology(2, 4, 40)

// topoDualSocketMultiNumaPerSocketHTLarge: the same with 8 NUMA nodes of 16 cores.
var topoDualSocketMultiNumaPerSocketHTLarge = linearTopology(2, 8, 128)

// linearTopology numbers CPUs as Linux does on x86: core c's threads are c and
// c+cores; cores are spread evenly over NUMA nodes and sockets in order.
func linearTopology(sockets, numas, cores int) *topology.CPUTopology {
	return &topology.CPUTopology{
		NumCPUs: 2 * cores, NumSockets: sockets, NumCores: cores, NumNUMANodes: numas,
		CPUDetails: detailsOf(2*cores, func(cpu int) topology.CPUInfo {
			core := cpu % cores
			return topology.CPUInfo{CoreID: core, SocketID: core / (cores / sockets), NUMANodeID: core / (cores / numas)}
		}),
	}
}

// Uncore cache topologies: groups of 4 cores share an L3.
var (
	topoUncoreSingleSocketNoSMT = &topology.CPUTopology{
		NumCPUs: 16, NumSockets: 1, NumCores: 16, NumUncoreCache: 4,
		CPUDetails: detailsOf(16, func(cpu int) topology.CPUInfo {
			return topology.CPUInfo{CoreID: cpu, UncoreCacheID: cpu / 4}
		}),
	}
	topoUncoreDualSocketNoSMT = &topology.CPUTopology{
		NumCPUs: 16, NumSockets: 2, NumCores: 16, NumUncoreCache: 4,
		CPUDetails: detailsOf(16, func(cpu int) topology.CPUInfo {
			return topology.CPUInfo{CoreID: cpu, SocketID: cpu / 8, UncoreCacheID: cpu / 4}
		}),
	}
	topoUncoreSingleSocketMultiNuma = &topology.CPUTopology{
		NumCPUs: 16, NumSockets: 1, NumCores: 16, NumUncoreCache: 4,
		CPUDetails: detailsOf(16, func(cpu int) topology.CPUInfo {
			return topology.CPUInfo{CoreID: cpu, NUMANodeID: cpu / 8, UncoreCacheID: cpu / 4}
		}),
	}
	topoUncoreSingleSocketSMT = &topology.CPUTopology{
		NumCPUs: 16, NumSockets: 1, NumCores: 8, NumUncoreCache: 2,
		CPUDetails: detailsOf(16, func(cpu int) topology.CPUInfo {
			return topology.CPUInfo{CoreID: cpu % 8, UncoreCacheID: cpu % 8 / 4}
		}),
	}
	// topoDualSocketSingleNumaPerSocketSMTUncore: 2 sockets (= NUMA nodes) of 96 cores
	// of 2 threads, 8 cores per L3.
	topoDualSocketSingleNumaPerSocketSMTUncore = &topology.CPUTopology{
		NumCPUs: 384, NumCores: 192, NumUncoreCache: 24, NumSockets: 2, NumNUMANodes: 2,
		CPUDetails: detailsOf(384, func(cpu int) topology.CPUInfo {
			core := cpu % 192
			return topology.CPUInfo{CoreID: core, SocketID: core / 96, NUMANodeID: core / 96, UncoreCacheID: core / 8}
		}),
	}
)

func detailsOf(n int, info func(cpu int) topology.CPUInfo) topology.CPUDetails {
	d := topology.CPUDetails{}
	for cpu := 0; cpu < n; cpu++ {
		d[cpu] = info(cpu)
	}
	return d
}

func mustParse(t *testing.T, s string) cpuset.CPUSet {
	t.Helper()
	cpus, err := cpuset.Parse(s)
	if err != nil {
		t.Fatalf("parsing %q: %v", s, err)
	}
	return cpus
}

// resources requests and limits the CPU given, with 1G of memory.
func resources(request, limit string) v1.ResourceRequirements {
	return v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(request), v1.ResourceMemory: resource.MustParse("1G")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse(limit), v1.ResourceMemory: resource.MustParse("1G")},
	}
}

// makePod is a pod of one container with the CPU request and limit given.
func makePod(podUID, container, request, limit string) *v1.Pod {
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: container, Resources: resources(request, limit)}}}}
	pod.UID = types.UID(podUID)
	return pod
}

// makeMultiContainerPod has init containers "init-N" and app containers "app-N" with
// equal CPU requests and limits.
func makeMultiContainerPod(podUID string, initCPUs, appCPUs []string) *v1.Pod {
	pod := &v1.Pod{}
	pod.UID = types.UID(podUID)
	for i, cpu := range initCPUs {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, v1.Container{Name: "init-" + strconv.Itoa(i), Resources: resources(cpu, cpu)})
	}
	for i, cpu := range appCPUs {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "app-" + strconv.Itoa(i), Resources: resources(cpu, cpu)})
	}
	return pod
}

// fixedAffinity is a topology manager store that gives every container one hint.
type fixedAffinity struct{ hint topologymanager.TopologyHint }

func (f fixedAffinity) GetAffinity(string, string) topologymanager.TopologyHint { return f.hint }

// testPolicy builds a static policy as upstream's tests do, alpha options enabled.
func testPolicy(t *testing.T, topo *topology.CPUTopology, numReserved int, reserved cpuset.CPUSet, options map[string]string, affinity topologymanager.Store) *staticPolicy {
	t.Helper()
	opts, err := parsePolicyOptions(options, optionGates{alpha: true, beta: true})
	if err != nil {
		t.Fatalf("options: %v", err)
	}
	p, err := newStaticPolicy(topo, opts, numReserved, reserved, affinity, newMetrics())
	if err != nil {
		t.Fatalf("newStaticPolicy: %v", err)
	}
	return p
}

// stateWith is a state with the given shared pool and assignments.
func stateWith(defaultSet cpuset.CPUSet, assignments map[string]map[string]cpuset.CPUSet) *cpuState {
	s := newCPUState()
	s.defaultSet = defaultSet
	for pod, containers := range assignments {
		for container, cpus := range containers {
			s.set(pod, container, cpus)
		}
	}
	return s
}
