package app

import (
	"path/filepath"

	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/node/cm"
	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/pkg/runtime/userns"
)

// newContainerManager builds the container manager from the configuration: the QoS
// cgroup hierarchy under cgroupRoot, sized to the node's allocatable resources.
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
	})
}

// memoryQoSGate is the MemoryQoS feature gate, beta and on by default.
func memoryQoSGate(cfg *kubeletconfig.KubeletConfiguration) bool {
	on, ok := cfg.FeatureGates["MemoryQoS"]
	return !ok || on
}

// containerMemoryQoS is the containers' memory QoS: on cgroup v2 with the MemoryQoS gate,
// memory.high below the node's allocatable memory (capacity less the kube and system
// reservations, as upstream) for containers without a memory limit; nil otherwise.
func containerMemoryQoS(cfg *kubeletconfig.KubeletConfiguration, host criconfig.Host, node nodestatus.Options, machineMemory int64) *criconfig.MemoryQoS {
	if !host.CgroupV2 || !memoryQoSGate(cfg) {
		return nil
	}
	allocatable := machineMemory - node.KubeReserved.Memory().Value() - node.SystemReserved.Memory().Value()
	// memoryReservationPolicy is not implemented: None, as for the pod cgroups.
	return &criconfig.MemoryQoS{ThrottlingFactor: derefFloat(cfg.MemoryThrottlingFactor, 0.9), AllocatableMemory: max(allocatable, 0)}
}

// singleProcessOOMKill is the singleProcessOOMKill setting (cgroup v2; default false:
// an OOM kills the whole container).
func singleProcessOOMKill(cfg *kubeletconfig.KubeletConfiguration) bool {
	return cfg.SingleProcessOOMKill != nil && *cfg.SingleProcessOOMKill
}

func derefFloat(p *float64, def float64) float64 {
	if p == nil {
		return def
	}
	return *p
}

// newUserNamespaces hands out the ID blocks of pods with hostUsers: false, from the
// kubelet user's subordinate IDs or the default range, where the runtime supports them;
// the blocks of running pods are read back from their directories.
func newUserNamespaces(opts *config.Options, rs internalapi.RuntimeService) (*userns.Manager, error) {
	cfg := opts.Config
	var idsPerPod int64
	if cfg.UserNamespaces != nil && cfg.UserNamespaces.IDsPerPod != nil {
		idsPerPod = *cfg.UserNamespaces.IDsPerPod
	}
	return userns.NewManager(userns.Config{
		PodsDir: filepath.Join(opts.RootDirectory, "pods"), IDsPerPod: idsPerPod, MaxPods: int(cfg.MaxPods),
		Handlers: userns.NewRuntimeHandlers(rs),
	})
}
