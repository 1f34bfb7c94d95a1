package memorymanager

import (
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
)

// initReuseOptions: one node of 16Gi with 8 pages of 1Gi and 512Mi of memory reserved:
// 7680Mi of memory and 8Gi of hugepages-1Gi allocatable, the machine of upstream's
// TestStaticPolicyAllocateWithInitContainers.
func initReuseOptions(t *testing.T) Options {
	return Options{
		Policy:                PolicyStatic,
		ReservedMemory:        []kubeletconfig.MemoryReservation{reservation(0, "memory", "512Mi")},
		ExpectedReservedTotal: resourceList("memory", "512Mi"),
		StateDir:              t.TempDir(),
		SysfsRoot:             fakeSysfs(t, fakeNode{memTotal: 16 * gi, hugePages: map[uint64]uint64{1048576: 8}}),
	}
}

// Upstream's first case: init containers of 1Gi and 2Gi, app containers of 3Gi and
// 4Gi (memory and as much of 1Gi pages each). The app containers reuse the 2Gi the
// init containers needed at most: 7Gi reserved of each, and the init containers'
// blocks shrink to nothing.
func TestInitContainersMemoryReused(t *testing.T) {
	m := newManager(t, initReuseOptions(t))
	p := pod("pod1",
		[]v1.Container{container("initContainer1", "memory", "1Gi", "hugepages-1Gi", "1Gi"), container("initContainer2", "memory", "2Gi", "hugepages-1Gi", "2Gi")},
		container("container1", "memory", "3Gi", "hugepages-1Gi", "3Gi"), container("container2", "memory", "4Gi", "hugepages-1Gi", "4Gi"))
	for _, list := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			if err := m.Allocate(p, &list[i]); err != nil {
				t.Fatalf("%s: %v", list[i].Name, err)
			}
		}
	}
	want := map[string][]string{
		"initContainer1": {b("hugepages-1Gi", 0, 0), b("memory", 0, 0)},
		"initContainer2": {b("hugepages-1Gi", 0, 0), b("memory", 0, 0)},
		"container1":     {b("hugepages-1Gi", 3*gi, 0), b("memory", 3*gi, 0)},
		"container2":     {b("hugepages-1Gi", 4*gi, 0), b("memory", 4*gi, 0)},
	}
	for name, blocks := range want {
		if got := m.blocksOf("pod1", name); !reflect.DeepEqual(got, blocks) {
			t.Errorf("%s: %v, want %v", name, got, blocks)
		}
	}
	node := m.machine()[0]
	if node.NumberOfAssignments != 8 || *node.MemoryMap[v1.ResourceMemory] != *table(16*gi, 512*mi, 7*gi, 512*mi) ||
		*node.MemoryMap["hugepages-1Gi"] != *table(8*gi, 0, 7*gi, 1*gi) {
		t.Errorf("machine state:\n%s", dumpMachine(m.machine()))
	}
	// Starting an app container drops the finished init containers' allocations.
	m.AddContainer(p, &p.Spec.Containers[0], "id")
	if got := m.blocksOf("pod1", "initContainer1"); got != nil {
		t.Errorf("init container still allocated: %v", got)
	}
	if node := m.machine()[0]; node.NumberOfAssignments != 4 || node.MemoryMap[v1.ResourceMemory].Reserved != 7*gi {
		t.Errorf("after AddContainer:\n%s", dumpMachine(m.machine()))
	}
}

// A sidecar runs as long as the pod: nothing of it is reused, and starting the app
// container does not drop it.
func TestSidecarMemoryNotReused(t *testing.T) {
	m := newManager(t, initReuseOptions(t))
	p := pod("pod1",
		[]v1.Container{sidecar(container("sidecar", "memory", "1Gi")), container("init", "memory", "2Gi")},
		container("app", "memory", "1Gi"))
	admit(t, m, p)
	// Before AddContainer(app): sidecar 1Gi + init 2Gi, the app reusing 1Gi of the init's.
	if got := m.blocksOf("pod1", "sidecar"); !reflect.DeepEqual(got, []string{b("memory", gi, 0)}) {
		t.Errorf("sidecar %v", got)
	}
	if got := m.blocksOf("pod1", "init"); got != nil {
		t.Errorf("init container still allocated: %v", got)
	}
	if got := m.machine()[0].MemoryMap[v1.ResourceMemory].Reserved; got != 2*gi {
		t.Errorf("reserved %d, want 2Gi (sidecar and app)", got)
	}
}

// The upstream fixtures' run (testdata/upstream/static-*): nodelet writes what upstream
// wrote after each step, the init container's reuse included.
func TestStaticRunMatchesUpstream(t *testing.T) {
	m := newManager(t, twoNodeOptions(t))
	if got, want := readState(t, m.stateDir), upstreamFixture(t, "static-0-empty"); string(got) != string(want) {
		t.Fatalf("new state:\n%s\nupstream:\n%s", got, want)
	}
	a := pod("pod-a-uid", nil, container("app", "memory", "2Gi", "hugepages-2Mi", "512Mi"))
	admit(t, m, a)
	if got, want := readState(t, m.stateDir), upstreamFixture(t, "static-1-pod-a-app"); string(got) != string(want) {
		t.Fatalf("after pod-a:\n%s\nupstream:\n%s", got, want)
	}
	bPod := pod("pod-b-uid", []v1.Container{container("init", "memory", "1Gi")}, container("app", "memory", "1536Mi", "hugepages-1Gi", "1Gi"))
	if err := m.Allocate(bPod, &bPod.Spec.InitContainers[0]); err != nil {
		t.Fatal(err)
	}
	m.AddContainer(bPod, &bPod.Spec.InitContainers[0], "init-id")
	if got, want := readState(t, m.stateDir), upstreamFixture(t, "static-2-pod-b-init"); string(got) != string(want) {
		t.Fatalf("after pod-b's init container:\n%s\nupstream:\n%s", got, want)
	}
	if err := m.Allocate(bPod, &bPod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	m.AddContainer(bPod, &bPod.Spec.Containers[0], "app-id")
	// Upstream orders a container's blocks at random: compare the contents.
	assertSameState(t, readState(t, m.stateDir), upstreamFixture(t, "static-3-pod-b-app"))
}
