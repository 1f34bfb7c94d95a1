// Wiring of the node group (pkg/node): the container manager, node status and lease,
// the eviction manager and the OOM watcher.
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/node/cm"
	"github.com/nodelet/nodelet/pkg/node/deviceplugin"
	"github.com/nodelet/nodelet/pkg/node/eviction"
	"github.com/nodelet/nodelet/pkg/node/nodeshutdown"
	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/node/oomwatcher"
	"github.com/nodelet/nodelet/pkg/node/stats"
	"github.com/nodelet/nodelet/pkg/node/volumes"
	"github.com/nodelet/nodelet/pkg/pod/kubelet"
	"github.com/nodelet/nodelet/pkg/pod/pleg"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/imagegc"
)

// claimPath tells the stats provider where the volume manager mounted a pod's claim: the
// host path a container mounting the volume would be given.
func claimPath(vols *volumes.Manager) func(*v1.Pod, string) (string, bool) {
	return func(pod *v1.Pod, volume string) (string, bool) {
		probe := &v1.Container{Name: "volume-stats", VolumeMounts: []v1.VolumeMount{{Name: volume, MountPath: "/volume"}}}
		mounts, err := vols.MountsFor(pod, probe, nil)
		if err != nil || len(mounts) != 1 {
			return "", false
		}
		return mounts[0].HostPath, true
	}
}

// checkSystemdDriver refuses the systemd cgroup driver where no systemd runs to agree with
// it, unless the runtime itself reports that driver (it then owns the choice). Where
// systemd runs, the container manager has it make the .slice cgroups over its D-Bus API
// (see newContainerManager).
func checkSystemdDriver(driver string, fromRuntime, systemd bool) error {
	if driver != cri.CgroupDriverSystemd {
		return nil
	}
	if !systemd {
		if fromRuntime {
			return nil
		}
		return errors.New(`cgroupDriver "systemd" needs systemd as the init system, and it does not run here (no /run/systemd/system); set cgroupDriver: cgroupfs`)
	}
	return nil
}

// systemdRunning is sd_booted(): systemd is the init system.
func systemdRunning() bool {
	fi, err := os.Lstat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// newContainerManager builds the container manager from the configuration: the QoS
// cgroup hierarchy under cgroupRoot, sized to the node's allocatable resources. With the
// systemd driver on a host where systemd runs, the slices are systemd's transient units,
// made over the system bus as upstream's kubelet makes them; where the runtime reports
// the driver without systemd running, they are only named as slices.
func newContainerManager(opts *config.Options, nodeName string, recorder record.EventRecorder, node nodestatus.Options, machine func() (*nodestatus.MachineInfo, error)) (*cm.ContainerManager, error) {
	cfg := opts.Config
	info, err := machine()
	if err != nil {
		return nil, err
	}
	return cm.NewContainerManager(cm.Options{
		CgroupRoot: cfg.CgroupRoot, CgroupDriver: cfg.CgroupDriver, CgroupsPerQOS: *cfg.CgroupsPerQOS,
		EnforceNodeAllocatable: cfg.EnforceNodeAllocatable,
		Capacity:               nodestatus.MachineCapacity(info, false),
		KubeReserved:           node.KubeReserved, SystemReserved: node.SystemReserved,
		KubeReservedCgroup: cfg.KubeReservedCgroup, SystemReservedCgroup: cfg.SystemReservedCgroup,
		PodPidsLimit: *cfg.PodPidsLimit, CPUCFSQuota: *cfg.CPUCFSQuota, CPUCFSQuotaPeriod: cfg.CPUCFSQuotaPeriod.Duration,
		FailCgroupV1: *cfg.FailCgroupV1, MemoryQoS: memoryQoSGate(cfg),
		MemoryThrottlingFactor: derefFloat(cfg.MemoryThrottlingFactor, 0.9),
		Recorder:               recorder, NodeName: nodeName,
		Systemd: cfg.CgroupDriver == cm.DriverSystemd && systemdRunning(),
	})
}

// newNodeStatus builds the node status controller: in cluster mode it registers the node
// and keeps its status and lease; standalone it only describes the node for admission.
func newNodeStatus(o nodestatus.Options, machine func() (*nodestatus.MachineInfo, error), nodeIPs []net.IP, declared []string, state *kubelet.RuntimeState, runtime container.Runtime, rs internalapi.RuntimeService, recorder record.EventRecorder, podLEG pleg.PodLifecycleEventGenerator, pressure nodestatus.Pressure, shutdown *nodeshutdown.Manager, devices *deviceplugin.Manager, vols nodestatus.VolumesInUse, cl *cluster) (*nodestatus.Controller, error) {
	o.NodeIPs, o.DeclaredFeatures = nodeIPs, declared
	deps := nodestatus.Deps{
		Machine: machine, Runtime: nodestatus.JoinRuntime(state, runtime), CRIStatus: rs, Recorder: recorder,
		// Not ready while the node shuts down ("node is shutting down"), as upstream.
		ReadyChecks: []func() error{plegHealth(podLEG), shutdown.ShutdownStatus}, Pressure: pressure,
		DevicePlugins:          devices.GetCapacity,
		ResetExtendedResources: devices.ShouldResetExtendedResourceCapacity,
		Volumes:                vols,
	}
	if cl != nil {
		deps.Client, deps.HeartbeatClient = cl.clients.Kube, cl.clients.Heartbeat
		deps.OnHeartbeatFailure = cl.clients.OnHeartbeatFailure
	}
	return nodestatus.New(o, deps)
}

// plegHealth is the Ready check upstream adds for the PLEG.
func plegHealth(p pleg.PodLifecycleEventGenerator) func() error {
	return func() error {
		if ok, err := p.Healthy(); !ok {
			return fmt.Errorf("PLEG is not healthy: %w", err)
		}
		return nil
	}
}

// errNotReady answers the eviction manager before the loop and stats exist.
var errNotReady = errors.New("the pod loop is not started yet")

// lateBound holds what the eviction and node shutdown managers need but is built after
// them: the node status and admission need the managers first, and the loop needs both.
type lateBound struct {
	loop    *kubelet.Kubelet
	summary *stats.Provider
	images  *imagegc.Manager
	node    *nodestatus.Controller
}

// syncNodeStatus updates the node's status now, once its controller exists.
func (l *lateBound) syncNodeStatus() {
	if l.node != nil {
		l.node.SyncNow()
	}
}

func (l *lateBound) summaryOf(ctx context.Context) (*statsapi.Summary, error) {
	if l.summary == nil {
		return nil, errNotReady
	}
	return l.summary.Get(ctx)
}

func (l *lateBound) nodeSummaryOf(ctx context.Context) (*statsapi.Summary, error) {
	if l.summary == nil {
		return nil, errNotReady
	}
	return l.summary.GetNode(ctx)
}

func (l *lateBound) activePods() []*v1.Pod {
	if l.loop == nil {
		return nil
	}
	return l.loop.ActivePods()
}

func (l *lateBound) killPod(pod *v1.Pod, statusFn func(*v1.PodStatus), grace int64) error {
	if l.loop == nil {
		return errNotReady
	}
	return l.loop.KillPodNow(pod, statusFn, grace)
}

// podCgroupRoot is the cgroup holding every pod, for stats and eviction.
func podCgroupRoot(cfg *config.Options) string {
	return path.Join(cfg.Config.CgroupRoot, "kubepods")
}

func (l *lateBound) podCleanedUp(pod *v1.Pod) bool {
	return l.loop != nil && l.loop.PodResourcesReclaimed(pod)
}

// deleteUnusedContainers logs as upstream's container GC does, so that the log shows the
// dead containers reclaimed before the images.
func (l *lateBound) deleteUnusedContainers(ctx context.Context) error {
	if l.loop == nil {
		return errNotReady
	}
	klog.FromContext(ctx).Info("Attempting to delete unused containers")
	return l.loop.DeleteAllUnusedContainers(ctx)
}

func (l *lateBound) deleteUnusedImages(ctx context.Context) error {
	if l.images == nil {
		return errNotReady
	}
	return l.images.DeleteUnusedImages(ctx)
}

// newEvictionManager builds the eviction manager from the eviction settings; it acts once
// late is filled in and Start runs.
func newEvictionManager(opts *config.Options, nodeName string, recorder record.EventRecorder, images internalapi.ImageManagerService, late *lateBound) (*eviction.Manager, error) {
	cfg, err := eviction.ConfigFromKubelet(opts.Config, podCgroupRoot(opts))
	if err != nil {
		return nil, err
	}
	return eviction.NewManager(cfg, eviction.Deps{
		Summary: late.summaryOf, NodeSummary: late.nodeSummaryOf, ActivePods: late.activePods, KillPod: late.killPod,
		PodCleanedUp: late.podCleanedUp, DeleteAllUnusedContainers: late.deleteUnusedContainers,
		DeleteUnusedImages:  late.deleteUnusedImages,
		HasDedicatedImageFs: eviction.ImageFsOnOwnDevice(images, opts.RootDirectory),
		Recorder:            recorder, NodeRef: nodeRef(nodeName),
	})
}

// nodeRef is the reference of node events recorded before the Node's UID is known.
func nodeRef(nodeName string) *v1.ObjectReference {
	return &v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: nodeName}
}

// startOOMWatcher reports system OOM kills as node events; a kernel log nodelet cannot
// read (an unprivileged container) costs only those events.
func startOOMWatcher(ctx context.Context, recorder record.EventRecorder, nodeName string) {
	if err := oomwatcher.Start(ctx, recorder, nodeRef(nodeName)); err != nil {
		klog.InfoS("Not watching for system OOM kills", "err", err)
	}
}
