package stats

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// unlimitedMemory is the bound above which a memory limit counts as none
// (cgroup v1 writes a page-rounded 2^63-1 for "no limit"), as upstream.
const unlimitedMemory = uint64(1 << 62)

// cgroupFS reads CPU and memory figures of cgroups, v1 or v2, the way
// cAdvisor does for the kubelet's node and system containers.
type cgroupFS struct {
	root string // where the hierarchies are mounted, /sys/fs/cgroup
	v2   bool   // unified hierarchy only
	swap *swapState
}

func newCgroupFS(root string) cgroupFS {
	_, err := os.Stat(filepath.Join(root, "cgroup.controllers"))
	return cgroupFS{root: root, v2: err == nil, swap: &swapState{}}
}

// swapState lets a node without swap skip each cgroup's swap file: nothing can be
// swapped out there, so every cgroup's swap usage is 0. On v1 that file is one of the
// five read per cgroup, and the dearest (a metrics-server scrape reads every pod's).
type swapState struct {
	// nodeHasNone is set while the node's last memory reading showed no swap space.
	nodeHasNone atomic.Bool
	// files is whether cgroups have a swap usage file (swap accounting), learnt from
	// the first non-root cgroup read: fileUnknown, fileFound or fileMissing.
	files atomic.Int32
}

const (
	fileUnknown int32 = iota
	fileFound
	fileMissing
)

// setNodeSwap records whether the node has swap space (SwapTotal above 0).
func (c cgroupFS) setNodeSwap(total uint64) {
	if c.swap != nil {
		c.swap.nodeHasNone.Store(total == 0)
	}
}

// cgroupSample is one reading of a cgroup.
type cgroupSample struct {
	time     time.Time
	cpuNanos uint64
	hasCPU   bool
	mem      memSample
	hasMem   bool
}

// pressure groups the PSI figures of one cgroup.
type pressure struct {
	cpu, memory, io *statsapi.PSIStats
}

// memSample is a cgroup's memory in cAdvisor's terms.
type memSample struct {
	usage, workingSet, rss, pageFaults, majorPageFaults uint64
	limit                                               uint64 // 0: none
	swap                                                uint64
	hasSwap                                             bool
}

// path is the directory of cgroup name in the hierarchy of controller (v1)
// or in the unified hierarchy (v2).
func (c cgroupFS) path(controller, name string) string {
	if c.v2 {
		return filepath.Join(c.root, name)
	}
	return filepath.Join(c.root, controller, name)
}

// read samples cgroup name ("/" for the root). A cgroup that is missing in
// every controller is an error; a missing file in one controller only leaves
// its figures out.
func (c cgroupFS) read(name string, now time.Time) (cgroupSample, error) {
	s := cgroupSample{time: now}
	var errCPU, errMem error
	s.cpuNanos, errCPU = c.cpuUsage(name)
	s.hasCPU = errCPU == nil
	s.mem, errMem = c.memory(name)
	s.hasMem = errMem == nil
	if !s.hasCPU && !s.hasMem {
		return s, errors.Join(errCPU, errMem)
	}
	return s, nil
}

// cpuUsage is the cgroup's cumulative CPU time in nanoseconds.
func (c cgroupFS) cpuUsage(name string) (uint64, error) {
	if !c.v2 {
		v, _, err := readUint(filepath.Join(c.path("cpuacct", name), "cpuacct.usage"))
		return v, err
	}
	var usec uint64
	found := false
	err := scanKeyValues(filepath.Join(c.path("", name), "cpu.stat"), func(k []byte, v uint64) {
		if string(k) == "usage_usec" {
			usec, found = v, true
		}
	})
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, errors.New("no usage_usec in cpu.stat")
	}
	return usec * 1000, nil
}

// memory reads usage, working set (usage less inactive file pages, never
// below zero), RSS, page faults, limit and swap as cAdvisor does: v1 takes the
// hierarchical total_* keys of memory.stat, v2 the plain ones.
func (c cgroupFS) memory(name string) (memSample, error) {
	var m memSample
	dir := c.path("memory", name)
	usageFile, limitFile := "memory.usage_in_bytes", "memory.limit_in_bytes"
	inactiveKey, rssKey, faultKey, majorKey := "total_inactive_file", "total_rss", "total_pgfault", "total_pgmajfault"
	if c.v2 {
		usageFile, limitFile = "memory.current", "memory.max"
		inactiveKey, rssKey, faultKey, majorKey = "inactive_file", "anon", "pgfault", "pgmajfault"
	}
	var inactive uint64
	err := scanKeyValues(filepath.Join(dir, "memory.stat"), func(k []byte, v uint64) {
		switch string(k) {
		case inactiveKey:
			inactive = v
		case rssKey:
			m.rss = v
		case faultKey:
			m.pageFaults = v
		case majorKey:
			m.majorPageFaults = v
		}
	})
	if err != nil {
		return m, err
	}
	usage, _, err := readUint(filepath.Join(dir, usageFile))
	if err != nil {
		return m, err
	}
	m.usage = usage
	m.workingSet = usage - min(usage, inactive)
	if limit, ok, err := readUint(filepath.Join(dir, limitFile)); err == nil && ok && limit <= unlimitedMemory {
		m.limit = limit
	}
	m.swap, m.hasSwap = c.swapUsage(dir, name == "/", usage)
	return m, nil
}

// swapUsage is the cgroup's swap usage: memory.swap.current (v2), or memsw less
// memory usage (v1, only with swap accounting on). On a node without swap it is 0,
// reported where the file would be, without reading it.
func (c cgroupFS) swapUsage(dir string, root bool, usage uint64) (uint64, bool) {
	if st := c.swap; st != nil && !root && st.nodeHasNone.Load() {
		switch st.files.Load() {
		case fileFound:
			return 0, true
		case fileMissing:
			return 0, false
		}
	}
	var v uint64
	var ok bool
	var err error
	if c.v2 {
		v, ok, err = readUint(filepath.Join(dir, "memory.swap.current"))
	} else {
		var memsw uint64
		memsw, ok, err = readUint(filepath.Join(dir, "memory.memsw.usage_in_bytes"))
		v = memsw - min(memsw, usage)
	}
	if c.swap != nil && !root { // v2's root has no swap file whatever the accounting
		switch {
		case err == nil:
			c.swap.files.CompareAndSwap(fileUnknown, fileFound)
		case errors.Is(err, fs.ErrNotExist):
			c.swap.files.CompareAndSwap(fileUnknown, fileMissing)
		}
	}
	if err != nil || !ok {
		return 0, false
	}
	return v, true
}

// psi reads the cgroup's pressure files. Where there are none (cgroup v1, a
// kernel without PSI) the figures are zeros, not absent: upstream reads these
// cgroups through cAdvisor, whose PSI figures are values, and the kubelet
// (KubeletPSI, GA) reports them either way.
func (c cgroupFS) psi(name string) pressure {
	if !c.v2 {
		return pressure{cpu: &statsapi.PSIStats{}, memory: &statsapi.PSIStats{}, io: &statsapi.PSIStats{}}
	}
	dir := c.path("", name)
	return pressure{
		cpu:    readPSIOrZero(filepath.Join(dir, "cpu.pressure")),
		memory: readPSIOrZero(filepath.Join(dir, "memory.pressure")),
		io:     readPSIOrZero(filepath.Join(dir, "io.pressure")),
	}
}

// creationTime approximates when the cgroup was made by the change time of
// its directory, the earliest among the hierarchies as cAdvisor takes it.
func (c cgroupFS) creationTime(name string) time.Time {
	dirs := []string{c.path("", name)}
	if !c.v2 {
		dirs = []string{c.path("cpuacct", name), c.path("memory", name)}
	}
	var earliest time.Time
	for _, d := range dirs {
		var st syscall.Stat_t
		if syscall.Stat(d, &st) != nil {
			continue
		}
		t := time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
		if earliest.IsZero() || t.Before(earliest) {
			earliest = t
		}
	}
	return earliest
}

// selfCgroup finds the cgroup of the calling process from /proc/self/cgroup as
// upstream finds the kubelet's own: the unified path on v2; on v1 the cpu
// and memory paths, which must agree (else "" for none).
func selfCgroup(procRoot string, v2 bool) string {
	data, err := os.ReadFile(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return ""
	}
	var cpu, mem string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if v2 && parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			switch ctrl {
			case "cpu":
				cpu = parts[2]
			case "memory":
				mem = parts[2]
			}
		}
	}
	if v2 || cpu != mem {
		return ""
	}
	return cpu
}
