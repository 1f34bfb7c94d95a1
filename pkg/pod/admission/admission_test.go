package admission

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// --- helpers shared by the tests of this package ---

// rl builds a ResourceList from name, quantity pairs.
func rl(pairs ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		out[v1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return out
}

func ctr(name string, requests v1.ResourceList) v1.Container {
	return v1.Container{Name: name, Image: "busybox", Resources: v1.ResourceRequirements{Requests: requests}}
}

func sidecar(name string, requests v1.ResourceList) v1.Container {
	c := ctr(name, requests)
	c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	return c
}

// apiPod is a pending pod from the API server with one container requesting nothing,
// changed by the mutators.
func apiPod(name string, mutate ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: types.UID(name),
			Annotations: map[string]string{"kubernetes.io/config.source": "api"},
		},
		Spec:   v1.PodSpec{Containers: []v1.Container{ctr("app", nil)}},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func containers(cs ...v1.Container) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.Containers = cs }
}

func initContainers(cs ...v1.Container) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.InitContainers = cs }
}

// static makes the pod a static pod from the manifest directory.
func static(p *v1.Pod) { p.Annotations["kubernetes.io/config.source"] = "file" }

// testNode is node-a: linux, 2 CPUs, 1000 bytes of memory and of ephemeral storage,
// 3 pods, 4Mi of 2Mi hugepages and 2 example.com/gpu.
func testNode(mutate ...func(*v1.Node)) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{
			v1.LabelHostname: "node-a", v1.LabelOSStable: "linux", "zone": "z1", "disktype": "ssd", "gpu-count": "4",
		}},
		Status: v1.NodeStatus{Allocatable: rl("cpu", "2", "memory", "1000", "ephemeral-storage", "1000",
			"pods", "3", "hugepages-2Mi", "4Mi", "example.com/gpu", "2")},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

// newTestAdmitter builds an Admitter over a fixed node, with the host facts pinned: a
// linux host with AppArmor enabled and every safe sysctl.
func newTestAdmitter(t *testing.T, node *v1.Node, opts Options) *Admitter {
	t.Helper()
	a, err := New(func() (*v1.Node, error) { return node, nil }, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	a.goos = "linux"
	a.appArmorHostErr = nil
	return a
}

func checkResult(t *testing.T, got Result, wantReason, wantMessage string) {
	t.Helper()
	want := Result{Admit: wantReason == "", Reason: wantReason, Message: wantMessage}
	if got != want {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// --- the chain ---

func TestNewRejectsBadConfiguration(t *testing.T) {
	node := func() (*v1.Node, error) { return testNode(), nil }
	for _, tc := range []struct {
		name    string
		node    func() (*v1.Node, error)
		opts    Options
		wantErr string
	}{
		{"no node function", nil, Options{}, "admission needs a node function"},
		{"invalid sysctl pattern", node, Options{AllowedUnsafeSysctls: []string{"kernel.msg**"}},
			`sysctl "kernel.msg**" must have at most 253 characters and match regex ` +
				`([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]`},
		{"node-level sysctl", node, Options{AllowedUnsafeSysctls: []string{"vm.swappiness"}},
			`the sysctls "vm.swappiness" are not known to be namespaced`},
		{"node-level sysctl pattern", node, Options{AllowedUnsafeSysctls: []string{"kernel.*"}},
			`the sysctls "kernel." are not known to be namespaced`},
		{"unknown declared feature", node, Options{DeclaredFeatures: []string{"NoSuchFeature"}},
			"declared features: unknown feature NoSuchFeature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.node, tc.opts)
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestHandlerOrder: the first handler to reject, in upstream's order, gives the reason.
func TestHandlerOrder(t *testing.T) {
	forbiddenSysctl := func(p *v1.Pod) {
		p.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "kernel.sem", Value: "1"}}}
	}
	tooBig := containers(ctr("app", rl("cpu", "8")))
	wrongNode := func(p *v1.Pod) { p.Spec.NodeName = "node-b" }
	pressure := func() []v1.NodeConditionType { return []v1.NodeConditionType{v1.NodeDiskPressure} }
	shuttingDown := func() bool { return true }

	for _, tc := range []struct {
		name        string
		opts        Options
		pod         *v1.Pod
		wantReason  string
		wantMessage string
	}{
		{"pressure before sysctls", Options{PressureConditions: pressure}, apiPod("p", forbiddenSysctl),
			"Evicted", "The node had condition: [DiskPressure]. "},
		{"sysctls before resources", Options{}, apiPod("p", forbiddenSysctl, tooBig),
			"SysctlForbidden", `forbidden sysctl: "kernel.sem" not allowlisted`},
		{"resources before node name", Options{}, apiPod("p", tooBig, wrongNode),
			"OutOfcpu", "Node didn't have enough resource: cpu, requested: 8000, used: 0, capacity: 2000"},
		{"predicates before shutdown", Options{ShuttingDown: shuttingDown}, apiPod("p", wrongNode),
			"NodeName", "Predicate NodeName failed: node(s) didn't match the requested node name"},
		{"shutdown last", Options{ShuttingDown: shuttingDown}, apiPod("p"),
			"NodeShutdown", "Pod was rejected as the node is shutting down."},
		{"not shutting down", Options{ShuttingDown: func() bool { return false }}, apiPod("p"), "", ""},
		// Upstream's resource allocation handler (topology manager) runs before the
		// resource-fit predicates, and gives its own reason.
		{"resource managers before resources", Options{AllocateResources: func(*v1.Pod) (bool, string, string) {
			return false, "TopologyAffinityError", "Resources cannot be allocated with Topology locality"
		}}, apiPod("p", tooBig), "TopologyAffinityError", "Resources cannot be allocated with Topology locality"},
		{"resource managers admit", Options{AllocateResources: func(*v1.Pod) (bool, string, string) { return true, "", "" }},
			apiPod("p"), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAdmitter(t, testNode(), tc.opts)
			checkResult(t, a.Admit(tc.pod, nil), tc.wantReason, tc.wantMessage)
		})
	}
}

func TestInvalidNodeInfo(t *testing.T) {
	for name, node := range map[string]func() (*v1.Node, error){
		"error":   func() (*v1.Node, error) { return nil, errors.New("node not found") },
		"no node": func() (*v1.Node, error) { return nil, nil },
	} {
		t.Run(name, func(t *testing.T) {
			a, err := New(node, Options{})
			if err != nil {
				t.Fatal(err)
			}
			checkResult(t, a.Admit(apiPod("p"), nil), "InvalidNodeInfo", "Kubelet cannot get node info.")
		})
	}
}

func TestNodePressure(t *testing.T) {
	memory := []v1.NodeConditionType{v1.NodeMemoryPressure}
	memoryAndDisk := []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure}
	burstable := containers(ctr("app", rl("memory", "10")))
	toleratesMemoryPressure := func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
	}
	toleratesDiskPressure := func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeDiskPressure, Operator: v1.TolerationOpExists}}
	}
	critical := func(p *v1.Pod) { p.Spec.Priority = ptr.To(int32(2000000000)) }

	for _, tc := range []struct {
		name        string
		conditions  []v1.NodeConditionType
		pod         *v1.Pod
		wantReason  string
		wantMessage string
	}{
		{"no pressure", nil, apiPod("p"), "", ""},
		{"memory pressure, best effort", memory, apiPod("p"),
			"Evicted", "The node had condition: [MemoryPressure]. "},
		{"memory pressure, burstable", memory, apiPod("p", burstable), "", ""},
		{"memory pressure, best effort tolerating it", memory, apiPod("p", toleratesMemoryPressure), "", ""},
		{"memory pressure, best effort tolerating another taint", memory, apiPod("p", toleratesDiskPressure),
			"Evicted", "The node had condition: [MemoryPressure]. "},
		{"memory and disk pressure, burstable", memoryAndDisk, apiPod("p", burstable),
			"Evicted", "The node had condition: [MemoryPressure DiskPressure]. "},
		{"disk pressure, critical priority", memoryAndDisk, apiPod("p", critical), "", ""},
		{"disk pressure, static pod", memoryAndDisk, apiPod("p", static), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAdmitter(t, testNode(), Options{
				PressureConditions: func() []v1.NodeConditionType { return tc.conditions },
			})
			checkResult(t, a.Admit(tc.pod, nil), tc.wantReason, tc.wantMessage)
		})
	}
}

func TestDeclaredFeatures(t *testing.T) {
	restartAll := containers(v1.Container{Name: "app", Image: "busybox", RestartPolicyRules: []v1.ContainerRestartRule{{
		Action:    v1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}})
	for _, tc := range []struct {
		name        string
		declared    []string
		pod         *v1.Pod
		wantReason  string
		wantMessage string
	}{
		{"pod needs nothing", nil, apiPod("p"), "", ""},
		{"feature not declared", nil, apiPod("p", restartAll),
			"PodFeatureUnsupported", "Pod requires node features that are not available: RestartAllContainersOnContainerExits"},
		{"feature declared", []string{"RestartAllContainersOnContainerExits"}, apiPod("p", restartAll), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAdmitter(t, testNode(), Options{DeclaredFeatures: tc.declared})
			checkResult(t, a.Admit(tc.pod, nil), tc.wantReason, tc.wantMessage)
		})
	}
}

// TestAdmitLeavesPodOutOfActive: the pod itself in the active list neither counts toward
// pods nor holds resources or ports.
func TestAdmitLeavesPodOutOfActive(t *testing.T) {
	pod := apiPod("p", containers(ctr("app", rl("cpu", "2"))))
	pod.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
	others := []*v1.Pod{apiPod("o1"), apiPod("o2"), pod}
	a := newTestAdmitter(t, testNode(), Options{})
	checkResult(t, a.Admit(pod, others), "", "")
	checkResult(t, a.Admit(pod, append(others, apiPod("o3"))),
		"OutOfpods", "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3")
}

// A resize is not allocated again by the resource managers: they keep what the pod was
// admitted with.
func TestResizeSkipsTheResourceManagers(t *testing.T) {
	calls := 0
	a := newTestAdmitter(t, testNode(), Options{AllocateResources: func(*v1.Pod) (bool, string, string) {
		calls++
		return false, "TopologyAffinityError", "Resources cannot be allocated with Topology locality"
	}})
	checkResult(t, a.AdmitResize(apiPod("p"), nil), "", "")
	if calls != 0 {
		t.Errorf("the resource managers were asked %d times for a resize", calls)
	}
	checkResult(t, a.Admit(apiPod("q"), nil), "TopologyAffinityError", "Resources cannot be allocated with Topology locality")
}
