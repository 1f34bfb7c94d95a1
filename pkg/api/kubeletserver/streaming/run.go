package streaming

import (
	"fmt"
	"net/http"
	"strings"

	"k8s.io/klog/v2"
)

// serveRun runs a command in a container and answers with its output:
// POST /run/<ns>/<pod>[/<uid>]/<container>?cmd=<command words separated by spaces>.
// The output is stdout then stderr, sent as application/json whatever it is, as
// upstream; a command that fails (also by exiting non-zero) is a 500 with the error.
func (h *Handlers) serveRun(w http.ResponseWriter, r *http.Request) {
	t, ok := runEndpoint.parse(w, r)
	if !ok {
		return
	}
	pod, ok := h.deps.Pods.PodByName(t.namespace, t.pod)
	if !ok {
		writeError(w, http.StatusNotFound, "pod does not exist")
		return
	}
	// For legacy reasons /run takes one "cmd" parameter, not exec's "command" list.
	cmd := strings.Split(r.URL.Query().Get("cmd"), " ")
	c, err := h.runningContainer(r.Context(), pod.Namespace, pod.Name, t.container)
	if err == nil && c == nil {
		err = fmt.Errorf("container not found (%q)", t.container)
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	// No timeout, as upstream: the command runs until it ends or the client goes away.
	out, err := h.deps.Runner.RunInContainer(r.Context(), c.ID, cmd, 0)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if out == nil {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(out); err != nil {
		klog.FromContext(r.Context()).Error(err, "Error writing response")
	}
}
