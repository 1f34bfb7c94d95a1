package memorymanager

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/node/topologymanager"
)

type hints = map[string][]topologymanager.TopologyHint

// Hints on the two-node machine: 4Gi of memory per node, 1008Mi of 2Mi pages on node 0
// and 1Gi on node 1.
func TestContainerHints(t *testing.T) {
	m := newManager(t, twoNodeOptions(t))
	both := []topologymanager.TopologyHint{hint(true, 0), hint(true, 1), hint(false, 0, 1)}
	tests := []struct {
		name   string
		memory []string
		want   hints
	}{
		{"fits a node", []string{"memory", "1Gi"}, hints{"memory": both}},
		{"2Mi pages fit node 1 only", []string{"memory", "1Gi", "hugepages-2Mi", "1Gi"},
			hints{"memory": {hint(true, 1), hint(false, 0, 1)}, "hugepages-2Mi": {hint(true, 1), hint(false, 0, 1)}}},
		{"needs both nodes", []string{"memory", "6Gi"}, hints{"memory": {hint(true, 0, 1)}}},
		{"fits nowhere", []string{"memory", "10Gi"}, hints{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := pod("p", nil, container("app", tc.memory...))
			if got := m.GetTopologyHints(p, &p.Spec.Containers[0]); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("hints %v, want %v", got, tc.want)
			}
		})
	}
}

// Hints follow what is free, but the preferred size follows what is allocatable: with
// node 0 used, a 3Gi container still prefers one node, and may not use node 0 in a group.
func TestHintsOnAUsedMachine(t *testing.T) {
	m := newManager(t, twoNodeOptions(t))
	admit(t, m, pod("a", nil, container("app", "memory", "2Gi")))
	p := pod("p", nil, container("app", "memory", "3Gi"))
	if got, want := m.GetTopologyHints(p, &p.Spec.Containers[0]), (hints{"memory": {hint(true, 1)}}); !reflect.DeepEqual(got, want) {
		t.Errorf("hints %v, want %v", got, want)
	}
	// An allocated container gets its own placement back, while it asks the same.
	admit(t, m, p)
	if got, want := m.GetTopologyHints(p, &p.Spec.Containers[0]), (hints{"memory": {hint(true, 1)}}); !reflect.DeepEqual(got, want) {
		t.Errorf("hints of an allocated container %v, want %v", got, want)
	}
	changed := pod("p", nil, container("app", "memory", "2Gi"))
	if got := m.GetTopologyHints(changed, &changed.Spec.Containers[0]); got != nil {
		t.Errorf("hints of an allocated container asking otherwise: %v, want nil", got)
	}
}

func TestPodHints(t *testing.T) {
	m := newManager(t, twoNodeOptions(t))
	// The pod needs 5Gi at its peak (its init container): both nodes.
	p := pod("p", []v1.Container{container("init", "memory", "5Gi")}, container("app", "memory", "1Gi"))
	if got, want := m.GetPodTopologyHints(p), (hints{"memory": {hint(true, 0, 1)}}); !reflect.DeepEqual(got, want) {
		t.Errorf("pod hints %v, want %v", got, want)
	}
	// Sidecar 1Gi + init 2Gi = 3Gi; sidecar + app = 3Gi.
	q := pod("q", []v1.Container{sidecar(container("sidecar", "memory", "1Gi")), container("init", "memory", "2Gi")}, container("app", "memory", "2Gi"))
	if got, want := m.GetPodTopologyHints(q), (hints{"memory": {hint(true, 0), hint(true, 1), hint(false, 0, 1)}}); !reflect.DeepEqual(got, want) {
		t.Errorf("pod hints %v, want %v", got, want)
	}
	burstable := pod("b", nil, v1.Container{Name: "app", Resources: v1.ResourceRequirements{Requests: resourceList("memory", "1Gi")}})
	if got := m.GetPodTopologyHints(burstable); got != nil {
		t.Errorf("burstable pod hints %v", got)
	}
	// After a restart, a pod with blocks gets them back (here its app container's 3Gi
	// is the pod's whole need).
	r := pod("r", nil, container("app", "memory", "3Gi"))
	admit(t, m, r)
	if got, want := m.GetPodTopologyHints(r), (hints{"memory": {hint(true, 0)}}); !reflect.DeepEqual(got, want) {
		t.Errorf("pod hints of an allocated pod %v, want %v", got, want)
	}
}

// Upstream's Test_getPodRequestedResources cases, sizes in Gi.
func TestPodRequests(t *testing.T) {
	tests := []struct {
		name string
		pod  *v1.Pod
		want map[v1.ResourceName]uint64
	}{
		{"init containers need more", pod("p",
			[]v1.Container{container("i1", "memory", "2Gi"), container("i2", "memory", "4Gi")},
			container("a1", "memory", "1Gi"), container("a2", "memory", "2Gi")),
			map[v1.ResourceName]uint64{"memory": 4 * gi}},
		{"app containers need more", pod("p",
			[]v1.Container{container("i1", "memory", "2Gi")},
			container("a1", "memory", "2Gi"), container("a2", "memory", "1Gi")),
			map[v1.ResourceName]uint64{"memory": 3 * gi}},
		{"types apart", pod("p",
			[]v1.Container{container("i1", "memory", "4Gi", "hugepages-1Gi", "1Gi")},
			container("a1", "memory", "1Gi", "hugepages-1Gi", "2Gi")),
			map[v1.ResourceName]uint64{"memory": 4 * gi, "hugepages-1Gi": 2 * gi}},
		{"sidecars add to what follows", pod("p",
			[]v1.Container{sidecar(container("s1", "memory", "1Gi")), container("i1", "memory", "3Gi"), sidecar(container("s2", "memory", "1Gi"))},
			container("a1", "memory", "1Gi")),
			map[v1.ResourceName]uint64{"memory": 4 * gi}},
		{"sidecars with the app containers need more", pod("p",
			[]v1.Container{sidecar(container("s1", "memory", "2Gi")), container("i1", "memory", "1Gi")},
			container("a1", "memory", "2Gi")),
			map[v1.ResourceName]uint64{"memory": 4 * gi}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := podRequests(tc.pod)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
