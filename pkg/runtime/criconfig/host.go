package criconfig

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Host is what the kernel offers that containers' resources depend on.
type Host struct {
	// CgroupV2: the node uses the unified hierarchy.
	CgroupV2 bool
	// HugePageSizes are the host's huge page sizes as the hugetlb cgroup
	// names them ("2MB", "1GB"); each container gets a limit for each.
	HugePageSizes []string
	// SwapController: the memory cgroup accounts swap (cgroup v1:
	// memory.memsw.limit_in_bytes; v2: memory.swap.max), so that containers
	// can be kept out of it.
	SwapController bool
}

// DetectHost reads the host's huge page sizes and whether its memory cgroup
// accounts swap, as upstream's kubelet does; cgroupV2 says which hierarchy the
// node uses.
func DetectHost(cgroupV2 bool) Host {
	return Host{
		CgroupV2:       cgroupV2,
		HugePageSizes:  hugePageSizes("/sys/kernel/mm/hugepages"),
		SwapController: swapController(cgroupV2, "/sys/fs/cgroup", "/proc/self/cgroup"),
	}
}

// hugePageSizes lists dir's hugepages-<n>kB entries as page sizes, in the
// directory's order (unsorted, as runc lists them: the order of the CRI
// limits follows it).
func hugePageSizes(dir string) []string {
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	names, err := d.Readdirnames(0)
	d.Close()
	if err != nil {
		return nil
	}
	var sizes []string
	for _, name := range names {
		kb, ok := strings.CutPrefix(name, "hugepages-")
		if !ok {
			continue
		}
		kb, ok = strings.CutSuffix(kb, "kB")
		n, err := strconv.ParseInt(kb, 10, 64)
		if !ok || err != nil {
			continue
		}
		if size, ok := byteSizeUnit(n << 10); ok {
			sizes = append(sizes, size)
		}
	}
	return sizes
}

// swapController reports whether the memory cgroup accounts swap: on cgroup
// v1 the memory controller's memory.memsw.limit_in_bytes, on v2
// memory.swap.max in the cgroup this process runs in (the root has none).
func swapController(cgroupV2 bool, cgroupRoot, selfCgroup string) bool {
	path := filepath.Join(cgroupRoot, "memory", "memory.memsw.limit_in_bytes")
	if cgroupV2 {
		own, ok := unifiedCgroupOf(selfCgroup)
		if !ok {
			return false
		}
		path = filepath.Join(cgroupRoot, own, "memory.swap.max")
	}
	_, err := os.Stat(path)
	return err == nil
}

// unifiedCgroupOf reads the cgroup v2 path ("0::/path") of a /proc/<pid>/cgroup file.
func unifiedCgroupOf(file string) (string, bool) {
	f, err := os.Open(file)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if path, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return path, true
		}
	}
	return "", false
}
