package memorymanager

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/node/memorymanager/state"
)

func TestReadNUMANodesFromFakeSysfs(t *testing.T) {
	root := fakeSysfs(t, standardNode, fakeNode{memTotal: 4 * gi})
	nodes, err := readNUMANodes(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []numaNode{
		{id: 0, memTotal: 8 * gi, hugePages: []hugePages{{pageSizeKB: 1048576, count: 2}, {pageSizeKB: 2048, count: 512}}},
		{id: 1, memTotal: 4 * gi},
	}
	if !reflect.DeepEqual(nodes, want) {
		t.Errorf("nodes %+v, want %+v", nodes, want)
	}
	if got := (hugePages{pageSizeKB: 2048}).resourceName(); got != "hugepages-2Mi" {
		t.Errorf("2048kB pages are %s", got)
	}
	if got := (hugePages{pageSizeKB: 1048576}).resourceName(); got != "hugepages-1Gi" {
		t.Errorf("1048576kB pages are %s", got)
	}
}

func TestReadNUMANodesWithoutMeminfoOrNodes(t *testing.T) {
	root := t.TempDir()
	if _, err := readNUMANodes(root); err == nil {
		t.Error("no node directory: no error")
	}
	// A node without meminfo has no memory, as cAdvisor reports it.
	if err := os.MkdirAll(filepath.Join(root, "devices/system/node/node3"), 0o755); err != nil {
		t.Fatal(err)
	}
	nodes, err := readNUMANodes(root)
	if err != nil || len(nodes) != 1 || nodes[0].id != 3 || nodes[0].memTotal != 0 || nodes[0].hugePages != nil {
		t.Errorf("nodes %+v, %v", nodes, err)
	}
}

func TestDefaultMachineStateOneNode(t *testing.T) {
	m := newManager(t, oneNodeOptions(t))
	want := state.NUMANodeMap{0: {Cells: []int{0}, MemoryMap: map[v1.ResourceName]*state.MemoryTable{
		v1.ResourceMemory: table(8*gi, 1*gi, 0, 4*gi),
		"hugepages-2Mi":   table(1*gi, 0, 0, 1*gi),
		"hugepages-1Gi":   table(2*gi, 0, 0, 2*gi),
	}}}
	if diff := machineStateDifference(m.machine(), want); diff != "" || !reflect.DeepEqual(m.machine(), want) {
		t.Errorf("machine state differs: %s\n%s", diff, dumpMachine(m.machine()))
	}
}

func TestDefaultMachineStateTwoNodes(t *testing.T) {
	m := newManager(t, twoNodeOptions(t))
	want := state.NUMANodeMap{
		0: {Cells: []int{0}, MemoryMap: map[v1.ResourceName]*state.MemoryTable{
			v1.ResourceMemory: table(8*gi, 1*gi, 0, 4*gi),
			"hugepages-2Mi":   table(1*gi, 16*mi, 0, 1008*mi),
			"hugepages-1Gi":   table(2*gi, 0, 0, 2*gi),
		}},
		1: {Cells: []int{1}, MemoryMap: map[v1.ResourceName]*state.MemoryTable{
			v1.ResourceMemory: table(8*gi, 1*gi, 0, 4*gi),
			"hugepages-2Mi":   table(1*gi, 0, 0, 1*gi),
			"hugepages-1Gi":   table(2*gi, 0, 0, 2*gi),
		}},
	}
	if !reflect.DeepEqual(m.machine(), want) {
		t.Errorf("machine state:\n%s", dumpMachine(m.machine()))
	}
	got := m.GetAllocatableMemory()
	var rendered []string
	for _, c := range got {
		rendered = append(rendered, fmt.Sprintf("%s:%d@%d", c.MemoryType, c.Size, c.Topology.Nodes[0].ID))
	}
	wantAllocatable := []string{
		fmt.Sprintf("hugepages-1Gi:%d@0", 2*gi), fmt.Sprintf("hugepages-2Mi:%d@0", 1008*mi), fmt.Sprintf("memory:%d@0", 4*gi),
		fmt.Sprintf("hugepages-1Gi:%d@1", 2*gi), fmt.Sprintf("hugepages-2Mi:%d@1", 1*gi), fmt.Sprintf("memory:%d@1", 4*gi),
	}
	if !reflect.DeepEqual(rendered, wantAllocatable) {
		t.Errorf("allocatable %v, want %v", rendered, wantAllocatable)
	}
}

func TestReservingMoreThanTheNodeHas(t *testing.T) {
	opts := oneNodeOptions(t)
	opts.ReservedMemory = []kubeletconfig.MemoryReservation{reservation(0, "memory", "1Gi", "hugepages-1Gi", "3Gi")}
	opts.ExpectedReservedTotal = resourceList("memory", "1Gi", "hugepages-1Gi", "3Gi")
	_, err := New(opts)
	if err == nil || !strings.Contains(err.Error(), "NUMA node 0 has 2147483648 bytes of hugepages-1Gi, less than the 3221225472 reserved") {
		t.Errorf("error %v", err)
	}
}

// TestThisMachine reads this machine's /sys, checked against its files read another way.
func TestThisMachine(t *testing.T) {
	nodeDir := "/sys/devices/system/node/node0"
	meminfo, err := os.ReadFile(filepath.Join(nodeDir, "meminfo"))
	if err != nil {
		t.Skipf("no NUMA node 0 in sysfs: %v", err)
	}
	var id int
	var kb uint64
	if _, err := fmt.Sscanf(string(meminfo), "Node %d MemTotal: %d kB", &id, &kb); err != nil {
		t.Fatal(err)
	}
	nodes, err := readNUMANodes("/sys")
	if err != nil {
		t.Fatal(err)
	}
	if nodes[0].id != 0 || nodes[0].memTotal != kb*1024 {
		t.Fatalf("node 0: %+v, want MemTotal %d kB", nodes[0], kb)
	}
	var hugePagesBytes uint64
	for _, h := range nodes[0].hugePages {
		nr, err := os.ReadFile(filepath.Join(nodeDir, "hugepages", fmt.Sprintf("hugepages-%dkB", h.pageSizeKB), "nr_hugepages"))
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := strconv.ParseUint(strings.TrimSpace(string(nr)), 10, 64); n != h.count {
			t.Errorf("%dkB pages: %d, nr_hugepages says %d", h.pageSizeKB, h.count, n)
		}
		hugePagesBytes += h.bytes()
	}
	m := newManager(t, Options{
		Policy:                PolicyStatic,
		ReservedMemory:        []kubeletconfig.MemoryReservation{reservation(0, "memory", "256Mi")},
		ExpectedReservedTotal: resourceList("memory", "256Mi"),
		StateDir:              t.TempDir(),
	})
	if got, want := m.machine()[0].MemoryMap[v1.ResourceMemory].Allocatable, kb*1024-256*mi-hugePagesBytes; got != want {
		t.Errorf("node 0 allocatable memory %d, want %d", got, want)
	}
}

func dumpMachine(m state.NUMANodeMap) string {
	var b strings.Builder
	for _, id := range sortedNodeIDs(m) {
		fmt.Fprintf(&b, "node %d: assignments %d cells %v\n", id, m[id].NumberOfAssignments, m[id].Cells)
		for _, name := range sortedNames(m[id].MemoryMap) {
			fmt.Fprintf(&b, "  %s: %+v\n", name, *m[id].MemoryMap[name])
		}
	}
	return b.String()
}
