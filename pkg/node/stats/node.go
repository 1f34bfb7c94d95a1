package stats

import (
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// nodeCPUAndMemory builds the node's CPU, memory, swap and system
// containers from the root cgroup and /proc; full adds the IO pressure.
func (p *Provider) nodeCPUAndMemory(full bool) (*statsapi.NodeStats, error) {
	now := p.now()
	cpu, err := p.nodeCPU(now)
	if err != nil {
		return nil, err
	}
	mem, swap, err := p.nodeMemory(now)
	if err != nil {
		return nil, err
	}
	node := &statsapi.NodeStats{
		NodeName:         p.opts.NodeName,
		StartTime:        metaTime(p.bootTime),
		CPU:              cpu,
		Memory:           mem,
		Swap:             swap,
		SystemContainers: p.systemContainerStats(now, full),
	}
	if full {
		node.IO = &statsapi.IOStats{Time: metaTime(now), PSI: readPSIOrZero(filepath.Join(p.opts.ProcRoot, "pressure", "io"))}
	}
	return node, nil
}

// nodeCPU is the root cgroup's cumulative CPU time (cAdvisor's figure for
// the node), or the non-idle time in /proc/stat where the root cgroup has
// no usage file (cgroup v2 without cpu.stat at the root).
func (p *Provider) nodeCPU(now time.Time) (*statsapi.CPUStats, error) {
	usage, err := p.cgroups.cpuUsage("/")
	if err != nil {
		ps, perr := readProcStat(p.opts.ProcRoot)
		if perr != nil {
			return nil, perr
		}
		usage = ps.busyNanos
	}
	cpu := &statsapi.CPUStats{
		Time:                 metaTime(now),
		UsageCoreNanoSeconds: ptrTo(usage),
		PSI:                  readPSIOrZero(filepath.Join(p.opts.ProcRoot, "pressure", "cpu")),
	}
	if rate, ok := p.rates.update("node", now.UnixNano(), usage); ok {
		cpu.UsageNanoCores = ptrTo(rate)
	}
	return cpu, nil
}

// nodeMemory reads the root memory cgroup where it has usage figures (v1),
// else (v2, whose root has no memory.current) /proc/meminfo and /proc/vmstat
// as runc emulates them. Available is the machine's memory less the working
// set, and less the memory reserved for huge pages, which the working set
// never shows (upstream's HugepageAwareEviction, on by default).
func (p *Provider) nodeMemory(now time.Time) (*statsapi.MemoryStats, *statsapi.SwapStats, error) {
	mi, err := readMeminfo(p.opts.ProcRoot)
	if err != nil {
		return nil, nil, err
	}
	p.cgroups.setNodeSwap(mi.swapTotal)
	m, err := p.cgroups.memory("/")
	if err != nil {
		m = p.memoryFromProc(mi)
	}
	available := mi.total - min(mi.total, m.workingSet)
	available -= min(available, mi.hugetlb)
	mem := &statsapi.MemoryStats{
		Time:            metaTime(now),
		AvailableBytes:  ptrTo(available),
		UsageBytes:      ptrTo(m.usage),
		WorkingSetBytes: ptrTo(m.workingSet),
		RSSBytes:        ptrTo(m.rss),
		PageFaults:      ptrTo(m.pageFaults),
		MajorPageFaults: ptrTo(m.majorPageFaults),
		PSI:             readPSIOrZero(filepath.Join(p.opts.ProcRoot, "pressure", "memory")),
	}
	swapUsed := mi.swapTotal - min(mi.swapTotal, mi.swapFree)
	swap := &statsapi.SwapStats{
		Time:               metaTime(now),
		SwapUsageBytes:     ptrTo(swapUsed),
		SwapAvailableBytes: ptrTo(mi.swapFree),
	}
	return mem, swap, nil
}

func (p *Provider) memoryFromProc(mi meminfo) memSample {
	usage := mi.total - min(mi.total, mi.free)
	m := memSample{
		usage:      usage,
		workingSet: usage - min(usage, mi.inactiveFile),
		rss:        mi.anon,
	}
	_ = scanKeyValues(filepath.Join(p.opts.ProcRoot, "vmstat"), func(k []byte, v uint64) {
		switch string(k) {
		case "pgfault":
			m.pageFaults = v
		case "pgmajfault":
			m.majorPageFaults = v
		}
	})
	return m
}

// nodeNetwork reports the host's interfaces from /proc/net/dev.
func (p *Provider) nodeNetwork() *statsapi.NetworkStats {
	return p.netDevStats(filepath.Join(p.opts.ProcRoot, "net", "dev"), p.now())
}

// netnsStats reports the interfaces of the network namespace of process pid.
func (p *Provider) netnsStats(pid int, now time.Time) *statsapi.NetworkStats {
	return p.netDevStats(filepath.Join(p.opts.ProcRoot, strconv.Itoa(pid), "net", "dev"), now)
}

// netDevStats reads a net/dev file into NetworkStats; eth0, when there is
// one, also at the top level, as upstream.
func (p *Provider) netDevStats(file string, now time.Time) *statsapi.NetworkStats {
	ifaces, err := readNetDev(file)
	if err != nil {
		klog.V(4).InfoS("Unable to read network stats", "path", file, "err", err)
		return nil
	}
	ns := &statsapi.NetworkStats{Time: metaTime(now), Interfaces: ifaces}
	for _, i := range ifaces {
		if i.Name == defaultInterfaceName {
			ns.InterfaceStats = i
		}
	}
	return ns
}

// systemContainerStats reports the kubelet's, runtime's, misc and pods
// cgroups. One that cannot be read is left out, as upstream.
func (p *Provider) systemContainerStats(now time.Time, full bool) []statsapi.ContainerStats {
	var out []statsapi.ContainerStats
	for _, sc := range p.systemContainers {
		s, err := p.cgroups.read(sc.cgroup, now)
		if err != nil {
			klog.V(4).InfoS("Failed to get system container stats", "containerName", sc.cgroup, "err", err)
			continue
		}
		cs := statsapi.ContainerStats{Name: sc.name, StartTime: metaTime(p.created)}
		if sc.name != statsapi.SystemContainerKubelet {
			cs.StartTime = metaTime(p.cgroups.creationTime(sc.cgroup))
		}
		psi := p.cgroups.psi(sc.cgroup)
		if s.hasCPU {
			cs.CPU = &statsapi.CPUStats{Time: metaTime(now), UsageCoreNanoSeconds: ptrTo(s.cpuNanos), PSI: psi.cpu}
			if rate, ok := p.rates.update("cgroup:"+sc.cgroup, now.UnixNano(), s.cpuNanos); ok {
				cs.CPU.UsageNanoCores = ptrTo(rate)
			}
		}
		if s.hasMem {
			cs.Memory = cgroupMemoryStats(now, s.mem)
			cs.Memory.PSI = psi.memory
			if s.mem.hasSwap {
				cs.Swap = &statsapi.SwapStats{Time: metaTime(now), SwapUsageBytes: ptrTo(s.mem.swap)}
			}
		}
		if full {
			cs.IO = &statsapi.IOStats{Time: metaTime(now), PSI: psi.io}
		}
		out = append(out, cs)
	}
	return out
}

func cgroupMemoryStats(now time.Time, m memSample) *statsapi.MemoryStats {
	ms := &statsapi.MemoryStats{
		Time:            metaTime(now),
		UsageBytes:      ptrTo(m.usage),
		WorkingSetBytes: ptrTo(m.workingSet),
		RSSBytes:        ptrTo(m.rss),
		PageFaults:      ptrTo(m.pageFaults),
		MajorPageFaults: ptrTo(m.majorPageFaults),
	}
	if m.limit > 0 {
		ms.AvailableBytes = ptrTo(m.limit - min(m.limit, m.workingSet))
	}
	return ms
}
