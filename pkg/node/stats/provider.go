// Package stats serves the kubelet's Summary API (/stats/summary) and the
// resource metrics (/metrics/resource) that metrics-server scrapes, without
// cAdvisor. Container figures come from the runtime's ListContainerStats and
// pod figures from the pod's cgroup, its network from /proc/<pid>/net/dev of
// its sandbox's process, as upstream's default (cAdvisor-backed) CRI path
// has them; without a pod cgroup root the runtime's ListPodSandboxStats
// gives the pod figures (containerd 1.6 takes ten times as long for it).
// Node and system-container figures come from /proc and cgroupfs (v1 or v2),
// filesystems from statfs(2), volume and log usage from walking their
// directories as upstream's du-based metrics do, and CSI volumes' usage from
// their drivers (NodeGetVolumeStats).
package stats

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// RuntimeService is the part of the CRI runtime service the provider calls;
// k8s.io/cri-api's internalapi.RuntimeService (nodelet's pkg/runtime/cri) has it.
type RuntimeService interface {
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error)
	ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error)
}

// ImageService is the part of the CRI image service the provider calls.
type ImageService interface {
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
}

// PodLister lists the pods the kubelet knows; their volumes get stats.
type PodLister interface {
	GetPods() []*v1.Pod
}

// PodListerFunc adapts a function to PodLister.
type PodListerFunc func() []*v1.Pod

// GetPods calls f.
func (f PodListerFunc) GetPods() []*v1.Pod { return f() }

// Options configure a Provider. Cgroup names are paths in the cgroup
// hierarchy ("/kubepods"), as the kubelet's configuration gives them.
type Options struct {
	// NodeName is the summary's nodeName.
	NodeName string
	// RootDir is the kubelet's root directory (--root-dir): the node's fs
	// stats are its filesystem's, and pod volumes live under it.
	RootDir string
	// PodLogsDir is the pod log root (podLogsDir, /var/log/pods).
	PodLogsDir string
	// KubeletCgroup is kubeletCgroups; empty means the process's own cgroup,
	// found as upstream finds it (and left out if it cannot be).
	KubeletCgroup string
	// RuntimeCgroup (runtimeCgroups) and SystemCgroup (systemCgroups) are
	// reported as the "runtime" and "misc" system containers when set.
	RuntimeCgroup string
	SystemCgroup  string
	// PodCgroupRoot is the cgroup holding all pods ("/kubepods", or
	// "/kubepods.slice" with the systemd driver): the "pods" system container,
	// and where pod cgroups are found. Empty (cgroupsPerQOS off) leaves the
	// system container out and takes pod figures from ListPodSandboxStats.
	PodCgroupRoot string
	// VolumeStatsPeriod is volumeStatsAggPeriod: how often Run recomputes
	// pod volume usage. Zero means upstream's default, one minute; negative
	// turns volume stats off, as upstream.
	VolumeStatsPeriod time.Duration
	// ClaimPath finds where the volume manager mounted a pod's
	// persistentVolumeClaim, ephemeral or inline CSI volume; nil (or not
	// found) leaves the volume out of the volume stats.
	ClaimPath func(pod *v1.Pod, volumeName string) (string, bool)
	// CSI is the node's CSI drivers: claims and inline volumes they published
	// (found with ClaimPath) report the usage their driver gives. Nil leaves
	// CSI volumes out, as do drivers without the GET_VOLUME_STATS capability.
	CSI CSIVolumes

	// ProcRoot and CgroupRoot default to /proc and /sys/fs/cgroup; tests
	// point them at fixtures.
	ProcRoot   string
	CgroupRoot string
}

// Provider computes summaries. It is safe for concurrent use.
type Provider struct {
	runtime RuntimeService
	images  ImageService
	pods    PodLister
	opts    Options
	cgroups cgroupFS

	systemContainers []systemContainer
	created          time.Time // the kubelet's start: its system container's startTime
	bootTime         time.Time

	rates      *cpuRates
	volumes    volumeCache
	podCgroups *podCgroups

	mu sync.Mutex
	// sandboxStatsUnsupported is set once the runtime answered
	// ListPodSandboxStats with Unimplemented; pod figures then come from
	// ListContainerStats.
	sandboxStatsUnsupported bool

	now func() time.Time
}

// systemContainer is one of the summary's node.systemContainers.
type systemContainer struct {
	name   string // statsapi.SystemContainer*
	cgroup string
}

// NewProvider returns a Provider. pods may be nil (no volume stats).
func NewProvider(runtime RuntimeService, images ImageService, pods PodLister, opts Options) *Provider {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = "/sys/fs/cgroup"
	}
	if opts.PodLogsDir == "" {
		opts.PodLogsDir = "/var/log/pods"
	}
	if opts.VolumeStatsPeriod == 0 {
		opts.VolumeStatsPeriod = time.Minute
	}
	p := &Provider{
		runtime: runtime,
		images:  images,
		pods:    pods,
		opts:    opts,
		cgroups: newCgroupFS(opts.CgroupRoot),
		created: time.Now(),
		rates:   newCPURates(),
		now:     time.Now,
	}
	if ps, err := readProcStat(opts.ProcRoot); err == nil {
		p.bootTime = ps.bootTime
	} else {
		klog.InfoS("Error getting system boot time. Node metrics will have an incorrect start time", "err", err)
	}
	p.podCgroups = newPodCgroups(p.cgroups, opts.PodCgroupRoot)
	p.systemContainers = p.findSystemContainers()
	return p
}

func (p *Provider) findSystemContainers() []systemContainer {
	kubelet := p.opts.KubeletCgroup
	if kubelet == "" {
		kubelet = selfCgroup(p.opts.ProcRoot, p.cgroups.v2)
	}
	var out []systemContainer
	for _, sc := range []systemContainer{
		{statsapi.SystemContainerKubelet, kubelet},
		{statsapi.SystemContainerRuntime, p.opts.RuntimeCgroup},
		{statsapi.SystemContainerMisc, p.opts.SystemCgroup},
		{statsapi.SystemContainerPods, p.opts.PodCgroupRoot},
	} {
		// The root cgroup is the node itself, not a system container.
		if sc.cgroup != "" && sc.cgroup != "/" {
			out = append(out, sc)
		}
	}
	return out
}

// Run keeps pod volume stats up to date every VolumeStatsPeriod and takes a
// first CPU sample of the node and system containers, so that the first
// summary already has their usageNanoCores. It returns when ctx is done.
func (p *Provider) Run(ctx context.Context) {
	_, _ = p.nodeCPUAndMemory(false)
	if p.opts.VolumeStatsPeriod < 0 || p.pods == nil {
		klog.InfoS("Volume stats collection disabled")
		<-ctx.Done()
		return
	}
	p.volumes.run(ctx, p.opts.VolumeStatsPeriod, p.pods, p.volumeSources(), p.now)
}

// volumeSources is where the volume stats look for the pods' volumes.
func (p *Provider) volumeSources() volumeSources {
	return volumeSources{rootDir: p.opts.RootDir, claimPath: p.opts.ClaimPath, csi: p.opts.CSI}
}

// ListPodStats returns the pods' full stats, as Get's summary has them (upstream's
// ListPodStats): what the volume and container log metrics on /metrics report.
func (p *Provider) ListPodStats(ctx context.Context) ([]statsapi.PodStats, error) {
	rootFs, err := statFS(p.opts.RootDir, p.now())
	if err != nil {
		return nil, fmt.Errorf("failed to get rootFs stats: %w", err)
	}
	pods, err := p.listPodStats(ctx, true, rootFs)
	if err != nil {
		return nil, fmt.Errorf("failed to list pod stats: %w", err)
	}
	p.rates.prune(p.now())
	return pods, nil
}

// Get returns the full summary: node, system containers, pods with their
// containers, networks, volumes and ephemeral storage.
func (p *Provider) Get(ctx context.Context) (*statsapi.Summary, error) {
	return p.get(ctx, true)
}

// GetNode is the summary without its pods and without the node's network: the node's
// CPU, memory, filesystems, process limits and system containers, what the eviction
// manager observes every 10 s. It spares the runtime the per-container stats
// (ListContainerStats), which the eviction manager needs only once a threshold is met
// or a pod has a local storage limit to check, and nodelet the parsing of
// /proc/net/dev, which no eviction signal reads.
func (p *Provider) GetNode(ctx context.Context) (*statsapi.Summary, error) {
	return p.get(ctx, false)
}

func (p *Provider) get(ctx context.Context, withPods bool) (*statsapi.Summary, error) {
	node, err := p.nodeCPUAndMemory(true)
	if err != nil {
		return nil, fmt.Errorf("failed to get root cgroup stats: %w", err)
	}
	rootFs, err := statFS(p.opts.RootDir, p.now())
	if err != nil {
		return nil, fmt.Errorf("failed to get rootFs stats: %w", err)
	}
	node.Fs = rootFs.fullStats()
	node.Fs.Time = node.CPU.Time
	imageFs, err := p.imageFsStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to get imageFs stats: %w", err)
	}
	node.Runtime = &statsapi.RuntimeStats{ImageFs: imageFs, ContainerFs: imageFs}
	var pods []statsapi.PodStats
	if withPods {
		if pods, err = p.listPodStats(ctx, true, rootFs); err != nil {
			return nil, fmt.Errorf("failed to list pod stats: %w", err)
		}
	}
	node.Rlimit, err = readRlimit(p.opts.ProcRoot, p.now())
	if err != nil {
		return nil, fmt.Errorf("failed to get rlimit stats: %w", err)
	}
	if withPods {
		node.Network = p.nodeNetwork()
	}
	p.rates.prune(p.now())
	return &statsapi.Summary{Node: *node, Pods: pods}, nil
}

// GetCPUAndMemoryStats returns the summary's CPU and memory figures only:
// what /metrics/resource and ?only_cpu_and_memory=true serve.
func (p *Provider) GetCPUAndMemoryStats(ctx context.Context) (*statsapi.Summary, error) {
	node, err := p.nodeCPUAndMemory(false)
	if err != nil {
		return nil, fmt.Errorf("failed to get root cgroup stats: %w", err)
	}
	pods, err := p.listPodStats(ctx, false, fsInfo{})
	if err != nil {
		return nil, fmt.Errorf("failed to list pod stats: %w", err)
	}
	p.rates.prune(p.now())
	return &statsapi.Summary{Node: *node, Pods: pods}, nil
}

// imageFsStats reports the runtime's first image filesystem, with the size
// of the filesystem holding it, as upstream's CRI stats provider does.
func (p *Provider) imageFsStats(ctx context.Context) (*statsapi.FsStats, error) {
	resp, err := p.images.ImageFsInfo(ctx)
	if err != nil {
		return nil, err
	}
	if len(resp.GetImageFilesystems()) == 0 {
		return nil, fmt.Errorf("imageFs information is unavailable")
	}
	fs := resp.GetImageFilesystems()[0]
	out := &statsapi.FsStats{Time: metaTime(time.Unix(0, fs.Timestamp))}
	if fs.UsedBytes != nil {
		out.UsedBytes = ptrTo(fs.UsedBytes.Value)
	}
	if fs.InodesUsed != nil {
		out.InodesUsed = ptrTo(fs.InodesUsed.Value)
	}
	if mp := fs.GetFsId().GetMountpoint(); mp != "" {
		// An unknown mount point leaves the sizes out: a best-effort
		// partial answer, as upstream.
		if info, err := statFS(mp, p.now()); err == nil {
			out.AvailableBytes = ptrTo(info.available)
			out.CapacityBytes = ptrTo(info.capacity)
			out.InodesFree = ptrTo(info.ifree)
			out.Inodes = ptrTo(info.inodes)
		} else {
			klog.V(2).InfoS("Failed to get the info of the filesystem with mountpoint", "mountpoint", mp, "err", err)
		}
	}
	return out, nil
}

// podLogDir is <podLogsDir>/<namespace>_<name>_<uid>, the kubelet's layout.
func (p *Provider) podLogDir(ref statsapi.PodReference) string {
	return filepath.Join(p.opts.PodLogsDir, ref.Namespace+"_"+ref.Name+"_"+ref.UID)
}

// podEtcHostsPath is the /etc/hosts file the kubelet keeps for a pod.
func (p *Provider) podEtcHostsPath(uid string) string {
	return filepath.Join(p.opts.RootDir, "pods", uid, "etc-hosts")
}

func metaTime(t time.Time) metav1.Time { return metav1.NewTime(t) }

func ptrTo[T any](v T) *T { return &v }
