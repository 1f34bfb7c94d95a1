package cm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/qos"
)

// enforceNodeAllocatable keys.
const (
	EnforcePods                       = "pods"
	EnforceSystemReserved             = "system-reserved"
	EnforceKubeReserved               = "kube-reserved"
	EnforceSystemReservedCompressible = "system-reserved-compressible"
	EnforceKubeReservedCompressible   = "kube-reserved-compressible"
)

// TieredReservation is the memoryReservationPolicy that protects pods' memory requests
// with memory.min (Guaranteed) and memory.low (Burstable) on cgroup v2.
const TieredReservation = "TieredReservation"

// Event reasons, as upstream's kubelet records them on the node.
const (
	reasonNodeAllocatableEnforced = "NodeAllocatableEnforced"
	reasonFailedNodeAllocatable   = "FailedNodeAllocatableEnforcement"
)

// qosUpdatePeriod is how often the QoS-level cgroups are brought up to date anyway.
const qosUpdatePeriod = time.Minute

// Options configure the container manager; the names are the KubeletConfiguration's.
type Options struct {
	CgroupRoot             string // "" is "/"
	CgroupDriver           string // DriverCgroupfs ("" too) or DriverSystemd
	CgroupsPerQOS          bool
	EnforceNodeAllocatable []string
	// Capacity is the machine's: cpu, memory, hugepages-<size>. The process-ID
	// capacity ("pid") is read from /proc when absent.
	Capacity             v1.ResourceList
	KubeReserved         v1.ResourceList
	SystemReserved       v1.ResourceList
	KubeReservedCgroup   string
	SystemReservedCgroup string
	PodPidsLimit         int64 // <= 0: no limit
	CPUCFSQuota          bool
	CPUCFSQuotaPeriod    time.Duration // 0 is 100ms
	FailCgroupV1         bool
	// MemoryQoS is the MemoryQoS feature gate; it takes effect on cgroup v2 only.
	MemoryQoS               bool
	MemoryReservationPolicy string  // "None" or TieredReservation
	MemoryThrottlingFactor  float64 // 0 is 0.9
	// Recorder and NodeName report node allocatable enforcement on the node; Recorder
	// may be nil.
	Recorder record.EventRecorder
	NodeName string
	// CgroupFS is where cgroups are mounted; "" is /sys/fs/cgroup (tests use a tree of
	// plain files).
	CgroupFS string
	// Systemd, with CgroupDriver systemd, has systemd create, limit and remove the
	// slices as transient units over its D-Bus API, as upstream's kubelet does; nodelet
	// then writes what systemd has no property for through cgroupfs. Set it only where
	// systemd is the init system.
	Systemd bool
	// SystemdBus is the D-Bus address systemd is reached at; "" is the system bus
	// (DBUS_SYSTEM_BUS_ADDRESS, else /run/dbus/system_bus_socket; as root, systemd's
	// private socket when the bus does not answer).
	SystemdBus string

	hugePagesDir string // "" is /sys/kernel/mm/hugepages
}

// ContainerManager owns nodelet's cgroups, as upstream's container manager does:
// <cgroupRoot>/kubepods limited to node allocatable, the burstable and besteffort QoS
// cgroups under it, and a cgroup per pod (pod<uid>, Guaranteed pods directly under
// kubepods) limited to the pod's resources. Runtimes create the containers' cgroups
// under the pod's (Parent).
type ContainerManager struct {
	opts      Options
	fs        *cgroupFS     // nil: no cgroups are managed
	units     *systemdUnits // nil: cgroups are made through cgroupfs alone
	names     naming
	root      cgroupName // the node allocatable cgroup: cgroupRoot[/kubepods]
	cpuPeriod uint64     // µs
	capacity  v1.ResourceList

	mu         sync.Mutex // serializes QoS-level updates
	activePods func() []*v1.Pod
}

// PodCgroups is the name callers used when only pod cgroups were managed.
type PodCgroups = ContainerManager

// NewPodCgroups returns a manager with default options that names, lists and removes
// pod cgroups under cgroupRoot, without validating the host; with cgroupsPerQOS false
// pods get no parent cgroup.
func NewPodCgroups(cgroupRoot string, cgroupsPerQOS bool) *PodCgroups {
	m, err := newManager(Options{CgroupRoot: cgroupRoot, CgroupsPerQOS: cgroupsPerQOS})
	if err != nil {
		klog.V(2).InfoS("Pod cgroups are not managed", "err", err)
	}
	return m
}

// NewContainerManager inspects the cgroup filesystem (cgroup v1 or v2) and checks the
// configuration against it: failCgroupV1 on a v1 host, and a cgroupRoot that must
// exist when cgroupsPerQOS is on.
func NewContainerManager(opts Options) (*ContainerManager, error) {
	m, err := newManager(opts)
	if err != nil {
		return nil, err
	}
	if !m.fs.unified && opts.FailCgroupV1 {
		return nil, errors.New("kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is unsupported and will be removed in a future release")
	}
	if opts.CgroupsPerQOS {
		root := parseCgroupfs(m.opts.CgroupRoot)
		if err := m.fs.validate(m.names.path(root), root); err != nil {
			return nil, fmt.Errorf("invalid configuration: %w", err)
		}
	}
	return m, nil
}

// newManager fills in defaults and opens the cgroup filesystem; on error the manager
// is still usable for naming.
func newManager(opts Options) (*ContainerManager, error) {
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = "/"
	}
	if opts.CgroupFS == "" {
		opts.CgroupFS = DefaultCgroupFS
	}
	if opts.hugePagesDir == "" {
		opts.hugePagesDir = defaultHugePages
	}
	if opts.MemoryThrottlingFactor == 0 {
		opts.MemoryThrottlingFactor = 0.9
	}
	period := opts.CPUCFSQuotaPeriod
	if period <= 0 {
		period = 100 * time.Millisecond
	}
	m := &ContainerManager{
		opts:      opts,
		names:     naming{systemd: opts.CgroupDriver == DriverSystemd},
		root:      parseCgroupfs(opts.CgroupRoot),
		cpuPeriod: uint64(period / time.Microsecond),
		capacity:  withPIDCapacity(opts.Capacity),
	}
	if opts.CgroupsPerQOS {
		m.root = m.root.child(kubepodsName)
	}
	var err error
	m.fs, err = openCgroupFS(opts.CgroupFS, opts.hugePagesDir)
	if err == nil && opts.Systemd && m.names.systemd {
		m.units = newSystemdUnits(opts.SystemdBus, m.fs.unified)
	}
	return m, err
}

// withPIDCapacity adds the node's process-ID capacity: the smaller of kernel.pid_max
// and kernel.threads-max.
func withPIDCapacity(capacity v1.ResourceList) v1.ResourceList {
	out := capacity.DeepCopy()
	if out == nil {
		out = v1.ResourceList{}
	}
	if _, ok := out[pidResource]; ok {
		return out
	}
	limit := int64(-1)
	for _, f := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && (limit < 0 || v < limit) {
			limit = v
		}
	}
	if limit >= 0 {
		out[pidResource] = *resource.NewQuantity(limit, resource.DecimalSI)
	}
	return out
}

func (m *ContainerManager) perQOS() bool { return m.fs != nil && m.opts.CgroupsPerQOS }

// CgroupV2 says whether the host uses the unified cgroup hierarchy.
func (m *ContainerManager) CgroupV2() bool { return m.fs != nil && m.fs.unified }

// PodCgroupRoot is the cgroupfs path of the cgroup all pods live under ("/kubepods",
// "/kubepods.slice" with systemd), "" without per-QoS cgroups.
func (m *ContainerManager) PodCgroupRoot() string {
	if !m.opts.CgroupsPerQOS {
		return ""
	}
	return m.names.path(m.root)
}

func (m *ContainerManager) qosCgroup(class v1.PodQOSClass) cgroupName {
	switch class {
	case v1.PodQOSBurstable:
		return m.root.child(burstableName)
	case v1.PodQOSBestEffort:
		return m.root.child(bestEffortName)
	default:
		return m.root
	}
}

var qosClasses = []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort}

func (m *ContainerManager) podCgroup(pod *v1.Pod) cgroupName {
	return m.qosCgroup(qos.GetPodQOS(pod)).child(podCgroupPrefix + string(pod.UID))
}

// Parent is the cgroup parent for a pod's sandbox and containers (the pod cgroup's
// cgroupfs path), "" without per-QoS cgroups.
func (m *ContainerManager) Parent(pod *v1.Pod) string {
	if !m.opts.CgroupsPerQOS {
		return ""
	}
	return m.names.path(m.podCgroup(pod))
}

// PodExists says whether the pod's cgroup exists (always true without per-QoS cgroups).
func (m *ContainerManager) PodExists(pod *v1.Pod) bool {
	if !m.perQOS() {
		return true
	}
	name := m.podCgroup(pod)
	return m.fs.validate(m.names.path(name), name) == nil
}

// Start creates or updates the top-level cgroups: kubepods (node allocatable when
// enforceNodeAllocatable has "pods", capacity otherwise), the QoS cgroups, and the
// system- and kube-reserved limits when enforced. activePods lists the pods that count
// towards the QoS cgroups; they are updated now and every minute until ctx ends.
func (m *ContainerManager) Start(ctx context.Context, activePods func() []*v1.Pod) error {
	if m.fs == nil {
		return errors.New("cgroups are not available")
	}
	m.mu.Lock()
	m.activePods = activePods
	m.mu.Unlock()
	if m.units != nil {
		context.AfterFunc(ctx, m.units.close)
	}
	if m.perQOS() {
		if err := m.createNodeAllocatableCgroup(); err != nil {
			return err
		}
		if err := m.startQOSCgroups(); err != nil {
			return fmt.Errorf("failed to initialize top level QOS containers: %v", err)
		}
		go m.updateQOSPeriodically(ctx)
	}
	return m.enforceNodeAllocatable(ctx)
}

// nodeAllocatable is what kubepods is limited to: capacity minus the system and kube
// reservations when "pods" is enforced, capacity otherwise. Eviction thresholds are
// not subtracted: pods may use that memory until the eviction manager acts.
func (m *ContainerManager) nodeAllocatable() v1.ResourceList {
	if m.opts.CgroupsPerQOS && slices.Contains(m.opts.EnforceNodeAllocatable, EnforcePods) {
		return subtractReserved(m.capacity, m.opts.SystemReserved, m.opts.KubeReserved)
	}
	return m.capacity
}

// createNodeAllocatableCgroup creates kubepods; enforceNodeAllocatable limits it.
func (m *ContainerManager) createNodeAllocatableCgroup() error {
	if err := m.makeCgroup(m.root); err != nil {
		klog.ErrorS(err, "Failed to create cgroup", "cgroupName", m.root)
		return err
	}
	return nil
}

// startQOSCgroups creates or updates burstable and besteffort: besteffort gets the
// minimum CPU shares, both unbounded huge pages, and on cgroup v2 memory protection
// left over from an earlier memory QoS setting is reset.
func (m *ContainerManager) startQOSCgroups() error {
	minShares := uint64(MinShares)
	for _, class := range []v1.PodQOSClass{v1.PodQOSBurstable, v1.PodQOSBestEffort} {
		name := m.qosCgroup(class)
		cfg := &ResourceConfig{HugePageLimit: m.fs.unboundedHugePageLimits()}
		if class == v1.PodQOSBestEffort {
			cfg.CPUShares = &minShares
		}
		if m.fs.unified && !m.tieredReservation() && class == v1.PodQOSBurstable {
			cfg.Unified = map[string]string{memoryLow: "0"}
		}
		if err := m.makeCgroup(name); err != nil {
			return fmt.Errorf("failed to create top level %v QOS cgroup : %v", class, err)
		}
		if err := m.setCgroup(name, cfg); err != nil {
			return fmt.Errorf("failed to update top level %v QOS cgroup : %v", class, err)
		}
	}
	if m.fs.unified && !m.tieredReservation() {
		reset := &ResourceConfig{Unified: map[string]string{memoryMin: "0", memoryLow: "0"}}
		if err := m.setCgroup(m.root, reset); err != nil {
			klog.ErrorS(err, "Failed to reset memory protection on root cgroup")
		}
	}
	return m.UpdateQOSCgroups()
}

func (m *ContainerManager) updateQOSPeriodically(ctx context.Context) {
	t := time.NewTicker(qosUpdatePeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := m.UpdateQOSCgroups(); err != nil {
				klog.InfoS("Failed to reserve QoS requests", "err", err)
			}
		}
	}
}

func (m *ContainerManager) memoryQoS() bool { return m.opts.MemoryQoS && m.CgroupV2() }

func (m *ContainerManager) tieredReservation() bool {
	return m.memoryQoS() && m.opts.MemoryReservationPolicy == TieredReservation
}

// UpdateQOSCgroups brings the QoS cgroups up to date with the active pods: burstable's
// CPU shares are the sum of its pods' CPU requests, besteffort keeps the minimum, huge
// pages stay unbounded and, with tiered memory reservation, the pods' memory requests
// are protected. Call it when pods start or stop.
func (m *ContainerManager) UpdateQOSCgroups() error {
	if !m.perQOS() {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var pods []*v1.Pod
	if m.activePods != nil {
		pods = m.activePods()
	}
	var burstableCPU, guaranteedMemory, burstableMemory int64
	for _, pod := range pods {
		switch qos.GetPodQOS(pod) {
		case v1.PodQOSBurstable:
			requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
			burstableCPU += requests.Cpu().MilliValue()
			burstableMemory += requests.Memory().Value()
		case v1.PodQOSGuaranteed:
			guaranteedMemory += memoryRequest(pod)
		}
	}
	burstableShares, minShares := MilliCPUToShares(burstableCPU), uint64(MinShares)
	// kubepods keeps its node allocatable huge page limits. (Upstream lifts them here as
	// if it were a QoS cgroup, a minute after enforcing them.)
	hugePages := m.fs.unboundedHugePageLimits()
	root := &ResourceConfig{}
	burstable := &ResourceConfig{CPUShares: &burstableShares, HugePageLimit: hugePages}
	bestEffort := &ResourceConfig{CPUShares: &minShares, HugePageLimit: hugePages}
	if m.tieredReservation() {
		root.Unified = map[string]string{
			memoryMin: strconv.FormatInt(guaranteedMemory+burstableMemory, 10),
			memoryLow: strconv.FormatInt(burstableMemory, 10),
		}
		burstable.Unified = map[string]string{memoryLow: strconv.FormatInt(burstableMemory, 10)}
	}
	return errors.Join(
		m.setCgroup(m.root, root),
		m.setCgroup(m.qosCgroup(v1.PodQOSBurstable), burstable),
		m.setCgroup(m.qosCgroup(v1.PodQOSBestEffort), bestEffort),
	)
}

// enforceNodeAllocatable limits kubepods (retrying every minute while pods use more
// than the new limit, until evictions bring them under it) and the reserved cgroups
// enforceNodeAllocatable names.
func (m *ContainerManager) enforceNodeAllocatable(ctx context.Context) error {
	if len(m.root) > 0 {
		cfg := configFromList(m.nodeAllocatable(), false)
		if m.fs.unified && !m.opts.MemoryQoS {
			cfg.Unified = map[string]string{memoryMin: "0", memoryLow: "0"}
		}
		if !m.setNodeAllocatable(cfg) {
			go m.retryNodeAllocatable(ctx, cfg)
		}
	}
	reserved := []struct {
		key, cgroup, what string
		list              v1.ResourceList
		compressible      bool
		done              string
	}{
		{EnforceSystemReserved, m.opts.SystemReservedCgroup, "System Reserved", m.opts.SystemReserved, false, "system reserved"},
		{EnforceKubeReserved, m.opts.KubeReservedCgroup, "Kube Reserved", m.opts.KubeReserved, false, "kube reserved"},
		{EnforceSystemReservedCompressible, m.opts.SystemReservedCgroup, "System Reserved Compressible", m.opts.SystemReserved, true, "system reserved"},
		{EnforceKubeReservedCompressible, m.opts.KubeReservedCgroup, "Kube Reserved Compressible", m.opts.KubeReserved, true, "kube reserved"},
	}
	for _, r := range reserved {
		if !slices.Contains(m.opts.EnforceNodeAllocatable, r.key) {
			continue
		}
		klog.V(2).InfoS("Enforcing "+r.done+" on cgroup", "cgroupName", r.cgroup, "limits", r.list)
		if err := m.enforceReserved(r.cgroup, r.list, r.compressible); err != nil {
			msg := fmt.Sprintf("Failed to enforce %s Cgroup Limits on %q: %v", r.what, r.cgroup, err)
			m.event(v1.EventTypeWarning, reasonFailedNodeAllocatable, msg)
			return errors.New(msg)
		}
		m.event(v1.EventTypeNormal, reasonNodeAllocatableEnforced, fmt.Sprintf("Updated limits on %s cgroup %v", r.done, r.cgroup))
	}
	return nil
}

func (m *ContainerManager) setNodeAllocatable(cfg *ResourceConfig) bool {
	if err := m.setCgroup(m.root, cfg); err != nil {
		m.event(v1.EventTypeWarning, reasonFailedNodeAllocatable, fmt.Sprintf("Failed to update Node Allocatable Limits %q: %v", []string(m.root), err))
		return false
	}
	m.event(v1.EventTypeNormal, reasonNodeAllocatableEnforced, "Updated Node Allocatable limit across pods")
	return true
}

func (m *ContainerManager) retryNodeAllocatable(ctx context.Context, cfg *ResourceConfig) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Minute):
		}
		if m.setNodeAllocatable(cfg) {
			return
		}
	}
}

// enforceReserved limits an existing reserved cgroup (named as the driver names it)
// to a reservation.
func (m *ContainerManager) enforceReserved(cgroup string, list v1.ResourceList, compressibleOnly bool) error {
	name := m.names.parse(cgroup)
	if list == nil {
		return fmt.Errorf("%q cgroup is not configured properly", []string(name))
	}
	cfg := configFromList(list, compressibleOnly)
	if m.memoryQoS() && cfg.Memory != nil {
		cfg.Unified = map[string]string{memoryMin: strconv.FormatInt(*cfg.Memory, 10)}
	}
	if err := m.fs.validate(m.names.path(name), name); err != nil {
		return err
	}
	return m.setCgroup(name, cfg)
}

func (m *ContainerManager) event(eventType, reason, message string) {
	if m.opts.Recorder == nil {
		klog.InfoS("Node allocatable enforcement", "type", eventType, "reason", reason, "message", message)
		return
	}
	ref := &v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: m.opts.NodeName}
	m.opts.Recorder.Event(ref, eventType, reason, message)
}

// PodResourceConfig is the configuration of the pod's cgroup: ResourceConfigForPod
// with this node's CFS settings, podPidsLimit and, with memory QoS on cgroup v2, the
// pod's memory.high and (tiered reservation) memory.min or memory.low.
func (m *ContainerManager) PodResourceConfig(pod *v1.Pod) *ResourceConfig {
	cfg := ResourceConfigForPod(pod, m.opts.CPUCFSQuota, m.cpuPeriod)
	if m.opts.PodPidsLimit > 0 {
		limit := m.opts.PodPidsLimit
		cfg.PidsLimit = &limit
	}
	if !m.memoryQoS() {
		return cfg
	}
	unified := map[string]string{}
	if request := memoryRequest(pod); m.tieredReservation() && request > 0 {
		key := memoryLow
		if qos.GetPodQOS(pod) == v1.PodQOSGuaranteed {
			key = memoryMin
		}
		unified[key] = strconv.FormatInt(request, 10)
	}
	if high := podMemoryHigh(pod, m.opts.MemoryThrottlingFactor); high != "" {
		unified[memoryHigh] = high
	}
	if len(unified) > 0 {
		cfg.Unified = unified
	}
	return cfg
}

// EnsurePod creates the pod's cgroup with the pod's limits if it does not exist yet,
// updating the QoS cgroups first (the new pod counts there). Call it before the
// sandbox is created; an existing cgroup is left as it is (resizes change it).
func (m *ContainerManager) EnsurePod(pod *v1.Pod) error {
	if !m.perQOS() || m.PodExists(pod) {
		return nil
	}
	if err := m.UpdateQOSCgroups(); err != nil {
		klog.V(2).InfoS("Failed to update QoS cgroups while syncing pod", "pod", klog.KObj(pod), "err", err)
	}
	name := m.podCgroup(pod)
	if err := m.makeCgroup(name); err != nil {
		return fmt.Errorf("failed to create container for %v : %v", []string(name), err)
	}
	if err := m.setCgroup(name, m.PodResourceConfig(pod)); err != nil {
		klog.ErrorS(err, "Failed to set the limits of a pod cgroup", "pod", klog.KObj(pod), "cgroup", m.names.path(name))
	}
	return nil
}

// CurrentPodResources reads the CPU and memory settings of the pod's cgroup.
func (m *ContainerManager) CurrentPodResources(pod *v1.Pod) (*ResourceConfig, error) {
	if !m.perQOS() {
		return nil, errors.New("pod cgroups are not managed")
	}
	return m.fs.readCPUAndMemory(m.names.path(m.podCgroup(pod)))
}

// SetPodResources writes cfg's non-nil values to the pod's cgroup.
func (m *ContainerManager) SetPodResources(pod *v1.Pod, cfg *ResourceConfig) error {
	if !m.perQOS() {
		return nil
	}
	return m.setCgroup(m.podCgroup(pod), cfg)
}

// ResizePod moves the pod's cgroup to the pod's (newly allocated) resources around
// updateContainers, which resizes the containers for one resource, in upstream's
// order: memory, then CPU; for each, a pod limit or CPU request that grows is written
// before the containers are updated and one that shrinks after. A memory limit below
// the pod's current usage is refused before anything changes. A limit the pod no
// longer sets is kept (as upstream: limits are not removed in place).
func (m *ContainerManager) ResizePod(pod *v1.Pod, updateContainers func(v1.ResourceName) error) error {
	if !m.perQOS() {
		return errors.Join(updateContainers(v1.ResourceMemory), updateContainers(v1.ResourceCPU))
	}
	name := m.podCgroup(pod)
	p := m.names.path(name)
	want := m.PodResourceConfig(pod)
	cur, err := m.fs.readCPUAndMemory(p)
	if err != nil {
		return fmt.Errorf("unable to get pod cgroup config for pod %q: %w", klog.KObj(pod), err)
	}
	memory := *orDefault(want.Memory, cur.Memory)
	if memory < *cur.Memory {
		usage, err := m.fs.memoryUsage(p)
		if err != nil {
			return fmt.Errorf("unable to read memory usage for pod %q", klog.KObj(pod))
		}
		if usage >= memory {
			return fmt.Errorf("cannot decrease memory limits: attempting to set pod memory limit (%d) below current usage (%d)", memory, usage)
		}
	}
	memoryStep := resizeStep{cfg: &ResourceConfig{Memory: &memory, Unified: want.Unified}, order: compare(memory, *cur.Memory)}
	if err := m.resize(name, v1.ResourceMemory, updateContainers, memoryStep, resizeStep{}); err != nil {
		return err
	}
	quota := *orDefault(want.CPUQuota, cur.CPUQuota)
	limitStep := resizeStep{
		cfg:   &ResourceConfig{CPUQuota: &quota, CPUPeriod: orDefault(want.CPUPeriod, cur.CPUPeriod)},
		order: compare(unlimitedQuotaAsMax(quota), unlimitedQuotaAsMax(*cur.CPUQuota)),
	}
	requestStep := resizeStep{cfg: &ResourceConfig{CPUShares: want.CPUShares}, order: m.compareShares(*want.CPUShares, *cur.CPUShares)}
	return m.resize(name, v1.ResourceCPU, updateContainers, limitStep, requestStep)
}

// resizeStep is one pod cgroup write of a resize and whether it grows (>0) or shrinks (<0).
type resizeStep struct {
	cfg   *ResourceConfig
	order int
}

// resize grows limits before requests and shrinks requests before limits, keeping
// requests within limits throughout, with the containers updated in between.
func (m *ContainerManager) resize(cgroup cgroupName, name v1.ResourceName, updateContainers func(v1.ResourceName) error, limit, request resizeStep) error {
	for _, s := range []resizeStep{limit, request} {
		if s.order > 0 {
			if err := m.setCgroup(cgroup, s.cfg); err != nil {
				return err
			}
		}
	}
	if err := updateContainers(name); err != nil {
		return err
	}
	for _, s := range []resizeStep{request, limit} {
		if s.order < 0 {
			if err := m.setCgroup(cgroup, s.cfg); err != nil {
				return err
			}
		}
	}
	return nil
}

// compareShares compares CPU shares as the cgroup stores them: as weights on v2.
func (m *ContainerManager) compareShares(a, b uint64) int {
	if m.fs.unified {
		a, b = CPUSharesToWeight(a), CPUSharesToWeight(b)
	}
	return compare(a, b)
}

func compare[T int64 | uint64](a, b T) int {
	switch {
	case a > b:
		return 1
	case a < b:
		return -1
	}
	return 0
}

func unlimitedQuotaAsMax(q int64) int64 {
	if q < 0 {
		return 1<<63 - 1
	}
	return q
}

func orDefault[T any](v, def *T) *T {
	if v != nil {
		return v
	}
	return def
}

// Pods lists the UIDs that have a pod cgroup in any hierarchy.
func (m *ContainerManager) Pods() map[types.UID]bool {
	found := map[types.UID]bool{}
	if !m.perQOS() {
		return found
	}
	for _, class := range qosClasses {
		for base := range m.fs.listChildren(m.names.path(m.qosCgroup(class))) {
			if uid, ok := m.names.podUID(base); ok {
				found[uid] = true
			}
		}
	}
	return found
}

// Remove kills whatever still runs in a pod's cgroup and deletes the cgroup (and its
// children) in every hierarchy. It fails while processes remain, which is the
// caller's cue to retry later.
func (m *ContainerManager) Remove(uid types.UID) error {
	if !m.perQOS() {
		return nil
	}
	if uid == "" || strings.Contains(string(uid), "/") {
		return fmt.Errorf("invalid pod UID %q", uid)
	}
	var errs []error
	for _, class := range qosClasses {
		errs = append(errs, m.destroyCgroup(m.qosCgroup(class).child(podCgroupPrefix+string(uid))))
	}
	return errors.Join(errs...)
}
