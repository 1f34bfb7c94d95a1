package memorymanager

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/pkg/node/topologymanager"
)

func b(name string, size uint64, nodes ...int) string {
	return fmt.Sprintf("%s:%d@%v", name, size, nodes)
}

func TestOneNodeAllocation(t *testing.T) {
	m := newManager(t, oneNodeOptions(t))
	p := pod("p", nil, container("app", "memory", "1Gi", "hugepages-1Gi", "1Gi"))
	admit(t, m, p)
	if got, want := m.blocksOf("p", "app"), []string{b("hugepages-1Gi", gi, 0), b("memory", gi, 0)}; !reflect.DeepEqual(got, want) {
		t.Errorf("blocks %v, want %v", got, want)
	}
	node := m.machine()[0]
	if node.NumberOfAssignments != 2 || *node.MemoryMap[v1.ResourceMemory] != *table(8*gi, 1*gi, 1*gi, 3*gi) ||
		*node.MemoryMap["hugepages-1Gi"] != *table(2*gi, 0, 1*gi, 1*gi) || *node.MemoryMap["hugepages-2Mi"] != *table(1*gi, 0, 0, 1*gi) {
		t.Errorf("machine state:\n%s", dumpMachine(m.machine()))
	}
	if nodes, ok := m.MemoryNUMANodesFor(p, &p.Spec.Containers[0]); !ok || !reflect.DeepEqual(nodes, []int{0}) {
		t.Errorf("cpuset.mems %v, %v", nodes, ok)
	}
	memory := m.GetMemory("p", "app")
	if len(memory) != 2 || memory[1].MemoryType != "memory" || memory[1].Size != gi || memory[1].Topology.Nodes[0].ID != 0 {
		t.Errorf("GetMemory %v", memory)
	}
	if got := m.GetMemory("p", "other"); got == nil || len(got) != 0 {
		t.Errorf("GetMemory of a container without memory: %#v, want empty", got)
	}
}

// A pod asking more than node 0's allocatable memory (4Gi) is refused with upstream's
// message, and the reason and message admission gives it.
func TestOneNodeOverAllocatableRefused(t *testing.T) {
	m := newManager(t, oneNodeOptions(t))
	before := string(readState(t, m.stateDir))
	big := pod("big", nil, container("app", "memory", "4097Mi"))
	err := m.Allocate(big, &big.Spec.Containers[0])
	const want = "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
	if got := AdmissionMessage(err); got != "Allocate failed due to "+want+", which is unexpected" || UnexpectedAdmissionError != "UnexpectedAdmissionError" {
		t.Errorf("admission message %q", got)
	}
	if _, ok := m.MemoryNUMANodesFor(big, &big.Spec.Containers[0]); ok || string(readState(t, m.stateDir)) != before {
		t.Error("a refused container changed the state")
	}
	// 4Gi fits; then nothing more does.
	admit(t, m, pod("fits", nil, container("app", "memory", "3Gi"), container("app2", "memory", "1Gi")))
	small := pod("small", nil, container("app", "memory", "1Mi"))
	if err := m.Allocate(small, &small.Spec.Containers[0]); err == nil || err.Error() != want {
		t.Errorf("on a full node: %v", err)
	}
	if requests, errs := testutil.ToFloat64(m.metrics.pinningRequests), testutil.ToFloat64(m.metrics.pinningErrors); requests != 4 || errs != 2 {
		t.Errorf("pinning requests %v errors %v, want 4 and 2", requests, errs)
	}
}

func TestPodsThatGetNoMemory(t *testing.T) {
	m := newManager(t, oneNodeOptions(t))
	burstable := pod("burstable", nil, container("app", "memory", "1Gi"))
	burstable.Spec.Containers[0].Resources.Limits[v1.ResourceMemory] = resource.MustParse("2Gi")
	bestEffort := pod("besteffort", nil, v1.Container{Name: "app"})
	podLevel := pod("podlevel", nil, container("app", "memory", "1Gi"))
	podLevel.Spec.Resources = &v1.ResourceRequirements{Requests: resourceList("cpu", "2", "memory", "2Gi"), Limits: resourceList("cpu", "2", "memory", "2Gi")}
	noMemory := pod("nomemory", nil, v1.Container{Name: "app", Resources: v1.ResourceRequirements{Requests: resourceList("cpu", "1"), Limits: resourceList("cpu", "1")}})
	for _, p := range []*v1.Pod{burstable, bestEffort, podLevel, noMemory} {
		admit(t, m, p)
		if nodes, ok := m.MemoryNUMANodesFor(p, &p.Spec.Containers[0]); ok {
			t.Errorf("%s: cpuset.mems %v", p.UID, nodes)
		}
		if h := m.GetTopologyHints(p, &p.Spec.Containers[0]); h != nil {
			t.Errorf("%s: hints %v", p.UID, h)
		}
	}
	if testutil.ToFloat64(m.metrics.pinningRequests) != 0 || m.machine()[0].NumberOfAssignments != 0 {
		t.Error("memory assigned to a pod that gets none")
	}
}

// Hugepages: node 0 has 1008Mi of 2Mi pages left after its reservation, node 1 1Gi.
func TestHugePagesTwoNodes(t *testing.T) {
	m := newManager(t, twoNodeOptions(t))
	p := pod("p", nil, container("app", "memory", "1Gi", "hugepages-2Mi", "1Gi"))
	admit(t, m, p)
	if got, want := m.blocksOf("p", "app"), []string{b("hugepages-2Mi", gi, 1), b("memory", gi, 1)}; !reflect.DeepEqual(got, want) {
		t.Errorf("blocks %v, want %v", got, want)
	}
	node1 := m.machine()[1]
	if node1.NumberOfAssignments != 2 || *node1.MemoryMap["hugepages-2Mi"] != *table(1*gi, 0, 1*gi, 0) {
		t.Errorf("machine state:\n%s", dumpMachine(m.machine()))
	}
}

// Upstream's fixture run (testdata/upstream/cross-*): a container larger than a node
// spans both; a small one then joins the group, as no node serves single-node blocks
// any more; removing the first gives its memory back, node 0 first.
func TestCrossNUMAGroupMatchesUpstream(t *testing.T) {
	m := newManager(t, twoNodeOptions(t))
	c := pod("pod-c-uid", nil, container("big", "memory", "6Gi"))
	admit(t, m, c)
	if got := string(readState(t, m.stateDir)); got != string(upstreamFixture(t, "cross-1-pod-c")) {
		t.Errorf("after pod-c:\n%s\nupstream:\n%s", got, upstreamFixture(t, "cross-1-pod-c"))
	}
	d := pod("pod-d-uid", nil, container("small", "memory", "1Gi"))
	if h := m.GetTopologyHints(d, &d.Spec.Containers[0])["memory"]; !reflect.DeepEqual(h, []topologymanager.TopologyHint{hint(false, 0, 1)}) {
		t.Errorf("hints in a group: %v", h)
	}
	admit(t, m, d)
	if got := string(readState(t, m.stateDir)); got != string(upstreamFixture(t, "cross-2-pod-d")) {
		t.Errorf("after pod-d:\n%s\nupstream:\n%s", got, upstreamFixture(t, "cross-2-pod-d"))
	}
	if nodes, _ := m.MemoryNUMANodesFor(d, &d.Spec.Containers[0]); !reflect.DeepEqual(nodes, []int{0, 1}) {
		t.Errorf("cpuset.mems %v", nodes)
	}
	if err := m.RemoveContainer("pod-c-uid", "big"); err != nil {
		t.Fatal(err)
	}
	if got := string(readState(t, m.stateDir)); got != string(upstreamFixture(t, "cross-3-remove-pod-c")) {
		t.Errorf("after removing pod-c:\n%s\nupstream:\n%s", got, upstreamFixture(t, "cross-3-remove-pod-c"))
	}
	if err := m.RemoveContainer("pod-d-uid", "small"); err != nil {
		t.Fatal(err)
	}
	if diff := machineStateDifference(m.machine(), m.static.defaultMachine); diff != "" {
		t.Errorf("after removing everything: %s", diff)
	}
	if err := m.RemoveContainer("pod-d-uid", "small"); err != nil {
		t.Errorf("removing twice: %v", err)
	}
}

// The placement rules, each case on the two-node machine (4Gi of memory allocatable
// per node) after the pods before it, with the topology manager's affinity.
func TestAffinityRules(t *testing.T) {
	type step struct {
		pod      *v1.Pod
		affinity topologymanager.TopologyHint
		want     string // the nodes, or the error
	}
	p := func(uid, memory string) *v1.Pod { return pod(uid, nil, container("app", "memory", memory)) }
	tests := []struct {
		name  string
		steps []step
	}{
		{"the affinity is followed", []step{{p("a", "1Gi"), hint(true, 1), "[1]"}}},
		{"a hint too small is widened", []step{{p("a", "6Gi"), hint(true, 0), "[0 1]"}}},
		{"without affinity the narrowest placement, lowest first", []step{{p("a", "1Gi"), topologymanager.TopologyHint{}, "[0]"}}},
		{"a node used alone serves no group", []step{
			{p("a", "1Gi"), topologymanager.TopologyHint{}, "[0]"},
			{p("b", "6Gi"), topologymanager.TopologyHint{}, errNoDefaultAffinity.Error()},
		}},
		{"a group serves no single-node block", []step{
			{p("a", "6Gi"), topologymanager.TopologyHint{}, "[0 1]"},
			{p("b", "1Gi"), hint(true, 0), errNoExtendedPreferred.Error()},
		}},
		{"no preferred default when the affinity was preferred", []step{
			{p("a", "6Gi"), topologymanager.TopologyHint{}, "[0 1]"},
			{p("b", "1Gi"), topologymanager.TopologyHint{Preferred: true}, errNoDefaultPreferred.Error()},
		}},
		{"no wider placement holding the affinity", []step{
			{p("a", "3Gi"), topologymanager.TopologyHint{}, "[0]"},
			{p("b", "2Gi"), hint(true, 0), errNoExtension.Error()},
		}},
		{"a group over a node used alone", []step{
			{p("a", "1Gi"), topologymanager.TopologyHint{}, "[0]"},
			{p("b", "1Gi"), hint(true, 0, 1), errViolatesNUMA.Error()},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := fakeStore{}
			opts := twoNodeOptions(t)
			opts.Affinity = store
			m := newManager(t, opts)
			for _, s := range tc.steps {
				store[string(s.pod.UID)+"/app"] = s.affinity
				got := ""
				if err := m.Allocate(s.pod, &s.pod.Spec.Containers[0]); err != nil {
					got = err.Error()
				} else {
					nodes, _ := m.MemoryNUMANodesFor(s.pod, &s.pod.Spec.Containers[0])
					got = fmt.Sprint(nodes)
				}
				if got != s.want {
					t.Errorf("%s: %s, want %s", s.pod.UID, got, s.want)
				}
			}
		})
	}
}
