// Wiring of the runtime group (pkg/runtime): the CRI clients, the runtime manager's
// options, user namespaces, DNS, container log rotation and image GC.
package app

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/outage"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/pkg/runtime/dns"
	"github.com/nodelet/nodelet/pkg/runtime/imagegc"
	"github.com/nodelet/nodelet/pkg/runtime/images"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
	"github.com/nodelet/nodelet/pkg/runtime/logs"
	"github.com/nodelet/nodelet/pkg/runtime/userns"
	"github.com/nodelet/nodelet/pkg/tracing"
)

// connectRuntime dials the runtime and image services, checks that the runtime speaks
// CRI v1 and logs what it is.
func connectRuntime(ctx context.Context, opts *config.Options, reg prometheus.Registerer, tp *tracing.Provider) (internalapi.RuntimeService, internalapi.ImageManagerService, error) {
	cfg := opts.Config
	timeout := cfg.RuntimeRequestTimeout.Duration
	criMetrics, err := cri.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	// The clients' error lines go through the outage gate: one line per outage, not one
	// per failed call.
	logger := cri.WithLogger(outage.Default.Logger(klog.Background()))
	// One connection per socket: after a runtime restart, the image client is back as
	// soon as the runtime answers the health check.
	pool := cri.WithConnPool(cri.NewConnPool())
	clientOpts := append([]cri.Option{cri.WithMetrics(criMetrics), logger, pool}, criTracing(tp)...)
	runtime, err := cri.NewRemoteRuntimeService(ctx, cfg.ContainerRuntimeEndpoint, runtimeConnectTimeout, timeout, clientOpts...)
	if err != nil {
		return nil, nil, err
	}
	imageEndpoint := cri.ImageEndpointOrDefault(cfg.ImageServiceEndpoint, cfg.ContainerRuntimeEndpoint)
	images, err := cri.NewRemoteImageService(ctx, imageEndpoint, runtimeConnectTimeout, timeout, clientOpts...)
	if err != nil {
		runtime.Close(ctx)
		return nil, nil, err
	}
	vctx, cancel := context.WithTimeout(ctx, runtimeConnectTimeout)
	defer cancel()
	v, err := runtime.Version(vctx, "v1")
	if err != nil {
		runtime.Close(ctx)
		images.Close(ctx)
		return nil, nil, fmt.Errorf("container runtime at %q: %w", cfg.ContainerRuntimeEndpoint, err)
	}
	klog.InfoS("Container runtime initialized", "containerRuntime", v.RuntimeName,
		"version", v.RuntimeVersion, "apiVersion", v.RuntimeApiVersion, "endpoint", cfg.ContainerRuntimeEndpoint)
	return runtime, images, nil
}

// runtimeSettings are the runtime manager's options that follow from the configuration
// and the host; the caller adds the clients and managers it has built.
func runtimeSettings(opts *config.Options, nodeName string, nodeIPs []net.IP, host criconfig.Host, node nodestatus.Options) kuberuntime.Options {
	cfg := opts.Config
	memory := machineMemory()
	return kuberuntime.Options{
		RootDir: opts.RootDirectory, PodLogsDir: cfg.PodLogsDir, ClusterDomain: cfg.ClusterDomain,
		NodeName: nodeName, NodeIPs: ipStrings(nodeIPs),
		SeccompDefault: *cfg.SeccompDefault, CPUCFSQuota: *cfg.CPUCFSQuota,
		CPUCFSQuotaPeriod: cfg.CPUCFSQuotaPeriod.Duration, MachineMemory: memory,
		Host: host, SingleProcessOOMKill: singleProcessOOMKill(cfg),
		MemoryQoS: containerMemoryQoS(cfg, host, node, memory),
		ImageOptions: images.Options{
			SerializeImagePulls: *cfg.SerializeImagePulls, MaxParallelImagePulls: cfg.MaxParallelImagePulls,
			RegistryPullQPS: float32(*cfg.RegistryPullQPS), RegistryBurst: int(cfg.RegistryBurst),
			// The node's own credentials: docker config files, searched as upstream does.
			NodeKeyring: images.NewNodeKeyring(opts.RootDirectory),
		},
	}
}

// recursiveReadOnlySupport says whether a pod's runtime handler can make mounts recursively
// read-only, from the runtime's status (containerd 2.x lists its handlers' features). As
// upstream, only with RuntimeClasses from an API server: standalone, none does.
func recursiveReadOnlySupport(ctx context.Context, cl *cluster, classes kuberuntime.RuntimeClassLookup, handlers *userns.RuntimeHandlers) func(*v1.Pod) bool {
	if cl == nil {
		return nil
	}
	return func(pod *v1.Pod) bool {
		handler, err := classes.LookupRuntimeHandler(pod.Spec.RuntimeClassName)
		if err != nil {
			klog.ErrorS(err, "Failed to look up the runtime handler", "runtimeClassName", pod.Spec.RuntimeClassName)
			return false
		}
		return handlers.SupportsRecursiveReadOnlyMounts(ctx, handler)
	}
}

// newUserNamespaces hands out the ID blocks of pods with hostUsers: false, from the
// kubelet user's subordinate IDs or the default range, where the runtime supports them;
// the blocks of running pods are read back from their directories.
func newUserNamespaces(opts *config.Options, handlers *userns.RuntimeHandlers) (*userns.Manager, error) {
	cfg := opts.Config
	var idsPerPod int64
	if cfg.UserNamespaces != nil && cfg.UserNamespaces.IDsPerPod != nil {
		idsPerPod = *cfg.UserNamespaces.IDsPerPod
	}
	return userns.NewManager(userns.Config{
		PodsDir: filepath.Join(opts.RootDirectory, "pods"), IDsPerPod: idsPerPod, MaxPods: int(cfg.MaxPods),
		Handlers: handlers,
	})
}

func dnsConfigurer(cfg *kubeletconfig.KubeletConfiguration, recorder record.EventRecorder, node string, nodeIPs []net.IP) *dns.Configurer {
	var clusterDNS []net.IP
	for _, s := range cfg.ClusterDNS {
		if ip := net.ParseIP(s); ip != nil {
			clusterDNS = append(clusterDNS, ip)
		}
	}
	nodeRef := &v1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)}
	c := dns.NewConfigurer(recorder, nodeRef, nodeIPs, clusterDNS, cfg.ClusterDomain, *cfg.ResolverConfig)
	c.CheckLimitsForResolvConf()
	return c
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

// memoryQoSGate is the MemoryQoS feature gate, beta and on by default.
func memoryQoSGate(cfg *kubeletconfig.KubeletConfiguration) bool {
	on, ok := cfg.FeatureGates["MemoryQoS"]
	return !ok || on
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

// machineMemory is MemTotal from /proc/meminfo, in bytes (0 when unknown).
func machineMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// startLogRotation rotates container logs past containerLogMaxSize, as upstream's
// container log manager does (the runtime only ever appends).
func startLogRotation(ctx context.Context, cfg *kubeletconfig.KubeletConfiguration, rs internalapi.RuntimeService) error {
	m, err := logs.NewContainerLogManager(rs, cfg.ContainerLogMaxSize, int(*cfg.ContainerLogMaxFiles), cfg.ContainerLogMonitorInterval.Duration)
	if err != nil {
		return fmt.Errorf("container log manager: %w", err)
	}
	m.Start(ctx)
	return nil
}

// imageGCPolicy is the image garbage collector's policy from the imageGC* settings.
func imageGCPolicy(cfg *kubeletconfig.KubeletConfiguration) imagegc.Policy {
	return imagegc.Policy{
		HighThresholdPercent: int(*cfg.ImageGCHighThresholdPercent), LowThresholdPercent: int(*cfg.ImageGCLowThresholdPercent),
		MinAge: cfg.ImageMinimumGCAge.Duration, MaxAge: cfg.ImageMaximumGCAge.Duration,
	}
}

// newImagePullManager keeps the records of the images nodelet pulls, with the credentials
// that pulled them, under <root-dir>/image_manager/, and verifies pods' credentials for
// images on the node by imagePullCredentialsVerificationPolicy (default
// NeverVerifyPreloadedImages) and preloadedImagesVerificationAllowlist, as upstream does
// with the KubeletEnsureSecretPulledImages gate (beta, on by default). nil when the gate
// is off: every pod may use every image on the node.
func newImagePullManager(ctx context.Context, opts *config.Options, is internalapi.ImageManagerService) (*images.PullManager, error) {
	cfg := opts.Config
	if on, set := cfg.FeatureGates["KubeletEnsureSecretPulledImages"]; set && !on {
		return nil, nil
	}
	policy, err := images.NewCredentialVerificationPolicy(cfg.ImagePullCredentialsVerificationPolicy, cfg.PreloadedImagesVerificationAllowlist)
	if err != nil {
		return nil, err
	}
	var maxParallel int32
	if cfg.MaxParallelImagePulls != nil {
		maxParallel = *cfg.MaxParallelImagePulls
	}
	return images.NewPullManager(ctx, images.PullManagerOptions{
		RootDir: opts.RootDirectory, Policy: policy, Images: images.NewRuntimeImages(is),
		MaxPods: cfg.MaxPods, MaxParallelImagePulls: maxParallel,
	})
}

// startImageGC collects unused images by the imageGC* settings (every 5 minutes), keeping
// the runtime's sandbox image; hooks run after each collection.
func startImageGC(ctx context.Context, opts *config.Options, rs internalapi.RuntimeService, is internalapi.ImageManagerService, recorder record.EventRecorder, nodeName string, hooks ...imagegc.PostGCHook) (*imagegc.Manager, error) {
	cfg := opts.Config
	var sandboxImage string
	if st, err := rs.Status(ctx, true); err == nil {
		sandboxImage = imagegc.SandboxImageFromStatus(st)
	}
	gc, err := imagegc.New(imagegc.Options{
		Images: is, Containers: rs, FsStats: imagegc.CRIImageFs{Images: is},
		Policy:       imageGCPolicy(cfg),
		SandboxImage: sandboxImage, Recorder: recorder, NodeRef: nodeRef(nodeName),
		PostGCHooks: hooks,
	})
	if err != nil {
		return nil, err
	}
	gc.Start(ctx)
	gc.StartGarbageCollection(ctx)
	return gc, nil
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}
