// Package streaming serves the kubelet API's container endpoints: /exec, /attach,
// /portForward, /run, /containerLogs and /checkpoint, as upstream's kubelet server does.
//
// exec, attach and port-forward are not served here: the runtime hands out a URL on its
// own streaming server (CRI Exec/Attach/PortForward) and these handlers proxy the
// client's upgraded connection to it. SPDY is proxied byte for byte. WebSocket clients
// speaking the v5 remote command protocol (what the API server passes through when the
// node declares ExtendWebSocketsToKubelet) are translated to SPDY here, and port-forward
// over WebSocket carries SPDY frames that are tunnelled to the runtime unchanged.
//
// The handlers do no authentication or authorization: the server that mounts them does.
package streaming

import (
	"context"
	"io"
	"net/http"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Pods is the kubelet's view of its pods: the desired pods by name (static pods under
// their own name, as the API server's mirror pods are named) and the status last
// computed for each.
type Pods interface {
	PodByName(namespace, name string) (*v1.Pod, bool)
	PodStatus(uid types.UID) (v1.PodStatus, bool)
}

// RunningPods lists the pods the runtime has; all=false keeps running containers only.
type RunningPods interface {
	GetPods(ctx context.Context, all bool) ([]*container.Pod, error)
}

// LogReader writes a container's log as the options select (the runtime manager's
// GetContainerLogs). stdout or stderr may be nil when that stream is not wanted.
type LogReader interface {
	GetContainerLogs(ctx context.Context, pod *v1.Pod, id container.ContainerID, opts *v1.PodLogOptions, stdout, stderr io.Writer) error
}

// Checkpointer asks the runtime to checkpoint a container.
type Checkpointer interface {
	CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) error
}

// Deps is what the handlers need from the kubelet and the runtime manager. The runtime
// manager (*kuberuntime.Manager) provides all but Pods; the loop (*kubelet.Kubelet)
// provides Pods.
type Deps struct {
	Pods        Pods
	RunningPods RunningPods
	Streaming   container.StreamingRuntime
	Runner      container.CommandRunner
	Logs        LogReader
	Checkpoints Checkpointer
	// CheckpointDir is where checkpoint archives go: <root-dir>/checkpoints upstream.
	CheckpointDir string
	Features      Features
}

// Features are the upstream feature gates that change these endpoints.
type Features struct {
	// ExtendWebSocketsToKubelet (beta, on by default): translate WebSocket v5 exec and
	// attach to SPDY and tunnel WebSocket port-forward here, rather than passing every
	// WebSocket request through to the runtime. A node with it on declares it in
	// status.declaredFeatures and the API server then stops translating for it.
	ExtendWebSocketsToKubelet bool
	// ContainerCheckpoint (beta, on by default): serve /checkpoint.
	ContainerCheckpoint bool
	// PodLogsQuerySplitStreams (alpha, off by default): containerLogs?stream=Stdout|Stderr.
	PodLogsQuerySplitStreams bool
}

// FeaturesFromGates reads the featureGates map of a KubeletConfiguration, with
// upstream 1.37's defaults for gates it does not mention.
func FeaturesFromGates(gates map[string]bool) Features {
	enabled := func(name string, def bool) bool {
		if v, ok := gates[name]; ok {
			return v
		}
		return def
	}
	return Features{
		ExtendWebSocketsToKubelet: enabled("ExtendWebSocketsToKubelet", true),
		ContainerCheckpoint:       enabled("ContainerCheckpoint", true),
		PodLogsQuerySplitStreams:  enabled("PodLogsQuerySplitStreams", false),
	}
}

// Handlers serves the container endpoints.
type Handlers struct {
	deps Deps
}

// New returns the handlers; every field of deps but Features must be set.
func New(deps Deps) *Handlers {
	return &Handlers{deps: deps}
}

// Route is one subtree of the kubelet API these handlers serve, e.g. "/exec/".
type Route struct {
	Prefix  string
	Handler http.Handler
}

// Routes lists the subtrees to mount, each behind authentication and authorization
// (nodes/proxy for all of them upstream). /checkpoint/ is left out when the
// ContainerCheckpoint gate is off.
func (h *Handlers) Routes() []Route {
	routes := []Route{
		{"/run/", http.HandlerFunc(h.serveRun)},
		{"/exec/", http.HandlerFunc(h.serveExec)},
		{"/attach/", http.HandlerFunc(h.serveAttach)},
		{"/portForward/", http.HandlerFunc(h.servePortForward)},
		{"/containerLogs/", http.HandlerFunc(h.serveContainerLogs)},
	}
	if h.deps.Features.ContainerCheckpoint {
		routes = append(routes, Route{"/checkpoint/", http.HandlerFunc(h.serveCheckpoint)})
	}
	return routes
}
