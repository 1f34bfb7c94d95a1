//lint:file-ignore SA1019 apimachinery's httpstream packages are kept over their new home k8s.io/streaming, a module nodelet does not import directly.

package streaming

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// streamOptions are the streams a client asks for in exec and attach.
type streamOptions struct {
	stdin, stdout, stderr, tty bool
}

// errNoStreams is upstream's message for a request without any stream.
var errNoStreams = errors.New("you must specify at least 1 of stdin, stdout, stderr")

// parseStreamOptions reads the stdin, stdout, stderr and tty parameters ("1" is on).
// With a TTY, stderr is merged into stdout, so it is dropped as upstream does.
func parseStreamOptions(r *http.Request) (streamOptions, error) {
	o := streamOptions{
		stdin:  r.FormValue(v1.ExecStdinParam) == "1",
		stdout: r.FormValue(v1.ExecStdoutParam) == "1",
		stderr: r.FormValue(v1.ExecStderrParam) == "1",
		tty:    r.FormValue(v1.ExecTTYParam) == "1",
	}
	if o.tty && o.stderr {
		klog.V(4).InfoS("Access to exec with tty and stderr is not supported, bypassing stderr")
		o.stderr = false
	}
	if !o.stdin && !o.stdout && !o.stderr {
		return o, errNoStreams
	}
	return o, nil
}

// streamRequest reads what exec and attach share: the target, the stream options and the
// pod, answering the request itself (and returning false) when one is wrong.
func (h *Handlers) streamRequest(w http.ResponseWriter, r *http.Request, e endpoint) (target, streamOptions, *v1.Pod, bool) {
	t, ok := e.parse(w, r)
	if !ok {
		return t, streamOptions{}, nil, false
	}
	opts, err := parseStreamOptions(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return t, opts, nil, false
	}
	pod, ok := h.deps.Pods.PodByName(t.namespace, t.pod)
	if !ok {
		writeError(w, http.StatusNotFound, "pod does not exist")
	}
	return t, opts, pod, ok
}

// serveExec runs the command parameters ("command", repeated) in a container.
func (h *Handlers) serveExec(w http.ResponseWriter, r *http.Request) {
	t, opts, pod, ok := h.streamRequest(w, r, execEndpoint)
	if !ok {
		return
	}
	c, err := h.runningContainer(r.Context(), pod.Namespace, pod.Name, t.container)
	if err == nil && c == nil {
		err = fmt.Errorf("container not found (%q)", t.container)
	}
	if err != nil {
		writeRuntimeError(w, err)
		return
	}
	cmd := r.URL.Query()[v1.ExecCommandParam]
	u, err := h.deps.Streaming.GetExec(r.Context(), c.ID, cmd, opts.stdin, opts.stdout, opts.stderr, opts.tty)
	if err != nil {
		writeRuntimeError(w, err)
		return
	}
	h.proxyRemoteCommand(w, r, u, opts)
}

// serveAttach attaches to a container's main process. The TTY the runtime is asked for
// is the container's own: a process's TTY cannot change once it runs.
func (h *Handlers) serveAttach(w http.ResponseWriter, r *http.Request) {
	t, opts, pod, ok := h.streamRequest(w, r, attachEndpoint)
	if !ok {
		return
	}
	fullName := podFullName(pod.Name, pod.Namespace)
	c, err := h.runningContainer(r.Context(), pod.Namespace, pod.Name, t.container)
	if err == nil && c == nil {
		err = fmt.Errorf("container %s not found in pod %s", t.container, fullName)
	}
	if err == nil && t.uid != "" && pod.UID != t.uid {
		err = fmt.Errorf("pod %s not found", fullName)
	}
	var spec *v1.Container
	if err == nil {
		if spec = container.GetContainerSpec(pod, t.container); spec == nil {
			err = fmt.Errorf("container %s not found in pod %s", t.container, fullName)
		}
	}
	if err != nil {
		writeRuntimeError(w, err)
		return
	}
	u, err := h.deps.Streaming.GetAttach(r.Context(), c.ID, opts.stdin, opts.stdout, opts.stderr, spec.TTY)
	if err != nil {
		writeRuntimeError(w, err)
		return
	}
	h.proxyRemoteCommand(w, r, u, opts)
}

// proxyRemoteCommand connects the client to the runtime's streaming URL: a WebSocket
// v5 client through the translator, anything else (SPDY, older WebSocket protocols the
// runtime speaks itself) through a plain upgrade proxy.
func (h *Handlers) proxyRemoteCommand(w http.ResponseWriter, r *http.Request, u *url.URL, opts streamOptions) {
	if h.deps.Features.ExtendWebSocketsToKubelet && wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		translateWebSocket(w, r, u, opts)
		return
	}
	upgradeProxy(u).ServeHTTP(w, r)
}

// upgradeProxy proxies an upgrade request to u and then copies bytes both ways until
// either side closes; a request that is not an upgrade gets 400.
func upgradeProxy(u *url.URL) http.Handler {
	return proxy.NewUpgradeAwareHandler(u, nil /*transport*/, false /*wrapTransport*/, true /*upgradeRequired*/, proxyErrorResponder{})
}

// proxyErrorResponder answers a failed proxy attempt (the runtime's streaming server
// cannot be reached) with 500 and the error, as upstream.
type proxyErrorResponder struct{}

func (proxyErrorResponder) Error(w http.ResponseWriter, r *http.Request, err error) {
	klog.FromContext(r.Context()).Error(err, "Error while proxying request")
	http.Error(w, err.Error(), http.StatusInternalServerError)
}
