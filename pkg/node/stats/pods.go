package stats

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// listPodStats builds the pods' stats from the runtime. full adds networks,
// filesystems, volumes and ephemeral storage to the CPU and memory figures.
//
// With pod cgroups it takes the containers from ListContainerStats and the
// pods from their cgroups, as upstream's default path does with cAdvisor:
// containerd 1.6 answers ListPodSandboxStats for 100 pods in about 1.7s of
// its CPU (it enters every pod's network namespace), ListContainerStats in
// about 0.15s. ListPodSandboxStats serves only where pod cgroups are unknown.
func (p *Provider) listPodStats(ctx context.Context, full bool, rootFs fsInfo) ([]statsapi.PodStats, error) {
	sandboxes, containers, err := p.liveSandboxesAndContainers(ctx)
	if err != nil {
		return nil, err
	}
	b := &podStatsBuilder{p: p, full: full, rootFs: rootFs, now: p.now(), fsByMount: map[string]*fsInfo{}}
	if p.opts.PodCgroupRoot == "" && p.useSandboxStats() {
		stats, err := p.runtime.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{})
		if err == nil {
			return b.fromSandboxStats(stats, sandboxes, containers), nil
		}
		if status.Code(err) != codes.Unimplemented {
			return nil, err
		}
		p.noSandboxStats()
	}
	stats, err := p.runtime.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{})
	if err != nil {
		return nil, fmt.Errorf("failed to list all container stats: %w", err)
	}
	return b.fromContainerStats(stats, sandboxes, containers), nil
}

func (p *Provider) useSandboxStats() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.sandboxStatsUnsupported
}

func (p *Provider) noSandboxStats() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.sandboxStatsUnsupported {
		klog.InfoS("The runtime does not implement ListPodSandboxStats: pod CPU and memory are the sums of their containers', without network stats")
	}
	p.sandboxStatsUnsupported = true
}

// liveSandboxesAndContainers maps sandbox and container IDs to the sandboxes
// and containers that stats are reported for, as upstream picks them: one
// sandbox per pod name (its ready ones, else its newest) and running
// containers only.
func (p *Provider) liveSandboxesAndContainers(ctx context.Context) (map[string]*runtimeapi.PodSandbox, map[string]*runtimeapi.Container, error) {
	ctrs, err := p.runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to list all containers: %w", err)
	}
	sbs, err := p.runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to list all pod sandboxes: %w", err)
	}
	sandboxes := make(map[string]*runtimeapi.PodSandbox, len(sbs))
	for _, s := range currentSandboxes(sbs) {
		sandboxes[s.Id] = s
	}
	containers := make(map[string]*runtimeapi.Container, len(ctrs))
	for _, c := range ctrs {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			containers[c.Id] = c
		}
	}
	return sandboxes, containers, nil
}

// currentSandboxes drops the sandboxes a pod has left behind: of several
// sandboxes with one pod name and namespace it keeps the ready ones, or the
// newest when none is ready. A lone sandbox is kept whatever its state.
func currentSandboxes(sbs []*runtimeapi.PodSandbox) []*runtimeapi.PodSandbox {
	type podName struct{ namespace, name string }
	byPod := make(map[podName][]*runtimeapi.PodSandbox, len(sbs))
	for _, s := range sbs {
		k := podName{s.GetMetadata().GetNamespace(), s.GetMetadata().GetName()}
		byPod[k] = append(byPod[k], s)
	}
	out := make([]*runtimeapi.PodSandbox, 0, len(byPod))
	for _, group := range byPod {
		if len(group) == 1 {
			out = append(out, group[0])
			continue
		}
		ready := false
		for _, s := range group {
			if s.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				out = append(out, s)
				ready = true
			}
		}
		if !ready {
			newest := slices.MaxFunc(group, func(a, b *runtimeapi.PodSandbox) int {
				return cmpInt64(a.CreatedAt, b.CreatedAt)
			})
			out = append(out, newest)
		}
	}
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// podStatsBuilder holds what one listing shares: the node's root filesystem
// and the filesystems of writable layers, looked up once per mount point.
type podStatsBuilder struct {
	p         *Provider
	full      bool
	rootFs    fsInfo
	now       time.Time
	fsByMount map[string]*fsInfo // nil value: statfs failed
}

func newPodStats(sb *runtimeapi.PodSandbox) statsapi.PodStats {
	return statsapi.PodStats{
		PodRef: statsapi.PodReference{
			Name:      sb.GetMetadata().GetName(),
			Namespace: sb.GetMetadata().GetNamespace(),
			UID:       sb.GetMetadata().GetUid(),
		},
		// The summary API's pod start time is the sandbox's creation.
		StartTime: metaTime(time.Unix(0, sb.CreatedAt)),
	}
}

// fromSandboxStats builds pods from ListPodSandboxStats: pod CPU, memory,
// network and processes from the pod's own figures, containers from theirs.
func (b *podStatsBuilder) fromSandboxStats(stats []*runtimeapi.PodSandboxStats, sandboxes map[string]*runtimeapi.PodSandbox, containers map[string]*runtimeapi.Container) []statsapi.PodStats {
	out := make([]statsapi.PodStats, 0, len(stats))
	for _, s := range stats {
		sb, ok := sandboxes[s.GetAttributes().GetId()]
		if !ok {
			continue
		}
		ps := newPodStats(sb)
		lin := s.GetLinux()
		for _, cs := range lin.GetContainers() {
			if c, ok := containers[cs.GetAttributes().GetId()]; ok {
				ps.Containers = append(ps.Containers, b.container(cs, c, ps.PodRef))
			}
		}
		ps.CPU = b.cpu("sandbox:"+sb.Id, lin.GetCpu())
		ps.Memory = podMemory(lin.GetMemory(), b.now)
		ps.Swap = sumSwap(ps.Containers)
		if b.full {
			ps.Network = podNetwork(lin.GetNetwork(), b.now)
			if n := lin.GetProcess().GetProcessCount(); n != nil {
				ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: ptrTo(n.Value)}
			}
			if io := lin.GetIo(); io != nil {
				ps.IO = &statsapi.IOStats{Time: criTime(io.Timestamp, b.now), PSI: criPSI(io.Psi)}
			}
			b.addStorage(&ps)
		}
		out = append(out, ps)
	}
	return out
}

// fromContainerStats builds pods from ListContainerStats: a pod for each
// sandbox with a running container, as upstream's default path has them.
// The pod's own figures come from its cgroup; where it has none that can be
// found, its CPU and memory are its containers' sums, as upstream sums them.
func (b *podStatsBuilder) fromContainerStats(stats []*runtimeapi.ContainerStats, sandboxes map[string]*runtimeapi.PodSandbox, containers map[string]*runtimeapi.Container) []statsapi.PodStats {
	var out []statsapi.PodStats
	var sandboxIDs []string
	var containerIDs [][]string
	index := map[string]int{}
	for _, s := range stats {
		c, ok := containers[s.GetAttributes().GetId()]
		if !ok {
			continue
		}
		sb, ok := sandboxes[c.PodSandboxId]
		if !ok {
			continue
		}
		i, ok := index[sb.Id]
		if !ok {
			i = len(out)
			index[sb.Id] = i
			out = append(out, newPodStats(sb))
			sandboxIDs = append(sandboxIDs, sb.Id)
			containerIDs = append(containerIDs, nil)
		}
		out[i].Containers = append(out[i].Containers, b.container(s, c, out[i].PodRef))
		containerIDs[i] = append(containerIDs[i], c.Id)
	}
	seen := make(map[string]bool, len(out))
	for i := range out {
		ps := &out[i]
		seen[ps.PodRef.UID] = true
		if !b.addPodCgroupStats(ps, sandboxIDs[i], containerIDs[i]) {
			ps.CPU, ps.Memory = sumCPUAndMemory(ps.Containers)
			ps.Swap = sumSwap(ps.Containers)
		}
		if b.full {
			b.addStorage(ps)
		}
	}
	b.p.podCgroups.retain(seen)
	return out
}

// addPodCgroupStats fills the pod's CPU, memory and swap from its cgroup
// and, for a full summary, its process count and its network as its
// sandbox's process sees it. It reports false when there is no pod cgroup.
func (b *podStatsBuilder) addPodCgroupStats(ps *statsapi.PodStats, sandboxID string, containerIDs []string) bool {
	pc := b.p.podCgroups
	if pc.root == "" {
		return false
	}
	uid := ps.PodRef.UID
	name, ok := pc.find(uid)
	if !ok {
		return false
	}
	s, err := b.p.cgroups.read(name, b.now)
	if err != nil {
		pc.forget(uid) // removed; a new sandbox may have another
		return false
	}
	psi := b.p.cgroups.psi(name)
	if s.hasCPU {
		ps.CPU = &statsapi.CPUStats{Time: metaTime(b.now), UsageCoreNanoSeconds: ptrTo(s.cpuNanos), PSI: psi.cpu}
		if rate, ok := b.p.rates.update("pod:"+uid, b.now.UnixNano(), s.cpuNanos); ok {
			ps.CPU.UsageNanoCores = ptrTo(rate)
		}
	}
	if s.hasMem {
		ps.Memory = cgroupMemoryStats(b.now, s.mem)
		ps.Memory.PSI = psi.memory
		if s.mem.hasSwap {
			ps.Swap = &statsapi.SwapStats{Time: metaTime(b.now), SwapUsageBytes: ptrTo(s.mem.swap)}
		}
	}
	if !b.full {
		return true
	}
	ps.IO = &statsapi.IOStats{Time: metaTime(b.now), PSI: psi.io}
	ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: ptrTo(pc.processCount(name, containerIDs))}
	if pid, ok := pc.sandboxPID(name, sandboxID); ok {
		ps.Network = b.p.netnsStats(pid, b.now)
	}
	return true
}

// container builds one container's stats. Figures the runtime leaves out
// are zero, as upstream's CRI path reports them.
func (b *podStatsBuilder) container(s *runtimeapi.ContainerStats, c *runtimeapi.Container, pod statsapi.PodReference) statsapi.ContainerStats {
	name := s.GetAttributes().GetMetadata().GetName()
	if name == "" {
		name = c.GetMetadata().GetName()
	}
	cs := statsapi.ContainerStats{
		Name: name,
		// The summary API's container start time is its creation.
		StartTime: metaTime(time.Unix(0, c.CreatedAt)),
		CPU:       b.cpu("container:"+c.Id, s.GetCpu()),
		Memory:    containerMemory(s.GetMemory(), b.now),
		Swap:      containerSwap(s.GetSwap(), b.now),
	}
	if cs.CPU == nil {
		cs.CPU = &statsapi.CPUStats{Time: metaTime(b.now), UsageCoreNanoSeconds: ptrTo[uint64](0), UsageNanoCores: ptrTo[uint64](0)}
	}
	if b.full {
		cs.IO = &statsapi.IOStats{Time: metaTime(b.now)}
		if io := s.GetIo(); io != nil {
			cs.IO = &statsapi.IOStats{Time: criTime(io.Timestamp, b.now), PSI: criPSI(io.Psi)}
		}
		cs.Rootfs = b.writableLayer(s.GetWritableLayer())
		cs.Logs = b.logs(filepath.Join(b.p.podLogDir(pod), name))
	}
	return cs
}

// cpu turns a CRI CPU sample into CPUStats; usageNanoCores comes from this
// sample and the provider's previous one of key, else from the runtime when
// it reports a non-zero rate (containerd reports 0 until it has two samples).
func (b *podStatsBuilder) cpu(key string, u *runtimeapi.CpuUsage) *statsapi.CPUStats {
	if u == nil {
		return nil
	}
	ts := criTime(u.Timestamp, b.now)
	cpu := &statsapi.CPUStats{Time: ts, PSI: criPSI(u.Psi)}
	if u.UsageCoreNanoSeconds != nil {
		cpu.UsageCoreNanoSeconds = ptrTo(u.UsageCoreNanoSeconds.Value)
		if rate, ok := b.p.rates.update(key, ts.UnixNano(), u.UsageCoreNanoSeconds.Value); ok {
			cpu.UsageNanoCores = ptrTo(rate)
		}
	}
	if cpu.UsageNanoCores == nil && u.UsageNanoCores != nil && u.UsageNanoCores.Value != 0 {
		cpu.UsageNanoCores = ptrTo(u.UsageNanoCores.Value)
	}
	return cpu
}

func containerMemory(m *runtimeapi.MemoryUsage, now time.Time) *statsapi.MemoryStats {
	if m == nil {
		zero := func() *uint64 { return ptrTo[uint64](0) }
		return &statsapi.MemoryStats{Time: metaTime(now), AvailableBytes: zero(), UsageBytes: zero(),
			WorkingSetBytes: zero(), RSSBytes: zero(), PageFaults: zero(), MajorPageFaults: zero()}
	}
	return podMemory(m, now)
}

func podMemory(m *runtimeapi.MemoryUsage, now time.Time) *statsapi.MemoryStats {
	if m == nil {
		return nil
	}
	return &statsapi.MemoryStats{
		Time:            criTime(m.Timestamp, now),
		AvailableBytes:  criValue(m.AvailableBytes),
		UsageBytes:      criValue(m.UsageBytes),
		WorkingSetBytes: criValue(m.WorkingSetBytes),
		RSSBytes:        criValue(m.RssBytes),
		PageFaults:      criValue(m.PageFaults),
		MajorPageFaults: criValue(m.MajorPageFaults),
		PSI:             criPSI(m.Psi),
	}
}

func containerSwap(s *runtimeapi.SwapUsage, now time.Time) *statsapi.SwapStats {
	if s == nil {
		return &statsapi.SwapStats{Time: metaTime(now), SwapUsageBytes: ptrTo[uint64](0), SwapAvailableBytes: ptrTo[uint64](0)}
	}
	return &statsapi.SwapStats{
		Time:               criTime(s.Timestamp, now),
		SwapUsageBytes:     criValue(s.SwapUsageBytes),
		SwapAvailableBytes: criValue(s.SwapAvailableBytes),
	}
}

// podNetwork converts the sandbox's network figures. containerd 1.6 sends
// no timestamp and its default interface only: the time is the sample's and
// the default interface is listed, as cAdvisor lists every interface.
func podNetwork(n *runtimeapi.NetworkUsage, now time.Time) *statsapi.NetworkStats {
	if n == nil {
		return nil
	}
	ns := &statsapi.NetworkStats{Time: criTime(n.Timestamp, now)}
	if d := n.DefaultInterface; d != nil {
		ns.InterfaceStats = criInterface(d)
	}
	for _, i := range n.Interfaces {
		ns.Interfaces = append(ns.Interfaces, criInterface(i))
	}
	if len(ns.Interfaces) == 0 && ns.Name != "" {
		ns.Interfaces = []statsapi.InterfaceStats{ns.InterfaceStats}
	}
	return ns
}

func criInterface(i *runtimeapi.NetworkInterfaceUsage) statsapi.InterfaceStats {
	return statsapi.InterfaceStats{
		Name:     i.Name,
		RxBytes:  criValue(i.RxBytes),
		RxErrors: criValue(i.RxErrors),
		TxBytes:  criValue(i.TxBytes),
		TxErrors: criValue(i.TxErrors),
	}
}

// writableLayer is the container's rootfs: the runtime's usage of the
// writable layer, with the size of the filesystem holding it.
func (b *podStatsBuilder) writableLayer(l *runtimeapi.FilesystemUsage) *statsapi.FsStats {
	if l == nil {
		return &statsapi.FsStats{}
	}
	fs := &statsapi.FsStats{
		Time:       criTime(l.Timestamp, b.now),
		UsedBytes:  criValue(l.UsedBytes),
		InodesUsed: criValue(l.InodesUsed),
	}
	if info := b.fsOf(l.GetFsId().GetMountpoint()); info != nil {
		fs.AvailableBytes = ptrTo(info.available)
		fs.CapacityBytes = ptrTo(info.capacity)
		fs.InodesFree = ptrTo(info.ifree)
		fs.Inodes = ptrTo(info.inodes)
	}
	return fs
}

func (b *podStatsBuilder) fsOf(mountpoint string) *fsInfo {
	if mountpoint == "" {
		return nil
	}
	info, ok := b.fsByMount[mountpoint]
	if !ok {
		if i, err := statFS(mountpoint, b.now); err == nil {
			info = &i
		} else {
			klog.V(2).InfoS("Failed to get the info of the filesystem with mountpoint", "mountpoint", mountpoint, "err", err)
		}
		b.fsByMount[mountpoint] = info
	}
	return info
}

// logs is the usage of the log files in dir, on the node's root filesystem;
// nil when dir cannot be read.
func (b *podStatsBuilder) logs(dir string) *statsapi.FsStats {
	u, err := filesUsage(dir)
	if err != nil {
		klog.V(6).InfoS("Unable to fetch log stats", "path", dir, "err", err)
		return nil
	}
	fs := b.rootFs.fsStats()
	fs.Time = metaTime(b.now)
	fs.UsedBytes = ptrTo(u.bytes)
	fs.InodesUsed = ptrTo(u.inodes)
	return fs
}

// addStorage adds the pod's volume stats and its ephemeral storage: its
// containers' writable layers and logs, its local ephemeral volumes
// (emptyDir on disk, configMap, gitRepo), its own log files and its
// /etc/hosts file, on the node's root filesystem as upstream sums them.
func (b *podStatsBuilder) addStorage(ps *statsapi.PodStats) {
	var ephemeral []statsapi.VolumeStats
	if vs, ok := b.p.volumes.get(types.UID(ps.PodRef.UID)); ok {
		ephemeral = vs.ephemeral
		ps.VolumeStats = slices.Concat(vs.ephemeral, vs.persistent)
	}
	total := b.rootFs.fsStats()
	add := func(fs *statsapi.FsStats) {
		total.UsedBytes = addUsage(total.UsedBytes, fs.UsedBytes)
		total.InodesUsed = addUsage(total.InodesUsed, fs.InodesUsed)
		if total.Time.Before(&fs.Time) {
			total.Time = fs.Time
		}
	}
	for _, c := range ps.Containers {
		if c.Rootfs == nil {
			continue
		}
		add(c.Rootfs)
		if c.Logs != nil {
			add(c.Logs)
		}
	}
	for i := range ephemeral {
		add(&ephemeral[i].FsStats)
	}
	if l := b.logs(b.p.podLogDir(ps.PodRef)); l != nil {
		add(l)
	}
	if h := b.etcHosts(ps.PodRef.UID); h != nil {
		add(h)
	}
	ps.EphemeralStorage = total
}

func (b *podStatsBuilder) etcHosts(uid string) *statsapi.FsStats {
	u, err := duPath(b.p.podEtcHostsPath(uid))
	if err != nil {
		return nil // no file: the pod mounts its own /etc/hosts, or none was made
	}
	fs := b.rootFs.fsStats()
	fs.Time = metaTime(b.now)
	fs.UsedBytes = ptrTo(u.bytes)
	fs.InodesUsed = ptrTo(u.inodes)
	return fs
}

// sumCPUAndMemory adds up containers' CPU and memory, for a pod whose own
// figures the runtime does not give.
func sumCPUAndMemory(cs []statsapi.ContainerStats) (*statsapi.CPUStats, *statsapi.MemoryStats) {
	var cpu *statsapi.CPUStats
	var mem *statsapi.MemoryStats
	for _, c := range cs {
		if c.CPU != nil {
			if cpu == nil {
				cpu = &statsapi.CPUStats{}
			}
			cpu.Time = c.CPU.Time
			cpu.UsageCoreNanoSeconds = sumPtr(cpu.UsageCoreNanoSeconds, c.CPU.UsageCoreNanoSeconds)
			cpu.UsageNanoCores = sumPtr(cpu.UsageNanoCores, c.CPU.UsageNanoCores)
		}
		if c.Memory != nil {
			if mem == nil {
				mem = &statsapi.MemoryStats{}
			}
			mem.Time = c.Memory.Time
			mem.AvailableBytes = sumPtr(mem.AvailableBytes, c.Memory.AvailableBytes)
			mem.UsageBytes = sumPtr(mem.UsageBytes, c.Memory.UsageBytes)
			mem.WorkingSetBytes = sumPtr(mem.WorkingSetBytes, c.Memory.WorkingSetBytes)
			mem.RSSBytes = sumPtr(mem.RSSBytes, c.Memory.RSSBytes)
			mem.PageFaults = sumPtr(mem.PageFaults, c.Memory.PageFaults)
			mem.MajorPageFaults = sumPtr(mem.MajorPageFaults, c.Memory.MajorPageFaults)
		}
	}
	return cpu, mem
}

// sumSwap is a pod's swap, the sum of its containers': CRI has no pod swap.
func sumSwap(cs []statsapi.ContainerStats) *statsapi.SwapStats {
	var swap *statsapi.SwapStats
	for _, c := range cs {
		if c.Swap == nil {
			continue
		}
		if swap == nil {
			swap = &statsapi.SwapStats{}
		}
		swap.Time = c.Swap.Time
		swap.SwapUsageBytes = sumPtr(swap.SwapUsageBytes, c.Swap.SwapUsageBytes)
		swap.SwapAvailableBytes = sumPtr(swap.SwapAvailableBytes, c.Swap.SwapAvailableBytes)
	}
	return swap
}

// sumPtr adds b to a where both are known; a missing one counts as zero,
// and the sum is known once either is (upstream's pod sums).
func sumPtr(a, b *uint64) *uint64 {
	if a == nil && b == nil {
		return nil
	}
	var s uint64
	if a != nil {
		s = *a
	}
	if b != nil {
		s += *b
	}
	return &s
}

// addUsage adds b to a; a nil operand leaves the other as is.
func addUsage(a, b *uint64) *uint64 {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return ptrTo(*a + *b)
}

func criValue(v *runtimeapi.UInt64Value) *uint64 {
	if v == nil {
		return nil
	}
	return ptrTo(v.Value)
}

// criTime converts a CRI timestamp; a runtime that sends none (0) gets the
// time of the listing instead of 1970.
func criTime(ts int64, now time.Time) metav1.Time {
	if ts == 0 {
		return metaTime(now)
	}
	return metaTime(time.Unix(0, ts))
}

func criPSI(p *runtimeapi.PsiStats) *statsapi.PSIStats {
	if p == nil {
		return nil
	}
	out := &statsapi.PSIStats{}
	if f := p.Full; f != nil {
		out.Full = statsapi.PSIData{Total: f.Total, Avg10: f.Avg10, Avg60: f.Avg60, Avg300: f.Avg300}
	}
	if s := p.Some; s != nil {
		out.Some = statsapi.PSIData{Total: s.Total, Avg10: s.Avg10, Avg60: s.Avg60, Avg300: s.Avg300}
	}
	return out
}
