package kuberuntime

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/version"
)

// maxHookRespBodyLength bounds how much of an HTTP hook's response is drained.
const maxHookRespBodyLength = 10 << 10

// podStatusGetter finds the pod IP for HTTP hooks without a host.
type podStatusGetter interface {
	GetPodStatus(ctx context.Context, uid types.UID, name, namespace string) (*container.PodStatus, error)
}

// hookRunner runs postStart and preStop handlers (upstream's lifecycle.handlerRunner).
type hookRunner struct {
	commands container.CommandRunner
	statuses podStatusGetter
	client   *http.Client
	recorder record.EventRecorder
}

func newHookRunner(commands container.CommandRunner, statuses podStatusGetter, recorder record.EventRecorder) *hookRunner {
	return &hookRunner{commands: commands, statuses: statuses, client: newHookHTTPClient(), recorder: recorder}
}

// newHookHTTPClient is upstream's lifecycle client: HTTPS without certificate checks (pods
// serve self-signed certificates) and redirects followed only on the same host. Like
// upstream it has no timeout of its own: preStop is bounded by the grace period, postStart
// by the caller's context.
func newHookHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
			DisableKeepAlives: true,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Hostname() != via[0].URL.Hostname() {
				return http.ErrUseLastResponse
			}
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return nil
		},
	}
}

// run executes handler for the container; on failure it returns a message for the sync
// result along with the error.
func (h *hookRunner) run(ctx context.Context, id container.ContainerID, pod *v1.Pod, c *v1.Container, handler *v1.LifecycleHandler) (string, error) {
	switch {
	case handler.Exec != nil:
		// No timeout of its own, as upstream: the caller's context bounds it.
		output, err := h.commands.RunInContainer(ctx, id, handler.Exec.Command, 0)
		if err != nil {
			klog.V(1).InfoS("Exec lifecycle hook for Container in Pod failed", "execCommand", handler.Exec.Command,
				"containerName", c.Name, "pod", klog.KObj(pod), "message", string(output), "err", err)
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q",
				handler.Exec.Command, c.Name, podFullName(pod), err, string(output)), err
		}
		return "", nil
	case handler.HTTPGet != nil:
		if err := h.runHTTPHandler(ctx, pod, c, handler.HTTPGet); err != nil {
			klog.V(1).InfoS("HTTP lifecycle hook for Container in Pod failed", "path", handler.HTTPGet.Path,
				"containerName", c.Name, "pod", klog.KObj(pod), "err", err)
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v",
				handler.HTTPGet.Path, c.Name, podFullName(pod), err), err
		}
		return "", nil
	case handler.Sleep != nil:
		if err := sleepHook(ctx, handler.Sleep.Seconds); err != nil {
			return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %v",
				handler.Sleep.Seconds, c.Name, podFullName(pod), err), err
		}
		return "", nil
	}
	err := fmt.Errorf("invalid handler: %v", handler)
	return fmt.Sprintf("Cannot run handler: %v", err), err
}

// sleepHook waits, ending early with an error when ctx ends.
func sleepHook(ctx context.Context, seconds int64) error {
	t := time.NewTimer(time.Duration(seconds) * time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
		metrics.LifecycleHandlerSleepTerminated.Inc()
		return errors.New("container terminated before sleep hook finished")
	case <-t.C:
		return nil
	}
}

// runHTTPHandler sends the GET. As upstream, only a failed request is a failure: the
// response status is not checked. An HTTPS request answered in plain HTTP is retried
// over HTTP.
func (h *hookRunner) runHTTPHandler(ctx context.Context, pod *v1.Pod, c *v1.Container, get *v1.HTTPGetAction) error {
	host := get.Host
	if host == "" {
		status, err := h.statuses.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
		if err != nil {
			klog.ErrorS(err, "Unable to get pod info, event handlers may be invalid.", "pod", klog.KObj(pod))
			return err
		}
		if len(status.IPs) == 0 {
			return fmt.Errorf("failed to find networking container: %v", status)
		}
		host = status.IPs[0]
	}
	req, err := newHookRequest(ctx, get, c, host)
	if err != nil {
		return err
	}
	resp, err := h.client.Do(req)
	drainBody(resp)
	if !isHTTPResponseToHTTPS(err) {
		return err
	}
	klog.V(1).InfoS("HTTPS request to lifecycle hook got HTTP response, retrying with HTTP.", "pod", klog.KObj(pod), "host", req.URL.Host, "err", err)
	plain := req.Clone(ctx)
	plain.URL.Scheme = "http"
	plain.Header.Del("Authorization")
	resp, httpErr := h.client.Do(plain)
	drainBody(resp)
	if httpErr != nil {
		return err
	}
	metrics.LifecycleHandlerHTTPFallbacks.Inc()
	h.recorder.Event(container.PodRef(pod), v1.EventTypeWarning, eventLifecycleHTTPFallback,
		fmt.Sprintf("request to HTTPS lifecycle hook %s got HTTP response, retry with HTTP succeeded", plain.URL.Host))
	return nil
}

// newHookRequest builds the GET for an httpGet handler (upstream's
// NewRequestForHTTPGetAction with the "lifecycle" user agent).
func newHookRequest(ctx context.Context, get *v1.HTTPGetAction, c *v1.Container, host string) (*http.Request, error) {
	scheme := strings.ToLower(string(get.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	port, err := resolveContainerPort(get.Port, c)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(get.Path)
	if err != nil {
		// A broken path is too late to reject: pass it along as is.
		u = &url.URL{Path: get.Path}
	}
	u.Scheme = scheme
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	headers := http.Header{}
	for _, hdr := range get.HTTPHeaders {
		headers.Add(hdr.Name, hdr.Value)
	}
	if _, ok := headers["User-Agent"]; !ok {
		headers.Set("User-Agent", "kube-lifecycle/"+majorMinor(version.KubeletVersion))
	}
	if _, ok := headers["Accept"]; !ok {
		headers.Set("Accept", "*/*")
	} else if headers.Get("Accept") == "" {
		headers.Del("Accept")
	}
	req.Header = headers
	req.Host = headers.Get("Host")
	return req, nil
}

// resolveContainerPort turns a port number or a named container port into a number.
func resolveContainerPort(param intstr.IntOrString, c *v1.Container) (int, error) {
	var port int
	switch param.Type {
	case intstr.Int:
		port = param.IntValue()
	case intstr.String:
		found := false
		for _, p := range c.Ports {
			if p.Name == param.StrVal {
				port, found = int(p.ContainerPort), true
				break
			}
		}
		if !found {
			// Last try: a number stored as a string.
			n, err := strconv.Atoi(param.StrVal)
			if err != nil {
				return -1, fmt.Errorf("port %s not found", param.StrVal)
			}
			port = n
		}
	default:
		return -1, fmt.Errorf("intOrString had no kind: %+v", param)
	}
	if port <= 0 || port >= 65536 {
		return port, fmt.Errorf("invalid port number: %v", port)
	}
	return port, nil
}

// majorMinor turns "v1.37.2" into "1.37".
func majorMinor(v string) string {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return strings.TrimPrefix(v, "v")
	}
	return parts[0] + "." + parts[1]
}

// drainBody reads a small body to its end so the connection could be reused, and closes it.
func drainBody(resp *http.Response) {
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	if resp.ContentLength <= maxHookRespBodyLength {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxHookRespBodyLength))
	}
}

func isHTTPResponseToHTTPS(err error) bool {
	var urlErr *url.Error
	return errors.As(err, &urlErr) && strings.Contains(urlErr.Err.Error(), "server gave HTTP response to HTTPS client")
}
