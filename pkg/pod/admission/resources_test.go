package admission

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/resourcename"
)

func TestResourceFit(t *testing.T) {
	holding := func(name string, requests v1.ResourceList) *v1.Pod {
		return apiPod(name, containers(ctr("app", requests)))
	}
	// resizing holds what its status says it was allocated: more than its spec.
	resizing := holding("resizing", rl("cpu", "500m"))
	resizing.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", AllocatedResources: rl("cpu", "1200m")}}

	for _, tc := range []struct {
		name        string
		pod         *v1.Pod
		others      []*v1.Pod
		node        func(*v1.Node)
		wantReason  string
		wantMessage string
	}{
		{name: "fits", pod: apiPod("p", containers(ctr("a", rl("cpu", "1", "memory", "500"))))},
		{name: "fits exactly", pod: apiPod("p", containers(ctr("a", rl("cpu", "1500m")))),
			others: []*v1.Pod{holding("o", rl("cpu", "500m"))}},
		{name: "containers add up", pod: apiPod("p", containers(ctr("a", rl("cpu", "1500m")), ctr("b", rl("cpu", "1")))),
			wantReason: "OutOfcpu", wantMessage: "Node didn't have enough resource: cpu, requested: 2500, used: 0, capacity: 2000"},
		{name: "other pods hold resources", pod: apiPod("p", containers(ctr("a", rl("cpu", "1")))),
			others:     []*v1.Pod{holding("o1", rl("cpu", "700m")), holding("o2", rl("cpu", "800m"))},
			wantReason: "OutOfcpu", wantMessage: "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"},
		{name: "a resizing pod holds its allocation", pod: apiPod("p", containers(ctr("a", rl("cpu", "1")))),
			others:     []*v1.Pod{resizing},
			wantReason: "OutOfcpu", wantMessage: "Node didn't have enough resource: cpu, requested: 1000, used: 1200, capacity: 2000"},
		{name: "init container peak counts",
			pod:        apiPod("p", initContainers(ctr("init", rl("cpu", "1800m"))), containers(ctr("a", rl("cpu", "100m")))),
			others:     []*v1.Pod{holding("o", rl("cpu", "500m"))},
			wantReason: "OutOfcpu", wantMessage: "Node didn't have enough resource: cpu, requested: 1800, used: 500, capacity: 2000"},
		{name: "init containers are not summed",
			pod: apiPod("p", initContainers(ctr("i1", rl("cpu", "1500m")), ctr("i2", rl("cpu", "1500m"))),
				containers(ctr("a", rl("cpu", "100m"))))},
		{name: "sidecar adds to containers and to later init containers",
			// max(containers 1000 + sidecar 500, init 1200 + sidecar 500) = 1700
			pod: apiPod("p", initContainers(sidecar("sidecar", rl("cpu", "500m")), ctr("init", rl("cpu", "1200m"))),
				containers(ctr("a", rl("cpu", "1")))),
			others:     []*v1.Pod{holding("o", rl("cpu", "400m"))},
			wantReason: "OutOfcpu", wantMessage: "Node didn't have enough resource: cpu, requested: 1700, used: 400, capacity: 2000"},
		{name: "init container before the sidecar does not add it",
			// max(containers 1000 + sidecar 500, init 1200) = 1500
			pod: apiPod("p", initContainers(ctr("init", rl("cpu", "1200m")), sidecar("sidecar", rl("cpu", "500m"))),
				containers(ctr("a", rl("cpu", "1")))),
			others: []*v1.Pod{holding("o", rl("cpu", "500m"))}},
		{name: "pod overhead is added",
			pod:        apiPod("p", containers(ctr("a", rl("memory", "900"))), func(p *v1.Pod) { p.Spec.Overhead = rl("memory", "200") }),
			wantReason: "OutOfmemory", wantMessage: "Node didn't have enough resource: memory, requested: 1100, used: 0, capacity: 1000"},
		{name: "pod-level requests replace the containers'",
			pod: apiPod("p", containers(ctr("a", rl("cpu", "100m"))),
				func(p *v1.Pod) { p.Spec.Resources = &v1.ResourceRequirements{Requests: rl("cpu", "1500m")} }),
			others:     []*v1.Pod{holding("o", rl("cpu", "600m"))},
			wantReason: "OutOfcpu", wantMessage: "Node didn't have enough resource: cpu, requested: 1500, used: 600, capacity: 2000"},
		{name: "ephemeral storage", pod: apiPod("p", containers(ctr("a", rl("ephemeral-storage", "1001")))),
			wantReason: "OutOfephemeral-storage", wantMessage: "Node didn't have enough resource: ephemeral-storage, requested: 1001, used: 0, capacity: 1000"},
		{name: "hugepages", pod: apiPod("p", containers(ctr("a", rl("hugepages-2Mi", "6Mi", "memory", "6Mi")))),
			// memory is short too and is reported first
			wantReason: "OutOfmemory", wantMessage: "Node didn't have enough resource: memory, requested: 6291456, used: 0, capacity: 1000"},
		{name: "hugepages alone", pod: apiPod("p", containers(ctr("a", rl("hugepages-2Mi", "6Mi")))),
			others:     []*v1.Pod{holding("o", rl("hugepages-2Mi", "2Mi"))},
			wantReason: "OutOfhugepages-2Mi", wantMessage: "Node didn't have enough resource: hugepages-2Mi, requested: 6291456, used: 2097152, capacity: 4194304"},
		{name: "hugepages size the node lacks", pod: apiPod("p", containers(ctr("a", rl("hugepages-1Gi", "1Gi")))),
			wantReason: "OutOfhugepages-1Gi", wantMessage: "Node didn't have enough resource: hugepages-1Gi, requested: 1073741824, used: 0, capacity: 0"},
		{name: "extended resource", pod: apiPod("p", containers(ctr("a", rl("example.com/gpu", "1")))),
			others:     []*v1.Pod{holding("o", rl("example.com/gpu", "2"))},
			wantReason: "OutOfexample.com/gpu", wantMessage: "Node didn't have enough resource: example.com/gpu, requested: 1, used: 2, capacity: 2"},
		{name: "extended resource the node lacks is ignored",
			pod: apiPod("p", initContainers(ctr("init", rl("example.com/fpga", "1"))), containers(ctr("a", rl("example.com/fpga", "4"))))},
		{name: "extended resource backed by a DRA claim is ignored",
			pod: apiPod("p", containers(ctr("a", rl("example.com/gpu", "5"))), func(p *v1.Pod) {
				p.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{
					RequestMappings: []v1.ContainerExtendedResourceRequest{{ContainerName: "a", ResourceName: "example.com/gpu", RequestName: "r"}},
				}
			})},
		{name: "extended resources are checked in name order",
			pod:        apiPod("p", containers(ctr("a", rl("example.com/gpu", "3", "hugepages-2Mi", "8Mi")))),
			wantReason: "OutOfexample.com/gpu", wantMessage: "Node didn't have enough resource: example.com/gpu, requested: 3, used: 0, capacity: 2"},
		{name: "pods", pod: apiPod("p"), others: []*v1.Pod{apiPod("o1"), apiPod("o2"), apiPod("o3")},
			wantReason: "OutOfpods", wantMessage: "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"},
		{name: "pods before cpu before memory", pod: apiPod("p", containers(ctr("a", rl("cpu", "3", "memory", "2000")))),
			others:     []*v1.Pod{apiPod("o1"), apiPod("o2"), apiPod("o3")},
			wantReason: "OutOfpods", wantMessage: "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"},
		{name: "cpu before memory", pod: apiPod("p", containers(ctr("a", rl("cpu", "3", "memory", "2000")))),
			wantReason: "OutOfcpu", wantMessage: "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"},
		{name: "a node without allocatable pods admits nothing", pod: apiPod("p"),
			node:       func(n *v1.Node) { delete(n.Status.Allocatable, v1.ResourcePods) },
			wantReason: "OutOfpods", wantMessage: "Node didn't have enough resource: pods, requested: 1, used: 0, capacity: 0"},
		{name: "critical pod short of resources only keeps the resource reason",
			pod:        apiPod("p", static, containers(ctr("a", rl("cpu", "3")))),
			wantReason: "OutOfcpu", wantMessage: "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"},
		{name: "critical pod reports its other failure first",
			pod:        apiPod("p", static, containers(ctr("a", rl("cpu", "3"))), func(p *v1.Pod) { p.Spec.NodeName = "node-b" }),
			wantReason: "NodeName", wantMessage: "Predicate NodeName failed: node(s) didn't match the requested node name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := testNode()
			if tc.node != nil {
				tc.node(node)
			}
			a := newTestAdmitter(t, node, Options{})
			checkResult(t, a.Admit(tc.pod, tc.others), tc.wantReason, tc.wantMessage)
		})
	}
}

func TestPodRequestsDoNotChangeThePod(t *testing.T) {
	pod := apiPod("p", containers(ctr("a", rl("example.com/fpga", "1", "cpu", "1"))))
	out := withoutMissingExtendedResources(pod, testNode())
	if _, ok := pod.Spec.Containers[0].Resources.Requests["example.com/fpga"]; !ok {
		t.Error("the admitted pod itself lost its request")
	}
	if _, ok := out.Spec.Containers[0].Resources.Requests["example.com/fpga"]; ok {
		t.Error("the copy still requests a resource the node lacks")
	}
}

func TestResourceNameClasses(t *testing.T) {
	for _, tc := range []struct {
		name             v1.ResourceName
		extended, scalar bool
	}{
		{"cpu", false, false},
		{"pods", false, false},
		{"hugepages-2Mi", false, true},
		{"example.com/gpu", true, true},
		{"kubernetes.io/something", false, true},
		{"attachable-volumes-csi-x", false, true},
		{"requests.example.com/x", false, false},
		{"example.com/bad name", false, false},
	} {
		if got := resourcename.IsExtended(tc.name); got != tc.extended {
			t.Errorf("isExtendedResource(%s) = %v", tc.name, got)
		}
		if got := isScalarResource(tc.name); got != tc.scalar {
			t.Errorf("isScalarResource(%s) = %v", tc.name, got)
		}
	}
}

// A resize is admitted as a new pod is, against the other pods' allocations: the pod's
// own old resources (given among the others by mistake) do not count.
func TestAdmitResize(t *testing.T) {
	a := newTestAdmitter(t, testNode(), Options{})
	resized := apiPod("p", containers(ctr("a", rl("cpu", "1500m"))))
	old := apiPod("p", containers(ctr("a", rl("cpu", "500m"))))
	other := apiPod("o", containers(ctr("a", rl("cpu", "500m"))))
	checkResult(t, a.AdmitResize(resized, []*v1.Pod{old, other}), "", "")
	bigger := apiPod("p", containers(ctr("a", rl("cpu", "1600m"))))
	checkResult(t, a.AdmitResize(bigger, []*v1.Pod{old, other}), "OutOfcpu",
		"Node didn't have enough resource: cpu, requested: 1600, used: 500, capacity: 2000")
}
