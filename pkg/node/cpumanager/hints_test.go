package cpumanager

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/node/cpumanager/topology"
	tm "github.com/nodelet/nodelet/pkg/node/topologymanager"
)

// topoHints is upstream's topology_hints_test machine: 2 NUMA nodes (= sockets) of 3
// cores of 2 threads; NUMA 0 holds CPUs 0-2 and 6-8.
var topoHints = topology.New(detailsOf(12, func(cpu int) topology.CPUInfo {
	return topology.CPUInfo{CoreID: cpu % 6, SocketID: cpu % 6 / 3, NUMANodeID: cpu % 6 / 3, UncoreCacheID: 1}
}))

func hint(preferred bool, numas ...int) tm.TopologyHint {
	return tm.TopologyHint{NUMANodeAffinity: tm.MustMask(numas...), Preferred: preferred}
}

func TestTopologyHints(t *testing.T) {
	pod2, pod5, pod7, pod11 := makePod("fakePod", "fakeContainer", "2", "2"), makePod("fakePod", "fakeContainer", "5", "5"),
		makePod("fakePod", "fakeContainer", "7", "7"), makePod("fakePod", "fakeContainer", "11", "11")
	podLevel := makePod("fakePod", "fakeContainer", "2", "2")
	podLevel.Spec.Resources = &v1.ResourceRequirements{Requests: resources("3", "3").Requests, Limits: resources("3", "3").Limits}
	none := []tm.TopologyHint{}
	tests := []struct {
		name       string
		pod        *v1.Pod
		assigned   cpuset.CPUSet // to the pod's container
		defaultSet cpuset.CPUSet
		want       []tm.TopologyHint // nil: no preference
	}{
		{"2 of 4+6 free: either node", pod2, cpuset.New(), mustParse(t, "2-11"),
			[]tm.TopologyHint{hint(true, 0), hint(true, 1), hint(false, 0, 1)}},
		{"5 of 4+6 free: node 1", pod5, cpuset.New(), mustParse(t, "2-11"),
			[]tm.TopologyHint{hint(true, 1), hint(false, 0, 1)}},
		{"7 of 4+6 free: both nodes, the narrowest possible", pod7, cpuset.New(), mustParse(t, "2-11"),
			[]tm.TopologyHint{hint(true, 0, 1)}},
		{"11 of 10 free: none fits", pod11, cpuset.New(), mustParse(t, "2-11"), none},
		{"2 of 1+1 free: both nodes, not preferred", pod2, cpuset.New(), cpuset.New(0, 3),
			[]tm.TopologyHint{hint(false, 0, 1)}},
		{"5 of 4 free", pod5, cpuset.New(), mustParse(t, "0-3"), none},
		{"already on node 0", pod2, cpuset.New(0, 6), cpuset.New(),
			[]tm.TopologyHint{hint(true, 0), hint(false, 0, 1)}},
		{"already on node 1", pod2, cpuset.New(3, 9), cpuset.New(),
			[]tm.TopologyHint{hint(true, 1), hint(false, 0, 1)}},
		{"already across nodes", pod11, mustParse(t, "0-10"), cpuset.New(),
			[]tm.TopologyHint{hint(true, 0, 1)}},
		{"already more than requested", pod2, cpuset.New(0, 6, 3, 9), cpuset.New(), none},
		{"already fewer than requested", pod11, cpuset.New(0, 6, 3, 9), cpuset.New(), none},
		{"pod-level resources: no preference", podLevel, cpuset.New(), mustParse(t, "0-3"), nil},
		{"Burstable: no preference", makePod("fakePod", "fakeContainer", "1", "2"), cpuset.New(), mustParse(t, "0-11"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPolicy(t, topoHints, 0, cpuset.New(), nil, nil)
			var assignments map[string]map[string]cpuset.CPUSet
			if !tt.assigned.IsEmpty() {
				assignments = map[string]map[string]cpuset.CPUSet{"fakePod": {"fakeContainer": tt.assigned}}
			}
			s := stateWith(tt.defaultSet, assignments)
			container := &tt.pod.Spec.Containers[0]
			for scope, got := range map[string]map[string][]tm.TopologyHint{
				"container": p.containerHints(s, tt.pod, container),
				"pod":       p.podHints(s, tt.pod),
			} {
				if tt.want == nil {
					if got != nil {
						t.Errorf("%s hints = %v, want nil", scope, got)
					}
					continue
				}
				if !reflect.DeepEqual(got, map[string][]tm.TopologyHint{"cpu": tt.want}) {
					t.Errorf("%s hints = %v, want %v", scope, got, tt.want)
				}
			}
		})
	}
}

// Upstream's TestGetPodTopologyHintsWithPolicyOptions: with align-by-socket, masks on
// as few sockets as needed are preferred too.
func TestTopologyHintsAlignBySocket(t *testing.T) {
	allWith0 := func(alignBySocket bool) []tm.TopologyHint {
		return []tm.TopologyHint{hint(true, 0), hint(alignBySocket, 0, 1), hint(false, 0, 2), hint(false, 0, 3),
			hint(false, 0, 1, 2), hint(false, 0, 1, 3), hint(false, 0, 2, 3), hint(false, 0, 1, 2, 3)}
	}
	tests := []struct {
		name       string
		align      string
		request    string
		defaultSet string
		want       []tm.TopologyHint
	}{
		{"without: only the narrowest", "false", "2", "2,3,11", allWith0(false)},
		{"with: NUMA 0 and 1 share socket 0", "true", "2", "2,3,11", allWith0(true)},
		{"with, two sockets needed", "true", "41", "0-28,40-57", []tm.TopologyHint{hint(true, 0, 1, 2), hint(true, 0, 1, 2, 3)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPolicy(t, topoDualSocketMultiNumaPerSocketHT, 0, cpuset.New(), map[string]string{AlignBySocketOption: tt.align}, nil)
			pod := makePod("fakePod", "fakeContainer", tt.request, tt.request)
			got := p.podHints(stateWith(mustParse(t, tt.defaultSet), nil), pod)
			if !reflect.DeepEqual(got, map[string][]tm.TopologyHint{"cpu": tt.want}) {
				t.Errorf("hints = %v, want %v", got, tt.want)
			}
		})
	}
}

// An init container's CPUs count for its pod's next container: hints must keep them.
func TestTopologyHintsReusableCPUs(t *testing.T) {
	p := testPolicy(t, topoHints, 0, cpuset.New(), nil, nil)
	pod := makeMultiContainerPod("pod", []string{"2"}, []string{"2"})
	s := stateWith(mustParse(t, "0-11"), nil)
	if err := p.allocate(s, pod, &pod.Spec.InitContainers[0]); err != nil {
		t.Fatal(err)
	}
	initCPUs, _ := s.get("pod", "init-0")
	// Only NUMA node 1's free CPUs remain free for exclusive use besides the reused ones.
	s.setDefault(s.defaultSet.Difference(topoHints.CPUDetails.CPUsInNUMANodes(0)))
	got := p.containerHints(s, pod, &pod.Spec.Containers[0])
	want := []tm.TopologyHint{hint(true, 0), hint(false, 0, 1)}
	if !initCPUs.Equals(cpuset.New(0, 6)) || !reflect.DeepEqual(got["cpu"], want) {
		t.Errorf("init took %s; app hints %v, want %v", initCPUs, got["cpu"], want)
	}
}
