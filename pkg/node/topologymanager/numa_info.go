package topologymanager

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// NUMADistances maps a NUMA node ID to its row of the distance matrix:
// Distances[a][b] is the distance from node a to node b, as the firmware (SLIT) gives
// it. A node whose distances are unknown has a nil row.
type NUMADistances map[int][]uint64

// Between is the distance from node a to node b, 0 where unknown.
func (d NUMADistances) Between(a, b int) uint64 {
	row := d[a]
	if b < 0 || b >= len(row) {
		return 0
	}
	return row[b]
}

// AverageFor is the mean distance over every ordered pair of nodes of the mask, the
// node to itself included (upstream's CalculateAverageFor).
func (d NUMADistances) AverageFor(m Mask) float64 {
	ids := m.Bits()
	if len(ids) == 0 {
		return 0
	}
	var sum float64
	for _, a := range ids {
		for _, b := range ids {
			sum += float64(d.Between(a, b))
		}
	}
	return sum / float64(len(ids)*len(ids))
}

// NUMAInfo is the machine's NUMA nodes and the distances between them.
type NUMAInfo struct {
	Nodes     []int
	Distances NUMADistances
}

// DefaultAffinityMask is every NUMA node of the machine: the affinity of a container
// no provider has a preference for.
func (n *NUMAInfo) DefaultAffinityMask() Mask {
	var m Mask
	for _, id := range n.Nodes {
		if id >= 0 && id < 64 {
			m |= 1 << id
		}
	}
	return m
}

// Narrowest is the mask with fewer NUMA nodes, or with the lower IDs when they have
// as many; b on a tie.
func (n *NUMAInfo) Narrowest(a, b Mask) Mask {
	if a.IsNarrowerThan(b) {
		return a
	}
	return b
}

// Closest is the narrowest mask, or among masks of as many nodes the one whose nodes
// are closest to each other on average, then the lower one (prefer-closest-numa-nodes).
func (n *NUMAInfo) Closest(a, b Mask) Mask {
	if a.Count() != b.Count() {
		return n.Narrowest(a, b)
	}
	da, db := n.Distances.AverageFor(a), n.Distances.AverageFor(b)
	switch {
	case da < db:
		return a
	case db < da:
		return b
	case a.IsLessThan(b):
		return a
	default:
		return b
	}
}

// hasAllDistances: every node has a distance row, as prefer-closest-numa-nodes needs.
func (n *NUMAInfo) hasAllDistances() bool {
	for _, id := range n.Nodes {
		if n.Distances[id] == nil {
			return false
		}
	}
	return true
}

// ReadNUMAInfo reads the NUMA nodes and their distances under sysfsRoot ("" is /sys).
// As cAdvisor, whose topology upstream uses, a kernel without NUMA nodes in sysfs has
// one node per CPU package, with unknown distances.
func ReadNUMAInfo(sysfsRoot string) (*NUMAInfo, error) {
	if sysfsRoot == "" {
		sysfsRoot = "/sys"
	}
	nodeDir := filepath.Join(sysfsRoot, "devices", "system", "node")
	ids := numberedEntries(nodeDir, "node")
	if len(ids) == 0 {
		return cpuPackagesAsNodes(filepath.Join(sysfsRoot, "devices", "system", "cpu"))
	}
	info := &NUMAInfo{Nodes: ids, Distances: NUMADistances{}}
	for _, id := range ids {
		row, err := readDistanceRow(filepath.Join(nodeDir, fmt.Sprintf("node%d", id), "distance"))
		if err != nil {
			return nil, err
		}
		info.Distances[id] = rowByNodeID(row, ids)
	}
	return info, nil
}

// numberedEntries lists the N of the entries named prefix+N in dir, ascending.
func numberedEntries(dir, prefix string) []int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var ids []int
	for _, e := range entries {
		digits, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		if id, err := strconv.Atoi(digits); err == nil && id >= 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// readDistanceRow parses a node's distance file; nil when the kernel has none, which
// matters only to prefer-closest-numa-nodes.
func readDistanceRow(path string) ([]uint64, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil
	}
	var row []uint64
	for _, field := range strings.Fields(string(raw)) {
		d, err := strconv.ParseUint(field, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("cannot convert %s to int", field)
		}
		row = append(row, d)
	}
	return row, nil
}

// rowByNodeID re-indexes a distance row by node ID. The kernel lists one distance per
// online node in ID order, so with sparse IDs (nodes 0 and 2) position 1 is node 2. A
// row of any other length is taken as already indexed by ID.
func rowByNodeID(row []uint64, ids []int) []uint64 {
	if row == nil || len(row) != len(ids) {
		return row
	}
	out := make([]uint64, ids[len(ids)-1]+1)
	for i, id := range ids {
		out[id] = row[i]
	}
	return out
}

func cpuPackagesAsNodes(cpuDir string) (*NUMAInfo, error) {
	seen := map[int]bool{}
	for _, cpu := range numberedEntries(cpuDir, "cpu") {
		raw, err := os.ReadFile(filepath.Join(cpuDir, fmt.Sprintf("cpu%d", cpu), "topology", "physical_package_id"))
		if err != nil {
			continue
		}
		if pkg, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil && pkg >= 0 {
			seen[pkg] = true
		}
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("no NUMA nodes or CPU packages found under %s", filepath.Dir(cpuDir))
	}
	info := &NUMAInfo{Distances: NUMADistances{}}
	for pkg := range seen {
		info.Nodes = append(info.Nodes, pkg)
		info.Distances[pkg] = nil
	}
	slices.Sort(info.Nodes)
	return info, nil
}
