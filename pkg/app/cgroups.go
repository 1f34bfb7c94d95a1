package app

import (
	"path/filepath"

	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"

	"github.com/nodelet/nodelet/pkg/cm"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/nodestatus"
	"github.com/nodelet/nodelet/pkg/userns"
)

// newContainerManager builds the container manager from the configuration: the QoS
// cgroup hierarchy under cgroupRoot, sized to the node's allocatable resources.
func newContainerManager(opts *config.Options, nodeName string, recorder record.EventRecorder, node nodestatus.Options, machine func() (*nodestatus.MachineInfo, error)) (*cm.ContainerManager, error) {
	cfg := opts.Config
	info, err := machine()
	if err != nil {
		return nil, err
	}
	memoryQoS, ok := cfg.FeatureGates["MemoryQoS"]
	return cm.NewContainerManager(cm.Options{
		CgroupRoot: cfg.CgroupRoot, CgroupDriver: cfg.CgroupDriver, CgroupsPerQOS: *cfg.CgroupsPerQOS,
		EnforceNodeAllocatable: cfg.EnforceNodeAllocatable,
		Capacity:               nodestatus.MachineCapacity(info, false),
		KubeReserved:           node.KubeReserved, SystemReserved: node.SystemReserved,
		KubeReservedCgroup: cfg.KubeReservedCgroup, SystemReservedCgroup: cfg.SystemReservedCgroup,
		PodPidsLimit: *cfg.PodPidsLimit, CPUCFSQuota: *cfg.CPUCFSQuota, CPUCFSQuotaPeriod: cfg.CPUCFSQuotaPeriod.Duration,
		FailCgroupV1: *cfg.FailCgroupV1, MemoryQoS: !ok || memoryQoS,
		MemoryThrottlingFactor: derefFloat(cfg.MemoryThrottlingFactor, 0.9),
		Recorder:               recorder, NodeName: nodeName,
	})
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
