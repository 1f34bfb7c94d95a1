package memorymanager

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/pkg/node/memorymanager/state"
)

// numaNode is what sysfs says of one NUMA node's memory.
type numaNode struct {
	id        int
	memTotal  uint64 // bytes
	hugePages []hugePages
}

type hugePages struct {
	pageSizeKB, count uint64
}

// resourceName is the pages' resource, hugepages-<size>, with the size as a binary
// quantity ("2Mi", "1Gi").
func (h hugePages) resourceName() v1.ResourceName {
	size := resource.NewQuantity(int64(h.pageSizeKB)*1024, resource.BinarySI)
	return v1.ResourceName(v1.ResourceHugePagesPrefix + size.String())
}

func (h hugePages) bytes() uint64 { return h.count * h.pageSizeKB * 1024 }

var (
	nodeDirPattern = regexp.MustCompile(`^node(\d+)$`)
	memTotalLine   = regexp.MustCompile(`MemTotal:\s*([0-9]+) kB`)
)

// readNUMANodes reads the NUMA nodes under sysfsRoot/devices/system/node, as cAdvisor
// does for upstream: a node without meminfo has no memory, one without a hugepages
// directory no huge pages.
func readNUMANodes(sysfsRoot string) ([]numaNode, error) {
	dir := filepath.Join(sysfsRoot, "devices", "system", "node")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading NUMA nodes: %w", err)
	}
	var nodes []numaNode
	for _, e := range entries {
		m := nodeDirPattern.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		id, _ := strconv.Atoi(m[1])
		node, err := readNUMANode(filepath.Join(dir, e.Name()), id)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, node)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("no NUMA node found in %s", dir)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].id < nodes[j].id })
	return nodes, nil
}

func readNUMANode(dir string, id int) (numaNode, error) {
	node := numaNode{id: id}
	meminfo, err := os.ReadFile(filepath.Join(dir, "meminfo"))
	if err == nil {
		m := memTotalLine.FindSubmatch(meminfo)
		if m == nil {
			return node, fmt.Errorf("no MemTotal in %s", filepath.Join(dir, "meminfo"))
		}
		kb, _ := strconv.ParseUint(string(m[1]), 10, 64)
		node.memTotal = kb * 1024
	}
	node.hugePages, err = readHugePages(filepath.Join(dir, "hugepages"))
	return node, err
}

// readHugePages reads hugepages-<size>kB/nr_hugepages for every page size.
func readHugePages(dir string) ([]hugePages, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []hugePages
	for _, e := range entries {
		size, ok := strings.CutSuffix(strings.TrimPrefix(e.Name(), "hugepages-"), "kB")
		kb, err := strconv.ParseUint(size, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("unexpected huge pages directory %s", filepath.Join(dir, e.Name()))
		}
		nr, err := os.ReadFile(filepath.Join(dir, e.Name(), "nr_hugepages"))
		if err != nil {
			return nil, err
		}
		count, err := strconv.ParseUint(strings.TrimSpace(string(nr)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("could not parse file nr_hugepage for %s, contents %q", e.Name(), string(nr))
		}
		out = append(out, hugePages{pageSizeKB: kb, count: count})
	}
	return out, nil
}

// defaultMachineState is the machine state with nothing assigned (upstream's
// getDefaultMachineState). Reserving more than a node has is an error, where upstream's
// unsigned arithmetic would wrap around.
func defaultMachineState(nodes []numaNode, reserved reservedByNode) (state.NUMANodeMap, error) {
	machine := state.NUMANodeMap{}
	for _, n := range nodes {
		node := &state.NUMANodeState{MemoryMap: map[v1.ResourceName]*state.MemoryTable{}, Cells: []int{n.id}}
		var hugePagesTotal uint64
		for _, h := range n.hugePages {
			table, err := memoryTable(n.id, h.resourceName(), h.bytes(), reserved[n.id][h.resourceName()], 0)
			if err != nil {
				return nil, err
			}
			node.MemoryMap[h.resourceName()] = table
			hugePagesTotal += h.bytes()
		}
		// Memory held by huge pages cannot be given as memory.
		table, err := memoryTable(n.id, v1.ResourceMemory, n.memTotal, reserved[n.id][v1.ResourceMemory], hugePagesTotal)
		if err != nil {
			return nil, err
		}
		node.MemoryMap[v1.ResourceMemory] = table
		machine[n.id] = node
	}
	return machine, nil
}

// memoryTable is the table of a type of memory with nothing assigned: of total bytes,
// those reserved for the system and those held otherwise are not allocatable.
func memoryTable(node int, name v1.ResourceName, total, systemReserved, held uint64) (*state.MemoryTable, error) {
	if systemReserved+held > total {
		return nil, fmt.Errorf("[memorymanager] NUMA node %d has %d bytes of %s, less than the %d reserved for the system (and %d held by huge pages)",
			node, total, name, systemReserved, held)
	}
	allocatable := total - systemReserved - held
	return &state.MemoryTable{TotalMemSize: total, SystemReserved: systemReserved, Allocatable: allocatable, Free: allocatable}, nil
}
