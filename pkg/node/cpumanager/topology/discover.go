package topology

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// DefaultSysfsRoot is where sysfs is mounted.
const DefaultSysfsRoot = "/sys"

var nodeDirName = regexp.MustCompile(`^node([0-9]+)$`)

// core is one physical core while discovering: its socket and hardware threads.
type core struct {
	socket  int
	threads []int
}

// Discover reads the topology of the online CPUs from sysfs under root (DefaultSysfsRoot
// when empty), as cAdvisor's machine info reports it to upstream's CPU manager:
//   - NUMA nodes are /sys/devices/system/node/nodeN with their cpulist; without any,
//     each socket is taken as a NUMA node;
//   - a core is the online CPUs of a NUMA node sharing core_id and physical_package_id,
//     and is named by its lowest CPU ID;
//   - a core's uncore cache is the first cache above L2 that is shared by fewer CPUs
//     than its NUMA node holds; when the L3 spans the whole node there is none, and the
//     socket ID stands for it.
//
// CPUs whose core_id or physical_package_id cannot be read are left out, as cAdvisor
// leaves them out.
func Discover(root string) (*CPUTopology, error) {
	if root == "" {
		root = DefaultSysfsRoot
	}
	cpuDir := filepath.Join(root, "devices", "system", "cpu")
	online, err := onlineCPUs(cpuDir)
	if err != nil {
		return nil, err
	}
	nodes, err := numaNodes(root, cpuDir)
	if err != nil {
		return nil, err
	}
	details := CPUDetails{}
	for _, numa := range sortedKeys(nodes) {
		cores, err := coresOf(cpuDir, nodes[numa].Intersection(online))
		if err != nil {
			return nil, err
		}
		for _, c := range cores {
			uncore := uncoreCacheID(cpuDir, c, len(cores))
			for _, cpu := range c.threads {
				details[cpu] = CPUInfo{NUMANodeID: numa, SocketID: c.socket, CoreID: c.threads[0], UncoreCacheID: uncore}
			}
		}
	}
	if len(details) == 0 {
		return nil, fmt.Errorf("could not detect number of cpus")
	}
	return New(details), nil
}

// onlineCPUs is the kernel's online CPU list; every CPU directory when there is none
// (kernels without CPU hotplug).
func onlineCPUs(cpuDir string) (cpuset.CPUSet, error) {
	data, err := os.ReadFile(filepath.Join(cpuDir, "online"))
	if errors.Is(err, os.ErrNotExist) {
		return cpuDirs(cpuDir)
	}
	if err != nil {
		return cpuset.New(), err
	}
	return cpuset.Parse(strings.TrimSpace(string(data)))
}

// cpuDirs is the CPUs that have a cpuN directory in dir.
func cpuDirs(dir string) (cpuset.CPUSet, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return cpuset.New(), err
	}
	var ids []int
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), "cpu")
		if !ok {
			continue
		}
		if id, err := strconv.Atoi(name); err == nil {
			ids = append(ids, id)
		}
	}
	return cpuset.New(ids...), nil
}

// numaNodes maps each NUMA node to its CPUs; without NUMA nodes in sysfs, each socket.
func numaNodes(root, cpuDir string) (map[int]cpuset.CPUSet, error) {
	nodeDir := filepath.Join(root, "devices", "system", "node")
	entries, err := os.ReadDir(nodeDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	nodes := map[int]cpuset.CPUSet{}
	for _, e := range entries {
		m := nodeDirName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		id, _ := strconv.Atoi(m[1])
		cpus, err := readCPUList(filepath.Join(nodeDir, e.Name(), "cpulist"))
		if err != nil {
			return nil, err
		}
		nodes[id] = cpus
	}
	if len(nodes) > 0 {
		return nodes, nil
	}
	return socketsAsNodes(cpuDir)
}

// socketsAsNodes groups the CPUs by physical package, cAdvisor's fallback when the
// kernel shows no NUMA nodes.
func socketsAsNodes(cpuDir string) (map[int]cpuset.CPUSet, error) {
	all, err := cpuDirs(cpuDir)
	if err != nil {
		return nil, err
	}
	nodes := map[int]cpuset.CPUSet{}
	for _, cpu := range all.List() {
		socket, err := readTopologyInt(cpuDir, cpu, "physical_package_id")
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		nodes[socket] = nodes[socket].Union(cpuset.New(cpu))
	}
	return nodes, nil
}

// coresOf groups the CPUs into cores by (core_id, physical_package_id), in the order of
// their lowest CPU.
func coresOf(cpuDir string, cpus cpuset.CPUSet) ([]*core, error) {
	var cores []*core
	byKey := map[[2]int]*core{}
	for _, cpu := range cpus.List() {
		kernelID, err := readTopologyInt(cpuDir, cpu, "core_id")
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		socket, err := readTopologyInt(cpuDir, cpu, "physical_package_id")
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		key := [2]int{kernelID, socket}
		c := byKey[key]
		if c == nil {
			c = &core{socket: socket}
			byKey[key] = c
			cores = append(cores, c)
		}
		c.threads = append(c.threads, cpu)
	}
	return cores, nil
}

// uncoreCacheID is the ID of the core's first cache above L2 that does not span its
// whole NUMA node (cAdvisor counts the node's CPUs as its cores times this core's
// threads), or the core's socket when there is none.
func uncoreCacheID(cpuDir string, c *core, coresInNode int) int {
	cacheDir := filepath.Join(cpuDir, fmt.Sprintf("cpu%d", c.threads[0]), "cache")
	entries, err := os.ReadDir(cacheDir)
	if err != nil {
		return c.socket
	}
	nodeWide := coresInNode * len(c.threads)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "index") {
			continue
		}
		dir := filepath.Join(cacheDir, e.Name())
		level, err1 := readInt(filepath.Join(dir, "level"))
		id, err2 := readInt(filepath.Join(dir, "id"))
		shared, err3 := readCPUList(filepath.Join(dir, "shared_cpu_list"))
		if err1 != nil || err2 != nil || err3 != nil || level <= 2 {
			continue
		}
		if shared.Size() != nodeWide {
			return id
		}
	}
	return c.socket
}

func readTopologyInt(cpuDir string, cpu int, name string) (int, error) {
	return readInt(filepath.Join(cpuDir, fmt.Sprintf("cpu%d", cpu), "topology", name))
}

func readInt(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

func readCPUList(path string) (cpuset.CPUSet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return cpuset.New(), err
	}
	return cpuset.Parse(strings.TrimSpace(string(data)))
}

func sortedKeys(m map[int]cpuset.CPUSet) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}
