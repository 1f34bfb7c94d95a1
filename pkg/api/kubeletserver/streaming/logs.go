package streaming

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// Waiting reasons with a message of their own in a log request's answer.
const (
	reasonErrImagePull      = "ErrImagePull"
	reasonImagePullBackOff  = "ImagePullBackOff"
	streamNotEnabledMessage = "unable to return the given log stream: %q. Please enable PodLogsQuerySplitStreams feature gate in kubelet"
)

// serveContainerLogs writes a container's log: GET /containerLogs/<ns>/<pod>/<container>
// with the query parameters of v1.PodLogOptions. With follow it streams, flushing each
// write, until the container stops or the client goes away.
func (h *Handlers) serveContainerLogs(w http.ResponseWriter, r *http.Request) {
	t, ok := logsEndpoint.parse(w, r)
	if !ok {
		return
	}
	// Upstream's historical JSON-looking plain-text messages.
	switch {
	case t.pod == "":
		writeError(w, http.StatusBadRequest, `{"message": "Missing podID."}`)
		return
	case t.container == "":
		writeError(w, http.StatusBadRequest, `{"message": "Missing container name."}`)
		return
	case t.namespace == "":
		writeError(w, http.StatusBadRequest, `{"message": "Missing podNamespace."}`)
		return
	}
	opts, err := decodeLogOptions(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, `{"message": "Unable to decode query."}`)
		return
	}
	if !validLogOptions(opts) {
		writeError(w, http.StatusUnprocessableEntity, `{"message": "Invalid request."}`)
		return
	}
	pod, ok := h.deps.Pods.PodByName(t.namespace, t.pod)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("pod %q does not exist", t.pod))
		return
	}
	if container.GetContainerSpec(pod, t.container) == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("container %q not found in pod %q", t.container, t.pod))
		return
	}
	out, ok := newFlushWriter(w)
	if !ok {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("unable to convert %T into http.Flusher, cannot show logs", w))
		return
	}
	stdout, stderr, err := h.logStreams(opts, out)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := h.writeLogs(r, pod, t.container, opts, stdout, stderr); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
	}
}

// logStreams picks the writers for the container's stdout and stderr.
func (h *Handlers) logStreams(opts *v1.PodLogOptions, out io.Writer) (stdout, stderr io.Writer, err error) {
	stream := v1.LogStreamAll
	if opts.Stream != nil {
		stream = *opts.Stream
	}
	if !h.deps.Features.PodLogsQuerySplitStreams {
		if stream != v1.LogStreamAll {
			return nil, nil, fmt.Errorf(streamNotEnabledMessage, stream)
		}
		return out, out, nil
	}
	switch stream {
	case v1.LogStreamStdout:
		return out, nil, nil
	case v1.LogStreamStderr:
		return nil, out, nil
	case v1.LogStreamAll:
		return out, out, nil
	}
	return nil, nil, fmt.Errorf("invalid stream type %q", stream)
}

// writeLogs resolves which container instance to read and streams its log. An error
// before the first byte is the request's answer (400); later ones end the stream with
// their message, as upstream.
func (h *Handlers) writeLogs(r *http.Request, pod *v1.Pod, name string, opts *v1.PodLogOptions, stdout, stderr io.Writer) error {
	status, ok := h.deps.Pods.PodStatus(pod.UID)
	if !ok {
		// Just restarted: the status from the pod's source is the best there is.
		status = pod.Status
	}
	id, err := containerIDForLogs(pod.Name, &status, name, opts.Previous)
	if err != nil {
		return err
	}
	// Send the headers now: a follower may wait long for the first line.
	if stdout != nil {
		if _, err := stdout.Write(nil); err != nil {
			return err
		}
	} else if _, err := stderr.Write(nil); err != nil {
		return err
	}
	err = h.deps.Logs.GetContainerLogs(r.Context(), pod, id, opts, stdout, stderr)
	if err != nil && r.Context().Err() == nil {
		w := stdout
		if w == nil {
			w = stderr
		}
		_, _ = w.Write([]byte(err.Error()))
	}
	return nil
}

// containerIDForLogs picks the container instance a log request means, from the pod's
// status: the previous instance with previous, else the running one, else the last one
// that ran. Its errors are upstream's words for containers without a log.
func containerIDForLogs(podName string, status *v1.PodStatus, name string, previous bool) (container.ContainerID, error) {
	cs := findContainerStatus(status, name)
	if cs == nil {
		return container.ContainerID{}, fmt.Errorf("container %q in pod %q is not available", name, podName)
	}
	last := cs.LastTerminationState.Terminated
	var id string
	switch state := cs.State; {
	case previous:
		if last == nil || last.ContainerID == "" {
			return container.ContainerID{}, fmt.Errorf("previous terminated container %q in pod %q not found", name, podName)
		}
		id = last.ContainerID
	case state.Running != nil:
		id = cs.ContainerID
	case state.Terminated != nil:
		// A container that never started has no ID; its predecessor's log is shown.
		id = state.Terminated.ContainerID
		if id == "" && last != nil {
			id = last.ContainerID
		}
		if id == "" {
			return container.ContainerID{}, fmt.Errorf("container %q in pod %q is terminated", name, podName)
		}
	case last != nil:
		if last.ContainerID == "" {
			return container.ContainerID{}, fmt.Errorf("container %q in pod %q is terminated", name, podName)
		}
		id = last.ContainerID
	case state.Waiting != nil:
		return container.ContainerID{}, waitingError(name, podName, state.Waiting.Reason)
	default:
		return container.ContainerID{}, fmt.Errorf("container %q in pod %q is waiting to start - no logs yet", name, podName)
	}
	return container.ParseContainerID(id), nil
}

func waitingError(name, podName, reason string) error {
	switch reason {
	case reasonErrImagePull:
		return fmt.Errorf("container %q in pod %q is waiting to start: image can't be pulled", name, podName)
	case reasonImagePullBackOff:
		return fmt.Errorf("container %q in pod %q is waiting to start: trying and failing to pull image", name, podName)
	}
	return fmt.Errorf("container %q in pod %q is waiting to start: %v", name, podName, reason)
}

// findContainerStatus looks among the containers, then the init containers, then the
// ephemeral containers.
func findContainerStatus(status *v1.PodStatus, name string) *v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{status.ContainerStatuses, status.InitContainerStatuses, status.EphemeralContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// decodeLogOptions reads v1.PodLogOptions from query parameters as the API's parameter
// codec does: the first value of each counts; a boolean is false only when absent,
// "0" or "false"; "tail" is the old name of tailLines ("all" means every line).
func decodeLogOptions(query url.Values) (*v1.PodLogOptions, error) {
	if tail := query.Get("tail"); tail != "" {
		query = cloneValues(query)
		query["tailLines"] = []string{tail}
		if tail == "all" {
			delete(query, "tailLines")
		}
	}
	first := func(key string) (string, bool) {
		if vs := query[key]; len(vs) > 0 {
			return vs[0], true
		}
		return "", false
	}
	flag := func(key string) bool {
		v, ok := first(key)
		return ok && v != "0" && !strings.EqualFold(v, "false")
	}
	opts := &v1.PodLogOptions{
		Container: query.Get("container"),
		Follow:    flag("follow"), Previous: flag("previous"), Timestamps: flag("timestamps"),
		InsecureSkipTLSVerifyBackend: flag("insecureSkipTLSVerifyBackend"),
	}
	var errs []error
	for key, field := range map[string]**int64{"sinceSeconds": &opts.SinceSeconds, "tailLines": &opts.TailLines, "limitBytes": &opts.LimitBytes} {
		if v, ok := first(key); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			errs = append(errs, err)
			*field = &n
		}
	}
	if v, ok := first("sinceTime"); ok {
		t, err := parseQueryTime(v)
		errs = append(errs, err)
		opts.SinceTime = t
	}
	if v, ok := first("stream"); ok {
		opts.Stream = &v
	}
	return opts, errors.Join(errs...)
}

// parseQueryTime is metav1.Time's query form: RFC 3339, with "" and "null" the zero time.
func parseQueryTime(v string) (*metav1.Time, error) {
	if v == "" || v == "null" {
		return &metav1.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, err
	}
	return &metav1.Time{Time: t.Local()}, nil
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// validLogOptions is upstream's ValidatePodLogOptions; the kubelet answers any failure
// with one generic message, so only the verdict is needed.
func validLogOptions(o *v1.PodLogOptions) bool {
	switch {
	case o.TailLines != nil && *o.TailLines < 0,
		o.LimitBytes != nil && *o.LimitBytes < 1,
		o.SinceSeconds != nil && o.SinceTime != nil,
		o.SinceSeconds != nil && *o.SinceSeconds < 1:
		return false
	}
	if o.Stream != nil {
		switch *o.Stream {
		case v1.LogStreamStdout, v1.LogStreamStderr:
			return o.TailLines == nil
		case v1.LogStreamAll:
		default:
			return false
		}
	}
	return true
}

// flushWriter flushes each write to the client at once, so a follower sees lines as
// they come.
type flushWriter struct {
	w       io.Writer
	flusher http.Flusher
}

func newFlushWriter(w http.ResponseWriter) (*flushWriter, bool) {
	f, ok := w.(http.Flusher)
	if !ok {
		return nil, false
	}
	return &flushWriter{w: w, flusher: f}, true
}

func (f *flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if err != nil {
		return n, err
	}
	f.flusher.Flush()
	return n, nil
}
