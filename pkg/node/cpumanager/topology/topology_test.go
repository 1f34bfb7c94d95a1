package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"k8s.io/utils/cpuset"
)

// fakeCPU is one CPU of a fake sysfs tree.
type fakeCPU struct {
	core, socket int
	l3ID         int    // -1: no L3 directory
	l3Shared     string // the L3's shared_cpu_list
	noCoreID     bool
}

type fakeSysfs struct {
	online string            // "" : no online file
	nodes  map[int]string    // NUMA node → cpulist; nil: no node directory
	cpus   map[int]fakeCPU   // CPU ID → topology
	extra  map[string]string // more files
}

func (f fakeSysfs) write(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	put := func(path, content string) {
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if f.online != "" {
		put("devices/system/cpu/online", f.online)
	}
	for id, list := range f.nodes {
		put(fmt.Sprintf("devices/system/node/node%d/cpulist", id), list)
	}
	for id, c := range f.cpus {
		dir := fmt.Sprintf("devices/system/cpu/cpu%d/", id)
		put(dir+"topology/physical_package_id", fmt.Sprint(c.socket))
		if !c.noCoreID {
			put(dir+"topology/core_id", fmt.Sprint(c.core))
		}
		put(dir+"cache/index2/level", "2")
		put(dir+"cache/index2/id", fmt.Sprint(id))
		put(dir+"cache/index2/shared_cpu_list", fmt.Sprint(id))
		if c.l3ID >= 0 {
			put(dir+"cache/index3/level", "3")
			put(dir+"cache/index3/id", fmt.Sprint(c.l3ID))
			put(dir+"cache/index3/shared_cpu_list", c.l3Shared)
		}
	}
	for path, content := range f.extra {
		put(path, content)
	}
	return root
}

func TestDiscover(t *testing.T) {
	tests := []struct {
		name  string
		sysfs fakeSysfs
		want  *CPUTopology
	}{{
		// This project's test machine: 2 cores, one L3 for the node.
		name: "2 single-thread cores, node-wide L3",
		sysfs: fakeSysfs{online: "0-1", nodes: map[int]string{0: "0-1"}, cpus: map[int]fakeCPU{
			0: {core: 0, l3ID: 0, l3Shared: "0-1"}, 1: {core: 1, l3ID: 0, l3Shared: "0-1"},
		}},
		want: &CPUTopology{NumCPUs: 2, NumCores: 2, NumUncoreCache: 1, NumSockets: 1, NumNUMANodes: 1, CPUDetails: CPUDetails{
			0: {CoreID: 0}, 1: {CoreID: 1},
		}},
	}, {
		// The kernel's core_id repeats on each socket; CPU n and n+4 are siblings. The
		// L3 spans each node, so the socket stands for the uncore cache.
		name: "2 sockets and nodes of 2 cores of 2 threads",
		sysfs: fakeSysfs{online: "0-7", nodes: map[int]string{0: "0-1,4-5", 1: "2-3,6-7"}, cpus: map[int]fakeCPU{
			0: {core: 0, socket: 0, l3ID: 0, l3Shared: "0-1,4-5"}, 1: {core: 1, socket: 0, l3ID: 0, l3Shared: "0-1,4-5"},
			2: {core: 0, socket: 1, l3ID: 1, l3Shared: "2-3,6-7"}, 3: {core: 1, socket: 1, l3ID: 1, l3Shared: "2-3,6-7"},
			4: {core: 0, socket: 0, l3ID: 0, l3Shared: "0-1,4-5"}, 5: {core: 1, socket: 0, l3ID: 0, l3Shared: "0-1,4-5"},
			6: {core: 0, socket: 1, l3ID: 1, l3Shared: "2-3,6-7"}, 7: {core: 1, socket: 1, l3ID: 1, l3Shared: "2-3,6-7"},
		}},
		want: &CPUTopology{NumCPUs: 8, NumCores: 4, NumUncoreCache: 2, NumSockets: 2, NumNUMANodes: 2, CPUDetails: CPUDetails{
			0: {CoreID: 0}, 4: {CoreID: 0}, 1: {CoreID: 1}, 5: {CoreID: 1},
			2: {CoreID: 2, SocketID: 1, NUMANodeID: 1, UncoreCacheID: 1}, 6: {CoreID: 2, SocketID: 1, NUMANodeID: 1, UncoreCacheID: 1},
			3: {CoreID: 3, SocketID: 1, NUMANodeID: 1, UncoreCacheID: 1}, 7: {CoreID: 3, SocketID: 1, NUMANodeID: 1, UncoreCacheID: 1},
		}},
	}, {
		name: "split L3: two uncore caches in a node",
		sysfs: fakeSysfs{online: "0-3", nodes: map[int]string{0: "0-3"}, cpus: map[int]fakeCPU{
			0: {core: 0, l3ID: 8, l3Shared: "0-1"}, 1: {core: 1, l3ID: 8, l3Shared: "0-1"},
			2: {core: 2, l3ID: 9, l3Shared: "2-3"}, 3: {core: 3, l3ID: 9, l3Shared: "2-3"},
		}},
		want: &CPUTopology{NumCPUs: 4, NumCores: 4, NumUncoreCache: 2, NumSockets: 1, NumNUMANodes: 1, CPUDetails: CPUDetails{
			0: {CoreID: 0, UncoreCacheID: 8}, 1: {CoreID: 1, UncoreCacheID: 8}, 2: {CoreID: 2, UncoreCacheID: 9}, 3: {CoreID: 3, UncoreCacheID: 9},
		}},
	}, {
		name: "offline CPU and CPU without core_id left out, no L3",
		sysfs: fakeSysfs{online: "0-1,3", nodes: map[int]string{0: "0-3"}, cpus: map[int]fakeCPU{
			0: {core: 0, l3ID: -1}, 1: {core: 1, l3ID: -1}, 2: {core: 2, l3ID: -1}, 3: {core: 3, l3ID: -1, noCoreID: true},
		}},
		want: &CPUTopology{NumCPUs: 2, NumCores: 2, NumUncoreCache: 1, NumSockets: 1, NumNUMANodes: 1, CPUDetails: CPUDetails{
			0: {CoreID: 0}, 1: {CoreID: 1},
		}},
	}, {
		name: "no NUMA nodes in sysfs, no online file: sockets stand for them",
		sysfs: fakeSysfs{cpus: map[int]fakeCPU{
			0: {core: 0, socket: 0, l3ID: -1}, 1: {core: 0, socket: 3, l3ID: -1},
		}},
		want: &CPUTopology{NumCPUs: 2, NumCores: 2, NumUncoreCache: 2, NumSockets: 2, NumNUMANodes: 2, CPUDetails: CPUDetails{
			0: {CoreID: 0}, 1: {CoreID: 1, SocketID: 3, NUMANodeID: 3, UncoreCacheID: 3},
		}},
	}, {
		name: "memory-only NUMA node ignored",
		sysfs: fakeSysfs{online: "0", nodes: map[int]string{0: "0", 1: ""}, cpus: map[int]fakeCPU{
			0: {core: 0, l3ID: 0, l3Shared: "0"},
		}},
		want: &CPUTopology{NumCPUs: 1, NumCores: 1, NumUncoreCache: 1, NumSockets: 1, NumNUMANodes: 1, CPUDetails: CPUDetails{0: {}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Discover(tt.sysfs.write(t))
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Discover =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestDiscoverWithoutCPUs(t *testing.T) {
	root := fakeSysfs{online: "0", nodes: map[int]string{0: "0"}, cpus: map[int]fakeCPU{0: {l3ID: -1, noCoreID: true}}}.write(t)
	if _, err := Discover(root); err == nil || err.Error() != "could not detect number of cpus" {
		t.Errorf("Discover error = %v", err)
	}
}

// Discover works on the real sysfs of whatever machine runs the tests.
func TestDiscoverThisMachine(t *testing.T) {
	if _, err := os.Stat("/sys/devices/system/cpu/cpu0/topology/core_id"); err != nil {
		t.Skip("no sysfs CPU topology here")
	}
	topo, err := Discover("")
	if err != nil {
		t.Fatal(err)
	}
	if topo.NumCPUs < 1 || topo.NumCores < 1 || topo.NumSockets < 1 || topo.NumNUMANodes < 1 || topo.CPUsPerCore() < 1 {
		t.Errorf("implausible topology %+v", topo)
	}
}

// dual is 2 sockets of 2 NUMA nodes of 2 cores of 2 threads, with an L3 per NUMA node.
var dual = New(func() CPUDetails {
	d := CPUDetails{}
	for cpu := 0; cpu < 16; cpu++ {
		core := cpu % 8
		d[cpu] = CPUInfo{CoreID: core, SocketID: core / 4, NUMANodeID: core / 2, UncoreCacheID: core / 2}
	}
	return d
}())

func TestQueries(t *testing.T) {
	d := dual.CPUDetails
	tests := []struct {
		name      string
		got, want cpuset.CPUSet
	}{
		{"CPUs", d.CPUs(), cpuset.New(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)},
		{"Cores", d.Cores(), cpuset.New(0, 1, 2, 3, 4, 5, 6, 7)},
		{"Sockets", d.Sockets(), cpuset.New(0, 1)},
		{"NUMANodes", d.NUMANodes(), cpuset.New(0, 1, 2, 3)},
		{"UncoreCaches", d.UncoreCaches(), cpuset.New(0, 1, 2, 3)},
		{"CPUsInCores", d.CPUsInCores(1, 7), cpuset.New(1, 9, 7, 15)},
		{"CPUsInSockets", d.CPUsInSockets(1), cpuset.New(4, 5, 6, 7, 12, 13, 14, 15)},
		{"CPUsInNUMANodes", d.CPUsInNUMANodes(0, 3), cpuset.New(0, 1, 8, 9, 6, 7, 14, 15)},
		{"CPUsInUncoreCaches", d.CPUsInUncoreCaches(2), cpuset.New(4, 5, 12, 13)},
		{"CoresInSockets", d.CoresInSockets(0), cpuset.New(0, 1, 2, 3)},
		{"CoresInNUMANodes", d.CoresInNUMANodes(1), cpuset.New(2, 3)},
		{"NUMANodesInSockets", d.NUMANodesInSockets(1), cpuset.New(2, 3)},
		{"SocketsInNUMANodes", d.SocketsInNUMANodes(1, 2), cpuset.New(0, 1)},
		{"UncoreInNUMANodes", d.UncoreInNUMANodes(3), cpuset.New(3)},
		{"CoresNeededInUncoreCache, fewer", d.CoresNeededInUncoreCache(1, 1), cpuset.New(2)},
		{"CoresNeededInUncoreCache, all", d.CoresNeededInUncoreCache(5, 1), cpuset.New(2, 3)},
		{"KeepOnly", d.KeepOnly(cpuset.New(3, 11, 99)).CPUs(), cpuset.New(3, 11)},
	}
	for _, tt := range tests {
		if !tt.got.Equals(tt.want) {
			t.Errorf("%s = %s, want %s", tt.name, tt.got, tt.want)
		}
	}
	if dual.NumCPUs != 16 || dual.CPUsPerCore() != 2 || dual.CPUsPerSocket() != 8 || dual.CPUsPerUncore() != 4 {
		t.Errorf("counts %+v", dual)
	}
	if !d.AreNUMANodesInSameSocket([]int{0, 1}) || d.AreNUMANodesInSameSocket([]int{1, 2}) || d.AreNUMANodesInSameSocket([]int{0, 9}) {
		t.Error("AreNUMANodesInSameSocket")
	}
	if !dual.IsUncoreCacheAligned(cpuset.New(4, 12, 5)) || dual.IsUncoreCacheAligned(cpuset.New(3, 4)) || !dual.IsUncoreCacheAligned(cpuset.New()) {
		t.Error("IsUncoreCacheAligned")
	}
	if core, err := dual.CPUCoreID(9); core != 1 || err != nil {
		t.Errorf("CPUCoreID(9) = %d, %v", core, err)
	}
	if socket, err := dual.CPUSocketID(12); socket != 1 || err != nil {
		t.Errorf("CPUSocketID(12) = %d, %v", socket, err)
	}
	if _, err := dual.CPUNUMANodeID(16); err == nil || err.Error() != "unknown CPU ID: 16" {
		t.Errorf("CPUNUMANodeID(16) error = %v", err)
	}
	if (&CPUTopology{}).CPUsPerCore() != 0 {
		t.Error("CPUsPerCore without cores")
	}
}
