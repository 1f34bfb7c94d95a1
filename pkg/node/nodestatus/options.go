package nodestatus

import (
	"context"
	"fmt"
	"net"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/version"
)

// Options are the node's settings from the KubeletConfiguration and the command line.
type Options struct {
	NodeName string
	// Hostname is the kubernetes.io/hostname label and the Hostname address.
	Hostname string
	// NodeIPs is --node-ip: none, one, or a dual-stack pair; an unspecified address
	// ("0.0.0.0", "::") asks for detection in its family.
	NodeIPs            []net.IP
	NodeLabels         map[string]string
	RegisterWithTaints []v1.Taint
	RegisterNode       bool
	// ExternalCloudProvider is --cloud-provider=external: the node registers with the
	// uninitialized taint and lets the cloud controller set its addresses.
	ExternalCloudProvider bool
	ProviderID            string
	MaxPods               int
	PodsPerCore           int
	KubeReserved          v1.ResourceList
	SystemReserved        v1.ResourceList
	// EvictionHard is evictionHard as written ("memory.available": "100Mi", ...).
	EvictionHard                  map[string]string
	NodeStatusUpdateFrequency     time.Duration
	NodeStatusReportFrequency     time.Duration
	NodeStatusMaxImages           int32
	NodeLeaseDurationSeconds      int32
	KubeletPort                   int32
	RootDir                       string
	KubeletVersion                string
	LocalStorageCapacityIsolation bool
	// ControllerAttachDetach is enableControllerAttachDetach: the node asks the
	// attach/detach controller to attach its volumes.
	ControllerAttachDetach bool
	// DeclaredFeatures is status.declaredFeatures (upstream's NodeDeclaredFeatures):
	// the features this node says it implements, for the scheduler.
	DeclaredFeatures []string
}

// OptionsFromConfig takes the node's settings from nodelet's parsed configuration.
// nodeName and hostname are what the caller resolved from --hostname-override.
func OptionsFromConfig(o *config.Options, nodeName, hostname string) (Options, error) {
	cfg := o.Config
	nodeIPs, err := ParseNodeIPs(o.NodeIP)
	if err != nil {
		return Options{}, err
	}
	kubeReserved, err := parseResourceList(cfg.KubeReserved)
	if err != nil {
		return Options{}, fmt.Errorf("kubeReserved: %w", err)
	}
	systemReserved, err := parseResourceList(cfg.SystemReserved)
	if err != nil {
		return Options{}, fmt.Errorf("systemReserved: %w", err)
	}
	if systemReserved, err = reserveSystemCPUs(cfg.ReservedSystemCPUs, kubeReserved, systemReserved); err != nil {
		return Options{}, err
	}
	if _, err := hardEvictionThresholds(cfg.EvictionHard); err != nil {
		return Options{}, err
	}
	return Options{
		NodeName: nodeName, Hostname: hostname, NodeIPs: nodeIPs, NodeLabels: o.NodeLabels,
		RegisterWithTaints: cfg.RegisterWithTaints, RegisterNode: cfg.RegisterNode == nil || *cfg.RegisterNode,
		ProviderID: cfg.ProviderID, MaxPods: int(cfg.MaxPods), PodsPerCore: int(cfg.PodsPerCore),
		ExternalCloudProvider: o.CloudProvider == config.ExternalCloudProvider,
		KubeReserved:          kubeReserved, SystemReserved: systemReserved, EvictionHard: cfg.EvictionHard,
		NodeStatusUpdateFrequency: cfg.NodeStatusUpdateFrequency.Duration,
		NodeStatusReportFrequency: cfg.NodeStatusReportFrequency.Duration,
		NodeStatusMaxImages:       derefOr(cfg.NodeStatusMaxImages, 50),
		NodeLeaseDurationSeconds:  cfg.NodeLeaseDurationSeconds,
		KubeletPort:               cfg.Port, RootDir: o.RootDirectory, KubeletVersion: version.KubeletVersion,
		LocalStorageCapacityIsolation: derefOr(cfg.LocalStorageCapacityIsolation, true),
		ControllerAttachDetach:        derefOr(cfg.EnableControllerAttachDetach, true),
	}, nil
}

func derefOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func parseResourceList(m map[string]string) (v1.ResourceList, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := v1.ResourceList{}
	for k, s := range m {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", k, s, err)
		}
		out[v1.ResourceName(k)] = q
	}
	return out, nil
}

// withDefaults fills the settings a caller may leave zero with upstream's defaults.
func (o Options) withDefaults() Options {
	if o.Hostname == "" {
		o.Hostname = o.NodeName
	}
	if o.NodeStatusUpdateFrequency == 0 {
		o.NodeStatusUpdateFrequency = 10 * time.Second
	}
	if o.NodeStatusReportFrequency == 0 {
		o.NodeStatusReportFrequency = 5 * time.Minute
	}
	if o.NodeLeaseDurationSeconds == 0 {
		o.NodeLeaseDurationSeconds = 40
	}
	if o.KubeletVersion == "" {
		o.KubeletVersion = version.KubeletVersion
	}
	return o
}

// RuntimeHealth is the runtime's readiness (*kubelet.RuntimeState): nil while the
// runtime and its network report ready; their text becomes Ready's message otherwise.
type RuntimeHealth interface {
	RuntimeErr() error
	NetworkErr() error
}

// RuntimeInfo is what node status asks the runtime manager (*kuberuntime.Manager).
type RuntimeInfo interface {
	// Type is the runtime's name, e.g. "containerd".
	Type() string
	// Version is the runtime's own version, e.g. "1.7.24".
	Version(ctx context.Context) (string, error)
	ListImages(ctx context.Context) ([]container.Image, error)
}

// Runtime is everything node status needs from the container runtime.
type Runtime interface {
	RuntimeHealth
	RuntimeInfo
}

// JoinRuntime makes one Runtime of the runtime's health and its manager.
func JoinRuntime(health RuntimeHealth, info RuntimeInfo) Runtime {
	return struct {
		RuntimeHealth
		RuntimeInfo
	}{health, info}
}

// CRIStatus is the CRI runtime service's Status call (internalapi.RuntimeService
// satisfies it); its runtime handlers and features go into node status.
type CRIStatus interface {
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
}

// Pressure says whether eviction sees the node under pressure.
type Pressure interface {
	MemoryPressure() bool
	DiskPressure() bool
	PIDPressure() bool
}

// Deps are the controller's collaborators. Only Runtime is required.
type Deps struct {
	// Client is nil in standalone mode: Node() then always answers InitialNode.
	Client kubernetes.Interface
	// HeartbeatClient sends status patches and lease renewals; defaults to Client.
	// Upstream gives it a timeout of min(nodeStatusUpdateFrequency, lease duration).
	HeartbeatClient kubernetes.Interface
	Runtime         Runtime
	// CRIStatus, when set, provides status.runtimeHandlers and status.features.
	CRIStatus CRIStatus
	// Pressure is nil until eviction exists: never under pressure.
	Pressure Pressure
	// DevicePlugins, when set, gives the device plugins' extended resources: capacity
	// (every device), allocatable (healthy ones) and the resources whose plugin went
	// away for good (capacity 0 from then on, as upstream marks them).
	DevicePlugins func() (capacity, allocatable v1.ResourceList, removed []string)
	// ResetExtendedResources, when set, says at registration whether an existing Node's
	// extended resources are to be zeroed (the device plugins' checkpoint is gone: the
	// node was re-created); upstream's ShouldResetExtendedResourceCapacity.
	ResetExtendedResources func() bool
	// Volumes, when set, reports the node's attachable volumes in use and learns which
	// of them the API server has recorded.
	Volumes VolumesInUse
	// ReadyChecks are further reasons for Ready=False (PLEG health, ...): each
	// non-nil error is listed in the condition's message after the runtime's.
	ReadyChecks []func() error
	Recorder    record.EventRecorder
	Clock       clock.Clock
	// Machine describes the host; defaults to ReadMachineInfo(RootDir), read once.
	Machine func() (*MachineInfo, error)
	// OnHeartbeatFailure runs when status or lease updates fail repeatedly (upstream
	// closes the client's connections so the next try dials afresh).
	OnHeartbeatFailure func()
	// UpdatePodCIDR, when set, is told the node's spec.podCIDRs ("," joined) when they
	// change, as upstream passes them to the runtime.
	UpdatePodCIDR func(ctx context.Context, cidr string) error
	// Startup records the kubelet_node_startup_* durations; nil is the process's
	// (metrics.NodeStartup).
	Startup *metrics.NodeStartupTracker
}

// VolumesInUse is the volume manager's side of status.volumesInUse (upstream's
// GetVolumesInUse and MarkVolumesAsReportedInUse).
type VolumesInUse interface {
	// VolumesInUse lists the attachable volumes pods need or that are still mounted.
	VolumesInUse() []v1.UniqueVolumeName
	// MarkVolumesAsReportedInUse is given the node's status.volumesInUse as the API
	// server has it after each status sync.
	MarkVolumesAsReportedInUse(names []v1.UniqueVolumeName)
}

// reserveSystemCPUs: with reservedSystemCPUs set, those CPUs are what the system and the
// kubelet keep, so they replace kubeReserved's and systemReserved's cpu (upstream's
// --reserved-cpus rule): systemReserved cpu becomes their number.
func reserveSystemCPUs(list string, kubeReserved, systemReserved v1.ResourceList) (v1.ResourceList, error) {
	cpus, err := cpuset.Parse(list)
	if err != nil {
		return nil, fmt.Errorf("unable to parse reservedSystemCPUs %q: %w", list, err)
	}
	if cpus.Size() == 0 {
		return systemReserved, nil
	}
	klog.InfoS("Option --reserved-cpus is specified, it will overwrite the cpu setting in KubeReserved and SystemReserved", "kubeReserved", kubeReserved, "systemReserved", systemReserved)
	delete(kubeReserved, v1.ResourceCPU)
	if systemReserved == nil {
		systemReserved = v1.ResourceList{}
	}
	systemReserved[v1.ResourceCPU] = *resource.NewQuantity(int64(cpus.Size()), resource.DecimalSI)
	return systemReserved, nil
}
