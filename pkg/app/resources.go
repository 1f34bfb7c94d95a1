// Wiring of the node's resource managers (pkg/node): the topology manager aligning the
// CPU manager's exclusive CPUs, the memory manager's NUMA memory and the device
// plugins' devices at admission, as upstream's container manager wires them.
package app

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/node/cpumanager"
	"github.com/nodelet/nodelet/pkg/node/deviceplugin"
	"github.com/nodelet/nodelet/pkg/node/memorymanager"
	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/node/topologymanager"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// resourceManagers are the managers that allocate a pod's CPUs, NUMA memory and devices
// at admission and pin its containers.
type resourceManagers struct {
	topology *topologymanager.Manager
	cpus     *cpumanager.Manager
	memory   *memorymanager.Manager
}

// newResourceManagers builds the managers from the configuration, in upstream's order
// of hint providers: devices, CPUs, memory. sourcesReady must become true once the
// loop has seen every pod source (until then no allocation is taken as stale).
func newResourceManagers(opts *config.Options, node nodestatus.Options, capacity v1.ResourceList, devices *deviceplugin.Manager, sourcesReady func() bool, reg prometheus.Registerer) (*resourceManagers, error) {
	cfg := opts.Config
	tm, err := topologymanager.New(topologymanager.Options{Policy: cfg.TopologyManagerPolicy,
		Scope: cfg.TopologyManagerScope, PolicyOptions: cfg.TopologyManagerPolicyOptions})
	if err != nil {
		return nil, fmt.Errorf("failed to initialize topology manager: %w", err)
	}
	reserved, err := nodestatus.NodeAllocatableReservation(node, capacity)
	if err != nil {
		return nil, err
	}
	cpus, err := newCPUManager(opts, reserved, tm, sourcesReady)
	if err != nil {
		return nil, err
	}
	memory, err := memorymanager.New(memorymanager.Options{Policy: cfg.MemoryManagerPolicy, ReservedMemory: cfg.ReservedMemory,
		ExpectedReservedTotal: reserved, StateDir: opts.RootDirectory, Affinity: tm, SourcesReady: sourcesReady})
	if err != nil {
		return nil, fmt.Errorf("failed to initialize memory manager: %w", err)
	}
	devices.SetAffinity(tm)
	tm.AddHintProvider(devices.HintProvider())
	tm.AddHintProvider(cpus)
	tm.AddHintProvider(memory)
	collectors := append(append(topologymanager.Collectors(), cpus.Collectors()...), memory.Collectors()...)
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return &resourceManagers{topology: tm, cpus: cpus, memory: memory}, nil
}

// newNodeResourceManagers builds the managers for this machine's capacity.
func newNodeResourceManagers(opts *config.Options, node nodestatus.Options, machine func() (*nodestatus.MachineInfo, error), devices *deviceplugin.Manager, sourcesReady func() bool, reg prometheus.Registerer) (*resourceManagers, error) {
	info, err := machine()
	if err != nil {
		return nil, err
	}
	return newResourceManagers(opts, node, nodestatus.MachineCapacity(info, false), devices, sourcesReady, reg)
}

func newCPUManager(opts *config.Options, reserved v1.ResourceList, tm *topologymanager.Manager, sourcesReady func() bool) (*cpumanager.Manager, error) {
	cfg := opts.Config
	reservedCPUs, err := cpuset.Parse(cfg.ReservedSystemCPUs)
	if err != nil {
		return nil, fmt.Errorf("unable to parse reservedSystemCPUs %q: %w", cfg.ReservedSystemCPUs, err)
	}
	gates := cfg.FeatureGates
	betaOn, set := gates["CPUManagerPolicyBetaOptions"]
	m, err := cpumanager.New(cpumanager.Options{Policy: cfg.CPUManagerPolicy, PolicyOptions: cfg.CPUManagerPolicyOptions,
		AlphaOptionsEnabled: gates["CPUManagerPolicyAlphaOptions"], BetaOptionsDisabled: set && !betaOn,
		ReservedSystemCPUs: reservedCPUs, ReservedCPUs: reserved[v1.ResourceCPU], StateDir: opts.RootDirectory,
		ReconcilePeriod: cfg.CPUManagerReconcilePeriod.Duration, Affinity: tm, TopologyManagerPolicy: tm.PolicyName(),
		SourcesReady: sourcesReady})
	if err != nil {
		return nil, fmt.Errorf("failed to initialize cpu manager: %w", err)
	}
	return m, nil
}

// admit allocates the pod's resources (upstream's resource allocation admit handler).
func (r *resourceManagers) admit(pod *v1.Pod) (bool, string, string) { return r.topology.Admit(pod) }

// start runs the CPU manager's reconcile loop and drops the memory manager's stale state.
func (r *resourceManagers) start(ctx context.Context, activePods func() []*v1.Pod, rs internalapi.RuntimeService) error {
	if err := r.cpus.Start(ctx, activePods, &cpuRuntime{rs: rs}); err != nil {
		return err
	}
	return r.memory.Start(ctx, activePods)
}

// pinning is the cpuset a container is created with.
func (r *resourceManagers) pinning(pod *v1.Pod, c *v1.Container) (cpus, mems string) {
	if set, ok := r.cpus.CPUSetFor(pod, c); ok && !set.IsEmpty() {
		cpus = set.String()
	}
	if nodes, ok := r.memory.MemoryNUMANodesFor(pod, c); ok && len(nodes) > 0 {
		ids := make([]string, len(nodes))
		for i, n := range nodes {
			ids[i] = strconv.Itoa(n)
		}
		mems = strings.Join(ids, ",")
	}
	return cpus, mems
}

// containerCreated records the container's ID with each manager (upstream's
// PreStartContainer).
func (r *resourceManagers) containerCreated(pod *v1.Pod, c *v1.Container, id string) error {
	r.cpus.AddContainer(pod, c, id)
	r.memory.AddContainer(pod, c, id)
	r.topology.AddContainer(pod, c, id)
	return nil
}

// forgetPod drops the topology manager's affinities of a pod that has stopped; the CPU
// and memory managers drop their state of pods that are no longer active themselves.
func (r *resourceManagers) forgetPod(pod *v1.Pod) { r.topology.RemovePod(string(pod.UID)) }

// cpuRuntime is what the CPU manager's reconcile loop asks of the runtime. One
// reconcile pass asks for every active container: the running containers are listed
// once and the list is used for a second, instead of one CRI call per container.
type cpuRuntime struct {
	rs      internalapi.RuntimeService
	mu      sync.Mutex
	listed  time.Time
	running map[[2]string]string // {pod UID, container name} → container ID
}

// cpuRuntimeListTTL is how long one listing of the running containers is used.
const cpuRuntimeListTTL = time.Second

func (r *cpuRuntime) RunningContainerID(podUID, containerName string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running == nil || time.Since(r.listed) > cpuRuntimeListTTL {
		list, err := r.rs.ListContainers(context.Background(), &runtimeapi.ContainerFilter{
			State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
		if err != nil {
			return "", false
		}
		r.running = make(map[[2]string]string, len(list))
		for _, c := range list {
			r.running[[2]string{c.Labels[criconfig.PodUIDLabel], c.Labels[criconfig.ContainerNameLabel]}] = c.Id
		}
		r.listed = time.Now()
	}
	id, ok := r.running[[2]string{podUID, containerName}]
	return id, ok
}

// UpdateContainerCPUSet changes only the container's cpuset, as upstream's reconcile
// does: the runtime keeps every resource left unset.
func (r *cpuRuntime) UpdateContainerCPUSet(ctx context.Context, id string, cpus cpuset.CPUSet) error {
	return r.rs.UpdateContainerResources(ctx, id, &runtimeapi.ContainerResources{
		Linux: &runtimeapi.LinuxContainerResources{CpusetCpus: cpus.String()}})
}

// cpusProvider and memoryProvider answer the pod-resources API.
type cpusProvider struct{ m *cpumanager.Manager }

func (p cpusProvider) GetCPUs(pod *v1.Pod, c *v1.Container) []int64 {
	return int64s(p.m.GetExclusiveCPUs(string(pod.UID), c.Name))
}
func (cpusProvider) GetPodCPUs(string) []int64     { return nil }
func (p cpusProvider) GetAllocatableCPUs() []int64 { return int64s(p.m.GetAllocatableCPUs()) }

func int64s(s cpuset.CPUSet) []int64 {
	out := make([]int64, 0, s.Size())
	for _, c := range s.List() {
		out = append(out, int64(c))
	}
	return out
}

type memoryProvider struct{ m *memorymanager.Manager }

func (p memoryProvider) GetMemory(_ klog.Logger, pod *v1.Pod, c *v1.Container) []*podresourcesv1.ContainerMemory {
	return p.m.GetMemory(string(pod.UID), c.Name)
}
func (memoryProvider) GetPodMemory(klog.Logger, string) []*podresourcesv1.ContainerMemory { return nil }
func (p memoryProvider) GetAllocatableMemory(klog.Logger) []*podresourcesv1.ContainerMemory {
	return p.m.GetAllocatableMemory()
}
