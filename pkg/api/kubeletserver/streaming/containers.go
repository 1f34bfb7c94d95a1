package streaming

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// runtimeURLTTL is how long a runtime keeps a streaming URL's token (the CRI streaming
// server's request cache TTL); a client told to retry waits that long.
const runtimeURLTTL = time.Minute

// runningPod finds the runtime's running pod with that name, as upstream's findContainer
// does: by full name, so a static pod is found whatever UID the caller knows it by.
func (h *Handlers) runningPod(ctx context.Context, namespace, name string) (*container.Pod, error) {
	pods, err := h.deps.RunningPods.GetPods(ctx, false)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if p.Name == name && p.Namespace == namespace {
			return p, nil
		}
	}
	return nil, nil
}

// runningContainer finds a running container of the named pod; nil when there is none.
func (h *Handlers) runningContainer(ctx context.Context, namespace, podName, name string) (*container.Container, error) {
	pod, err := h.runningPod(ctx, namespace, podName)
	if err != nil || pod == nil {
		return nil, err
	}
	return pod.FindContainerByName(name), nil
}

// writeRuntimeError answers for a failed request to the runtime as upstream's
// streaming.WriteError: NotFound is 404, ResourceExhausted (too many streams in flight)
// is 429 with Retry-After, anything else 500; the body is the error.
func writeRuntimeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	st, _ := grpcstatus.FromError(err)
	switch st.Code() {
	case codes.NotFound:
		code = http.StatusNotFound
	case codes.ResourceExhausted:
		w.Header().Set("Retry-After", strconv.Itoa(int(runtimeURLTTL.Seconds())))
		code = http.StatusTooManyRequests
	}
	writeError(w, code, err.Error())
}

// podFullName is the kubelet's name_namespace form.
func podFullName(name, namespace string) string { return name + "_" + namespace }
