package memorymanager

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/node/memorymanager/state"
	"github.com/nodelet/nodelet/pkg/node/topologymanager"
)

const (
	mi = uint64(1) << 20
	gi = uint64(1) << 30
)

// fakeNode is a NUMA node of a fake sysfs: MemTotal and huge pages by page size in kB.
type fakeNode struct {
	memTotal  uint64
	hugePages map[uint64]uint64
}

// fakeSysfs writes the NUMA nodes as sysfs shows them, with the entries of
// devices/system/node that are not nodes.
func fakeSysfs(t *testing.T, nodes ...fakeNode) string {
	t.Helper()
	root := t.TempDir()
	base := filepath.Join(root, "devices", "system", "node")
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(base, "possible"), fmt.Sprintf("0-%d\n", len(nodes)-1))
	write(filepath.Join(base, "power", "async"), "disabled\n")
	for id, n := range nodes {
		dir := filepath.Join(base, fmt.Sprintf("node%d", id))
		write(filepath.Join(dir, "meminfo"), fmt.Sprintf("Node %d MemTotal:       %d kB\nNode %d MemFree:        1024 kB\n", id, n.memTotal/1024, id))
		for size, count := range n.hugePages {
			write(filepath.Join(dir, "hugepages", fmt.Sprintf("hugepages-%dkB", size), "nr_hugepages"), fmt.Sprintf("%d\n", count))
			write(filepath.Join(dir, "hugepages", fmt.Sprintf("hugepages-%dkB", size), "free_hugepages"), "0\n")
		}
	}
	return root
}

// standardNode has 8Gi with 512 pages of 2Mi and 2 of 1Gi: the node of the upstream
// fixtures (testdata/upstream/README.md).
var standardNode = fakeNode{memTotal: 8 * gi, hugePages: map[uint64]uint64{2048: 512, 1048576: 2}}

func reservation(node int32, limits ...string) kubeletconfig.MemoryReservation {
	return kubeletconfig.MemoryReservation{NumaNode: node, Limits: resourceList(limits...)}
}

// resourceList is name, quantity, name, quantity...
func resourceList(kv ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// oneNodeOptions: one standard node, 1Gi of memory reserved. Memory allocatable:
// 8Gi - 1Gi reserved - 1Gi of 2Mi pages - 2Gi of 1Gi pages = 4Gi.
func oneNodeOptions(t *testing.T) Options {
	return Options{
		Policy:                PolicyStatic,
		ReservedMemory:        []kubeletconfig.MemoryReservation{reservation(0, "memory", "1Gi")},
		ExpectedReservedTotal: resourceList("memory", "1Gi", "cpu", "100m"),
		StateDir:              t.TempDir(),
		SysfsRoot:             fakeSysfs(t, standardNode),
	}
}

// twoNodeOptions: the upstream fixtures' machine. Node 0: memory 8Gi - 1Gi - 1Gi - 2Gi
// = 4Gi allocatable, hugepages-2Mi 1Gi - 16Mi = 1008Mi, hugepages-1Gi 2Gi. Node 1: 4Gi,
// 1Gi, 2Gi.
func twoNodeOptions(t *testing.T) Options {
	return Options{
		Policy: PolicyStatic,
		ReservedMemory: []kubeletconfig.MemoryReservation{
			reservation(0, "memory", "1Gi", "hugepages-2Mi", "16Mi"),
			reservation(1, "memory", "1Gi"),
		},
		ExpectedReservedTotal: resourceList("memory", "2Gi", "hugepages-2Mi", "16Mi", "cpu", "100m"),
		StateDir:              t.TempDir(),
		SysfsRoot:             fakeSysfs(t, standardNode, standardNode),
	}
}

func newManager(t *testing.T, opts Options) *Manager {
	t.Helper()
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// container requests cpu 1 and the given memory resources, limits equal: Guaranteed.
func container(name string, memory ...string) v1.Container {
	res := resourceList(append([]string{"cpu", "1"}, memory...)...)
	return v1.Container{Name: name, Resources: v1.ResourceRequirements{Requests: res, Limits: res.DeepCopy()}}
}

func pod(uid string, init []v1.Container, apps ...v1.Container) *v1.Pod {
	p := &v1.Pod{}
	p.UID = types.UID(uid)
	p.Name = uid
	p.Spec.InitContainers = init
	p.Spec.Containers = apps
	return p
}

func sidecar(c v1.Container) v1.Container {
	always := v1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

// admit allocates every container of the pod in admission order, then adds them as
// the kubelet starts them.
func admit(t *testing.T, m *Manager, p *v1.Pod) {
	t.Helper()
	for _, list := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			if err := m.Allocate(p, &list[i]); err != nil {
				t.Fatalf("Allocate %s/%s: %v", p.UID, list[i].Name, err)
			}
		}
	}
	for _, list := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			m.AddContainer(p, &list[i], string(p.UID)+"-"+list[i].Name)
		}
	}
}

// fakeStore is the topology manager's affinity, by pod UID and container name.
type fakeStore map[string]topologymanager.TopologyHint

func (s fakeStore) GetAffinity(podUID, containerName string) topologymanager.TopologyHint {
	return s[podUID+"/"+containerName]
}

func hint(preferred bool, nodes ...int) topologymanager.TopologyHint {
	return topologymanager.TopologyHint{NUMANodeAffinity: topologymanager.MustMask(nodes...), Preferred: preferred}
}

// table is a memory table; allocatable is reserved + free.
func table(total, systemReserved, reserved, free uint64) *state.MemoryTable {
	return &state.MemoryTable{TotalMemSize: total, SystemReserved: systemReserved, Allocatable: reserved + free, Reserved: reserved, Free: free}
}

// blockList renders blocks as "type:size@nodes" sorted, for comparisons.
func blockList(blocks []state.Block) []string {
	var out []string
	for _, b := range blocks {
		out = append(out, fmt.Sprintf("%s:%d@%v", b.Type, b.Size, b.NUMAAffinity))
	}
	sort.Strings(out)
	return out
}

func (m *Manager) blocksOf(podUID, name string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return blockList(m.state.assignments[podUID][name])
}

func (m *Manager) machine() state.NUMANodeMap {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.machine.Clone()
}

func readState(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, state.FileName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
