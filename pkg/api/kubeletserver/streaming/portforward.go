//lint:file-ignore SA1019 apimachinery's httpstream packages are kept over their new home k8s.io/streaming, a module nodelet does not import directly.

package streaming

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
)

// servePortForward forwards connections to the pod's ports through the runtime's
// streaming server. SPDY clients name the ports per stream; WebSocket v4 clients name
// them in "ports" parameters; SPDY tunnelled over WebSocket is passed to the runtime as
// SPDY.
func (h *Handlers) servePortForward(w http.ResponseWriter, r *http.Request) {
	t, ok := portForwardEndpoint.parse(w, r)
	if !ok {
		return
	}
	tunnel := h.deps.Features.ExtendWebSocketsToKubelet && wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
	var ports []int32
	if !tunnel {
		var err error
		if ports, err = webSocketPorts(r); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	pod, ok := h.deps.Pods.PodByName(t.namespace, t.pod)
	if !ok {
		writeError(w, http.StatusNotFound, "pod does not exist")
		return
	}
	if t.uid != "" && pod.UID != t.uid {
		writeError(w, http.StatusNotFound, "pod not found")
		return
	}
	running, err := h.runningPod(r.Context(), pod.Namespace, pod.Name)
	if err == nil && running == nil {
		err = fmt.Errorf("pod not found (%q)", podFullName(pod.Name, pod.Namespace))
	}
	if err != nil {
		writeRuntimeError(w, err)
		return
	}
	u, err := h.deps.Streaming.GetPortForward(r.Context(), pod.Name, pod.Namespace, pod.UID, ports)
	if err != nil {
		writeRuntimeError(w, err)
		return
	}
	if tunnel {
		tunnelSPDY(w, r, u)
		return
	}
	upgradeProxy(u).ServeHTTP(w, r)
}

// webSocketPorts reads the "ports" parameters of a plain WebSocket request (each a
// port or a comma-separated list); other requests name their ports per stream.
func webSocketPorts(r *http.Request) ([]int32, error) {
	if !wsstream.IsWebSocketRequest(r) {
		return nil, nil
	}
	values := r.URL.Query()[v1.PortHeader]
	if len(values) == 0 {
		return nil, fmt.Errorf("query parameter %q is required", v1.PortHeader)
	}
	var ports []int32
	for _, value := range values {
		if value == "" {
			return nil, fmt.Errorf("query parameter %q cannot be empty", v1.PortHeader)
		}
		for _, p := range strings.Split(value, ",") {
			port, err := strconv.ParseUint(p, 10, 16)
			if err != nil {
				return nil, fmt.Errorf("unable to parse %q as a port: %v", value, err)
			}
			if port < 1 {
				return nil, fmt.Errorf("port %q must be > 0", value)
			}
			ports = append(ports, int32(port))
		}
	}
	return ports, nil
}
