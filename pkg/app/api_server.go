package app

import (
	"context"
	"net"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/api/kubeletserver"
	"github.com/nodelet/nodelet/pkg/api/kubeletserver/streaming"
	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/node/cadvisor"
	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/node/stats"
	"github.com/nodelet/nodelet/pkg/pod/kubelet"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

// servesKubeletAPI decides whether the kubelet API (port, readOnlyPort) is served:
// enableServer, and an API server to ask when authentication or authorization is a
// webhook. Upstream's kubelet refuses to start standalone with the webhook defaults;
// nodelet runs its pods and says, once, why it does not serve the API.
func servesKubeletAPI(cfg *kubeletconfig.KubeletConfiguration, cl *cluster) bool {
	if !ptr.Deref(cfg.EnableServer, true) {
		return false
	}
	webhook := ptr.Deref(cfg.Authentication.Webhook.Enabled, false) || cfg.Authorization.Mode == kubeletconfig.KubeletAuthorizationModeWebhook
	if cl == nil && webhook {
		klog.InfoS("Not serving the kubelet API: its webhook authentication or authorization needs an API server; set authentication.webhook.enabled: false and authorization.mode: AlwaysAllow to serve it standalone")
		return false
	}
	return true
}

// declaredFeatures are the node features nodelet declares in status.declaredFeatures
// (upstream's node declared features): the API server relies on them, e.g. to pass
// WebSocket exec and port-forward streams through to the kubelet.
func declaredFeatures(cfg *kubeletconfig.KubeletConfiguration, serving bool) []string {
	var declared []string
	if serving && streaming.FeaturesFromGates(cfg.FeatureGates).ExtendWebSocketsToKubelet {
		declared = append(declared, "ExtendWebSocketsToKubelet")
	}
	// In-place resizes of pod-level resources (beta, on by default) and of init
	// containers that are not sidecars (GA): the API server refuses them for pods of a
	// node that does not declare them.
	if featureEnabled(cfg, podLevelResizeGate, true) {
		declared = append(declared, podLevelResizeGate)
	}
	return append(declared, "InPlacePodVerticalScalingInitContainers")
}

// podLevelResizeGate is the feature gate (and declared feature) of pod-level resizes.
const podLevelResizeGate = "InPlacePodLevelResourcesVerticalScaling"

// kubeletAPI is what the kubelet API serves from.
type kubeletAPI struct {
	opts       *config.Options
	nodeName   string
	nodeIPs    []net.IP
	loop       *kubelet.Kubelet
	runtime    *kuberuntime.Manager
	cri        internalapi.RuntimeService
	summary    *stats.Provider
	node       *nodestatus.Controller
	machine    func() (*nodestatus.MachineInfo, error)
	registries *metrics.Registries
	cluster    *cluster
}

// statsOptions describe the node to the stats summary provider.
func statsOptions(opts *config.Options, nodeName string) stats.Options {
	cfg := opts.Config
	return stats.Options{
		NodeName: nodeName, RootDir: opts.RootDirectory, PodLogsDir: cfg.PodLogsDir,
		KubeletCgroup: cfg.KubeletCgroups, RuntimeCgroup: opts.RuntimeCgroups, SystemCgroup: cfg.SystemCgroups,
		PodCgroupRoot: podCgroupRoot(opts), VolumeStatsPeriod: cfg.VolumeStatsAggPeriod.Duration,
	}
}

// start serves the kubelet API on address:port (and readOnlyPort when set) until ctx ends.
func (a kubeletAPI) start(ctx context.Context) error {
	serverOpts := kubeletserver.OptionsFromConfig(a.opts.Config, a.nodeName, a.nodeName, a.nodeIPs, a.opts.CertDirectory)
	serverOpts.Flags = a.opts.Flags // /flagz
	server, err := kubeletserver.New(serverOpts, a.deps(ctx))
	if err != nil {
		return err
	}
	return server.Start(ctx)
}

// deps are the handlers and sources behind the kubelet API's endpoints.
func (a kubeletAPI) deps(ctx context.Context) kubeletserver.Deps {
	deps := kubeletserver.Deps{
		Host:          a.loop,
		NodeAddresses: func() []v1.NodeAddress { return a.nodeAddresses(ctx) },
		Registerer:    a.registries.Kubelet,
		Metrics:       a.registries.Handler(),
		MetricsProbes: a.registries.ProbesHandler(),
		MetricsSLIs:   a.registries.SLIsHandler(),
	}
	if a.cluster != nil {
		deps.Client = a.cluster.clients.Kube
	}
	deps.Stats, deps.MetricsResource = stats.NewSummaryHandler(a.summary), stats.NewResourceMetricsHandler(a.summary)
	deps.MetricsCadvisor = cadvisor.NewHandler(cadvisor.Options{Runtime: a.cri, Summary: a.summary, Pods: a.loop.Pods, Machine: a.machineFacts})
	// The server itself turns these off when enableDebuggingHandlers is false.
	mountStreaming(&deps, streaming.New(streaming.Deps{
		Pods: a.loop, RunningPods: a.runtime, Streaming: a.runtime, Runner: a.runtime,
		Logs: a.runtime, Checkpoints: a.runtime,
		CheckpointDir: filepath.Join(a.opts.RootDirectory, "checkpoints"),
		Features:      streaming.FeaturesFromGates(a.opts.Config.FeatureGates),
	}))
	return deps
}

// nodeAddresses are the node's status addresses, for a bootstrapped serving certificate.
func (a kubeletAPI) nodeAddresses(ctx context.Context) []v1.NodeAddress {
	node, err := a.node.Node(ctx)
	if err != nil {
		return nil
	}
	return node.Status.Addresses
}

// machineFacts are the node's machine facts for the machine_* metrics.
func (a kubeletAPI) machineFacts() (*cadvisor.Machine, error) {
	m, err := a.machine()
	if err != nil {
		return nil, err
	}
	return &cadvisor.Machine{NumCores: m.NumCores, MemoryBytes: m.MemoryCapacity, SwapBytes: m.SwapCapacity,
		MachineID: m.MachineID, SystemUUID: m.SystemUUID, BootID: m.BootID}, nil
}

// mountStreaming puts the container endpoints where the server mounts them.
func mountStreaming(deps *kubeletserver.Deps, h *streaming.Handlers) {
	for _, r := range h.Routes() {
		switch r.Prefix {
		case "/exec/":
			deps.Exec = r.Handler
		case "/attach/":
			deps.Attach = r.Handler
		case "/portForward/":
			deps.PortForward = r.Handler
		case "/run/":
			deps.Run = r.Handler
		case "/containerLogs/":
			deps.ContainerLogs = r.Handler
		case "/checkpoint/":
			deps.Checkpoint = r.Handler
		}
	}
}
