package streaming

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// serveCheckpoint checkpoints a container into an archive in the checkpoint directory:
// POST /checkpoint/<ns>/<pod>/<container>[?timeout=<seconds>], answered with
// {"items":["<archive path>"]}.
func (h *Handlers) serveCheckpoint(w http.ResponseWriter, r *http.Request) {
	t, ok := checkpointEndpoint.parse(w, r)
	if !ok {
		return
	}
	pod, ok := h.deps.Pods.PodByName(t.namespace, t.pod)
	if !ok {
		writeError(w, http.StatusNotFound, "pod does not exist")
		return
	}
	if container.GetContainerSpec(pod, t.container) == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("container %v does not exist", t.container))
		return
	}
	req := &runtimeapi.CheckpointContainerRequest{}
	// Without a timeout the runtime request timeout applies; of several, the last counts.
	if timeouts := r.URL.Query()["timeout"]; len(timeouts) > 0 {
		timeout, err := strconv.ParseInt(timeouts[len(timeouts)-1], 10, 64)
		if err != nil {
			// Upstream answers 404 here.
			writeError(w, http.StatusNotFound, "cannot parse value of timeout parameter")
			return
		}
		req.Timeout = timeout
	}
	if err := h.checkpoint(r, pod, t.container, req); err != nil {
		// A runtime without checkpoint support (containerd before 2.0 answers
		// Unimplemented) gets 501 Not Implemented; upstream answers 500 for every failure.
		code := http.StatusInternalServerError
		if grpcstatus.Code(err) == codes.Unimplemented {
			code = http.StatusNotImplemented
		}
		writeError(w, code, fmt.Sprintf("checkpointing of %v/%v/%v failed (%v)", t.namespace, t.pod, t.container, err))
		return
	}
	body, err := json.Marshal(map[string][]string{"items": {req.Location}})
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(body); err != nil {
		klog.FromContext(r.Context()).Error(err, "Error writing response")
	}
}

// checkpoint asks the runtime to write the running container's checkpoint to
// <dir>/checkpoint-<pod full name>-<container>-<RFC 3339 time>.tar.
func (h *Handlers) checkpoint(r *http.Request, pod *v1.Pod, name string, req *runtimeapi.CheckpointContainerRequest) error {
	c, err := h.runningContainer(r.Context(), pod.Namespace, pod.Name, name)
	if err != nil {
		return err
	}
	if c == nil {
		return fmt.Errorf("container %v not found", name)
	}
	if err := os.MkdirAll(h.deps.CheckpointDir, 0o700); err != nil {
		return err
	}
	req.ContainerId = c.ID.ID
	req.Location = filepath.Join(h.deps.CheckpointDir, fmt.Sprintf("checkpoint-%s-%s-%s.tar",
		podFullName(pod.Name, pod.Namespace), name, time.Now().Format(time.RFC3339)))
	return h.deps.Checkpoints.CheckpointContainer(r.Context(), req)
}
