// Wiring of the pod loop (pkg/pod): sources, the runtime manager, PLEG, status, probes,
// admission and the loop itself, started in the order each needs the others.
package app

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/pkg/api/cli"
	"github.com/nodelet/nodelet/pkg/api/events"
	"github.com/nodelet/nodelet/pkg/api/server"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/node/cpumanager"
	"github.com/nodelet/nodelet/pkg/node/memorymanager"
	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/node/stats"
	"github.com/nodelet/nodelet/pkg/node/volumes"
	"github.com/nodelet/nodelet/pkg/pod/admission"
	"github.com/nodelet/nodelet/pkg/pod/allocation"
	"github.com/nodelet/nodelet/pkg/pod/kubelet"
	"github.com/nodelet/nodelet/pkg/pod/pleg"
	"github.com/nodelet/nodelet/pkg/pod/podcache"
	"github.com/nodelet/nodelet/pkg/pod/podmanager"
	"github.com/nodelet/nodelet/pkg/pod/prober"
	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/pod/sources"
	"github.com/nodelet/nodelet/pkg/pod/status"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/pkg/runtime/imagegc"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
	"github.com/nodelet/nodelet/pkg/runtime/userns"
	"github.com/nodelet/nodelet/pkg/tracing"
)

const (
	// plegChannelCapacity is upstream's PLEG event buffer.
	plegChannelCapacity = 1000
	// housekeepingPeriod and containerGCPeriod are upstream's fixed periods.
	housekeepingPeriod = 2 * time.Second
	containerGCPeriod  = time.Minute
)

// podStateProxy lets the runtime manager's garbage collector ask the loop about pods,
// although the loop is built after the runtime manager.
type podStateProxy struct{ k *kubelet.Kubelet }

func (p *podStateProxy) IsPodDeleted(uid types.UID) bool { return p.k != nil && p.k.IsPodDeleted(uid) }
func (p *podStateProxy) IsPodTerminated(uid types.UID) bool {
	return p.k != nil && p.k.IsPodTerminated(uid)
}

// CouldHaveRunningContainers is true until the loop knows a pod's containers are stopped.
func (p *podStateProxy) CouldHaveRunningContainers(uid types.UID) bool {
	return p.k == nil || p.k.CouldHaveRunningContainers(uid)
}

// startPodLoop builds the pod sources, the runtime manager, the node status controller
// and the loop, and runs them until ctx ends; it returns the loop. cl is nil standalone.
func startPodLoop(ctx context.Context, opts *config.Options, nodeName string, rs internalapi.RuntimeService, is internalapi.ImageManagerService, state *kubelet.RuntimeState, registries *metrics.Registries, cl *cluster, tp *tracing.Provider) (*kubelet.Kubelet, error) {
	cfg := opts.Config
	// The runtime's cgroup driver wins over the configured one (upstream, with RuntimeConfig).
	driver, fromRuntime, err := cri.ResolveCgroupDriver(ctx, rs, cfg.CgroupDriver)
	if err != nil {
		return nil, err
	}
	cfg.CgroupDriver = driver
	if err := checkSystemdDriver(driver, fromRuntime, systemdRunning()); err != nil {
		return nil, err
	}
	configured, err := nodestatus.ParseNodeIPs(opts.NodeIP)
	if err != nil {
		return nil, err
	}
	nodeIPs := nodestatus.HostIPs(nodeName, nodeName, configured)
	recorder := cl.recorder(ctx, nodeName)
	liveness, readiness, startup := results.NewManager(), results.NewManager(), results.NewManager()
	vols := volumes.NewManager(opts.RootDirectory)
	// The node's settings and machine facts, read once for the container manager and the
	// node status.
	nodeOpts, err := nodestatus.OptionsFromConfig(opts, nodeName, nodeName)
	if err != nil {
		return nil, err
	}
	machine := sync.OnceValues(func() (*nodestatus.MachineInfo, error) { return nodestatus.ReadMachineInfo(opts.RootDirectory) })
	cgroups, err := newContainerManager(opts, nodeName, recorder, nodeOpts, machine)
	if err != nil {
		return nil, fmt.Errorf("failed to start ContainerManager: %w", err)
	}
	host := criconfig.DetectHost(cgroups.CgroupV2())
	proxy := &podStateProxy{}
	handlers := userns.NewRuntimeHandlers(rs)
	usernsManager, err := newUserNamespaces(opts, handlers)
	if err != nil {
		return nil, err
	}
	// The resources admitted for each pod, kept across restarts (upstream's checkpoint).
	allocations, err := allocation.NewStore(opts.RootDirectory, allocation.AllocatedPodsStateFile)
	if err != nil {
		return nil, err
	}
	ro := runtimeSettings(opts, nodeName, nodeIPs, host, nodeOpts)
	ro.RuntimeService, ro.ImageService, ro.Recorder, ro.UserNamespaces = rs, is, recorder, usernsManager
	ro.LivenessManager, ro.StartupManager, ro.Volumes, ro.PodState = liveness, startup, vols, proxy
	ro.DNS, ro.EnvSources = dnsConfigurer(cfg, recorder, nodeName, nodeIPs), cl.envSources()
	ro.RuntimeClasses = cl.runtimeClasses(ctx)
	rro := recursiveReadOnlySupport(ctx, cl, ro.RuntimeClasses, handlers)
	vols.SetRecursiveReadOnlySupport(rro)
	ro.SupportsRecursiveReadOnly = rro // image volumes' mounts are the runtime manager's
	ro.CgroupParent, ro.PodResizer = cgroups.Parent, cgroups
	pulledImages, err := newImagePullManager(ctx, opts, is)
	if err != nil {
		return nil, err
	}
	var gcHooks []imagegc.PostGCHook
	if pulledImages != nil {
		ro.ImageOptions.PullManager = pulledImages
		gcHooks = append(gcHooks, pulledImages.PruneUnknownRecords)
	}
	if cl != nil {
		ro.ImageOptions.PullSecrets = cl.objects
	}
	plugins, err := credentialPlugins(ctx, opts, cl, registries.Kubelet)
	if err != nil {
		return nil, err
	}
	if plugins != nil {
		ro.ImageOptions.CredentialPlugins = plugins
	}
	devices, err := newDevicePlugins()
	if err != nil {
		return nil, err
	}
	claims, err := newDRA(opts.RootDirectory, nodeName, cl, registries.Kubelet)
	if err != nil {
		return nil, err
	}
	ro.DeviceOptions = deviceRunOptions(devices, claims)
	ro.PrepareDynamicResources = claims.PrepareResources
	var loopRef atomic.Pointer[kubelet.Kubelet]
	sourcesReady := func() bool { k := loopRef.Load(); return k != nil && k.AllSourcesReady() }
	managers, err := newNodeResourceManagers(opts, nodeOpts, machine, devices, sourcesReady, registries.Kubelet)
	if err != nil {
		return nil, err
	}
	ro.Pinning, ro.ContainerCreated = managers.pinning, managers.containerCreated
	health := newResourceHealth(devices, claims)
	runtime, err := kuberuntime.NewManager(ctx, ro)
	if err != nil {
		return nil, err
	}
	cache := podcache.New()
	plegEvents := make(chan *pleg.PodLifecycleEvent, plegChannelCapacity)
	// Container events from the runtime when it streams them (containerd 2.x), relisting
	// otherwise; featureGates EventedPLEG: false forces relisting.
	podLEG := pleg.New(cfg.FeatureGates, runtime, rs, plegEvents, cache, clock.RealClock{})
	serving := servesKubeletAPI(cfg, cl)
	declared := declaredFeatures(cfg, serving)
	late := &lateBound{}
	evictions, err := newEvictionManager(opts, nodeName, recorder, is, late)
	if err != nil {
		return nil, err
	}
	shutdown, err := newShutdownManager(opts, nodeName, recorder, late)
	if err != nil {
		return nil, err
	}
	node, err := newNodeStatus(nodeOpts, machine, nodeIPs, declared, state, runtime, rs, recorder, podLEG, evictions, shutdown, devices, vols, cl)
	if err != nil {
		return nil, err
	}
	late.node = node
	vols.SetAPI(cl.volumeAPI(ctx, nodeAllocatable(ctx, node), recorder))
	vols.SetVolumesInUseChanged(node.SyncNow)
	csiDrivers := cl.csiDrivers(ctx, opts.RootDirectory, nodeName, vols)
	admitter, err := admission.New(nodeOf(ctx, node), admission.Options{AllowedUnsafeSysctls: cfg.AllowedUnsafeSysctls, DeclaredFeatures: declared,
		AllocateResources:  managers.admit,
		PressureConditions: evictions.PressureConditions, ShuttingDown: func() bool { return shutdown.ShutdownStatus() != nil }})
	if err != nil {
		return nil, err
	}
	// Describe the node now, off the pod path: the first admission would otherwise wait
	// for machine facts and the runtime's image list.
	go func() { _, _ = node.Node(ctx) }()
	pods := podmanager.New()
	statusManager := status.NewManager(cl.statusSyncer(pods, proxy), pods)
	probes := prober.NewManager(runtime, liveness, readiness, startup, recorder, statusManager, registries.Probes)
	podConfig := sources.NewConfig(recorder)
	expected := startSources(ctx, cfg, podConfig, types.NodeName(nodeName))
	deps := kubelet.Deps{
		Runtime: runtime, PLEG: podLEG,
		PLEGEvents: plegEvents, Cache: cache, Status: statusManager, Volumes: vols, Cgroups: cgroups, UserNamespaces: usernsManager,
		Recorder: recorder, RuntimeState: state, Liveness: liveness, Readiness: readiness, Startup: startup, Prober: probes,
		SourcesReady: podConfig.SeenAllSources, Pods: pods, Admitter: admitterAdapter{admitter},
		Allocations: allocations, Resize: runtime, SupportsRecursiveReadOnlyMounts: rro,
		Tracer: tp.KubeletTracer(), ResourceHealth: health, Releaser: releaser{claims, managers},
	}
	if cl != nil {
		deps.Mirror = cl.mirrorClient(nodeName, node)
		sources.StartSourceAPI(ctx, cl.clients.Kube, types.NodeName(nodeName), node.NodeSynced, podConfig.Channel(ctx, kubetypes.APIServerSource))
		expected.Insert(kubetypes.APIServerSource)
		node.BirthCry()
		go node.Run(ctx)
	}
	k := kubelet.New(loopConfig(opts, nodeName, nodeIPs), deps)
	loopRef.Store(k)
	proxy.k = k
	// The QoS hierarchy before any pod syncs (upstream's container manager start).
	if err := cgroups.Start(ctx, k.ActivePods); err != nil {
		return nil, fmt.Errorf("failed to start ContainerManager: %w", err)
	}
	summaryOpts := statsOptions(opts, nodeName)
	summaryOpts.ClaimPath, summaryOpts.CSI = claimPath(vols), csiDrivers
	summary := stats.NewProvider(rs, is, stats.PodListerFunc(k.Pods), summaryOpts)
	go summary.Run(ctx)
	metrics.SetPodStats(summary.ListPodStats)
	images, err := startImageGC(ctx, opts, rs, is, recorder, nodeName, gcHooks...)
	if err != nil {
		return nil, err
	}
	late.loop, late.summary, late.images = k, summary, images
	if err := startDevicePlugins(ctx, devices, k, k.AllSourcesReady, rs, node.SyncNow, health); err != nil {
		return nil, err
	}
	if err := managers.start(ctx, k.ActivePods, rs); err != nil {
		return nil, err
	}
	if err := startDRA(ctx, claims, k, health); err != nil {
		return nil, err
	}
	if err := startPluginWatcher(ctx, opts.RootDirectory, claims, csiDrivers, registries.Kubelet); err != nil {
		return nil, err
	}
	servePodResources(ctx, opts.RootDirectory, k, pods, devices, claims, managers, podResourcesMetrics)
	evictions.Start(ctx)
	if err := shutdown.Start(); err != nil {
		// As upstream: the node runs on without graceful shutdown.
		klog.ErrorS(err, "Failed to start node shutdown manager")
	}
	startOOMWatcher(ctx, recorder, nodeName)
	if err := server.ServeLocal(ctx, cli.SocketPath(opts.RootDirectory), server.PodHandlers(k)); err != nil {
		return nil, err
	}
	if err := startLogRotation(ctx, cfg, rs); err != nil {
		return nil, err
	}
	if serving {
		api := kubeletAPI{opts: opts, nodeName: nodeName, nodeIPs: nodeIPs, loop: k, runtime: runtime, cri: rs,
			summary: summary, node: node, machine: machine, registries: registries, cluster: cl}
		if err := api.start(ctx); err != nil {
			return nil, err
		}
	}
	go k.Run(ctx, podConfig.Updates())
	klog.InfoS("Pod loop started", "node", nodeName, "sources", sets.List(expected))
	return k, nil
}

// loopConfig is the pod loop's configuration: sync and housekeeping periods, maxPods, the
// container GC policy and the gates the loop reads.
func loopConfig(opts *config.Options, nodeName string, nodeIPs []net.IP) kubelet.Config {
	cfg := opts.Config
	return kubelet.Config{
		NodeName: nodeName, HostIPs: ipStrings(nodeIPs), SyncFrequency: cfg.SyncFrequency.Duration,
		HousekeepingPeriod: housekeepingPeriod, MaxPods: int(cfg.MaxPods), GCPeriod: containerGCPeriod,
		GCPolicy: container.GCPolicy{MinAge: opts.MinimumGCAge.Duration,
			MaxPerPodContainer: int(opts.MaxPerPodContainerCount), MaxContainers: int(opts.MaxContainerCount)},
		PodLevelResourcesResize: featureEnabled(cfg, podLevelResizeGate, true),
		StaticCPUManager:        cfg.CPUManagerPolicy == cpumanager.PolicyStatic,
		StaticMemoryManager:     cfg.MemoryManagerPolicy == memorymanager.PolicyStatic,
	}
}

// admitterAdapter adapts pkg/pod/admission's results to the loop's Admitter.
type admitterAdapter struct{ a *admission.Admitter }

func (a admitterAdapter) Admit(pod *v1.Pod, active []*v1.Pod) (bool, string, string) {
	r := a.a.Admit(pod, active)
	return r.Admit, r.Reason, r.Message
}

func (a admitterAdapter) AdmitResize(pod *v1.Pod, allocated []*v1.Pod) (bool, string, string) {
	r := a.a.AdmitResize(pod, allocated)
	return r.Admit, r.Reason, r.Message
}

// featureEnabled reads a feature gate from the configuration, def when unset.
func featureEnabled(cfg *kubeletconfig.KubeletConfiguration, gate string, def bool) bool {
	if on, ok := cfg.FeatureGates[gate]; ok {
		return on
	}
	return def
}

// startSources starts the static pod directory and URL sources that are configured and
// returns the names the loop must hear from before cleaning up unknown pods.
func startSources(ctx context.Context, cfg *kubeletconfig.KubeletConfiguration, pc *sources.Config, node types.NodeName) sets.Set[string] {
	expected := sets.New[string]()
	if cfg.StaticPodPath != "" {
		klog.InfoS("Adding static pod path", "path", cfg.StaticPodPath)
		sources.StartSourceFile(ctx, cfg.StaticPodPath, node, cfg.FileCheckFrequency.Duration, pc.Channel(ctx, kubetypes.FileSource))
		expected.Insert(kubetypes.FileSource)
	}
	if cfg.StaticPodURL != "" {
		klog.InfoS("Adding pod URL with HTTP header", "URL", cfg.StaticPodURL, "header", cfg.StaticPodURLHeader)
		sources.StartSourceURL(ctx, cfg.StaticPodURL, http.Header(cfg.StaticPodURLHeader), node, cfg.HTTPCheckFrequency.Duration, pc.Channel(ctx, kubetypes.HTTPSource))
		expected.Insert(kubetypes.HTTPSource)
	}
	return expected
}

func eventRecorder() record.EventRecorder { return events.NewLoggingRecorder(clock.RealClock{}) }
