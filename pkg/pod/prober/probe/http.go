package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/klog/v2"
	utilio "k8s.io/utils/io"
)

// maxRedirects is how many same-host redirects an HTTP probe follows, as Go's default.
const maxRedirects = 10

// HTTPProber runs HTTP GET probes. One is shared by all workers: its transport keeps no
// connections alive, so it holds no per-container state.
type HTTPProber struct {
	transport *http.Transport
}

// NewHTTPProber returns a prober that skips certificate verification (containers serve
// self-signed certificates), never uses the node's proxy and does not ask for compression.
func NewHTTPProber() *HTTPProber {
	t := &http.Transport{
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives:  true,
		Proxy:              http.ProxyURL(nil),
		DisableCompression: true,
		// The timeout comes from the request's client; the dialer only adds SO_LINGER.
		DialContext: dialer(0).DialContext,
	}
	return &HTTPProber{transport: utilnet.SetTransportDefaults(t)}
}

// NewHTTPRequest builds the GET request of an httpGet probe. An empty host means podIP; a
// named port is looked up among the container's ports. Headers from the probe win over the
// defaults (User-Agent kube-probe/<version>, Accept */*); an empty Accept removes it, and a
// Host header sets the request's host.
func NewHTTPRequest(get *v1.HTTPGetAction, c *v1.Container, podIP string) (*http.Request, error) {
	scheme := strings.ToLower(string(get.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	host := get.Host
	if host == "" {
		host = podIP
	}
	port, err := ResolvePort(get.Port, c)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(http.MethodGet, probeURL(scheme, host, port, get.Path).String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header = probeHeaders(get.HTTPHeaders)
	req.Host = req.Header.Get("Host")
	return req, nil
}

// probeURL joins the parts; a path that does not parse is passed along as it is, as the
// API server accepted it.
func probeURL(scheme, host string, port int, path string) *url.URL {
	u, err := url.Parse(path)
	if err != nil {
		u = &url.URL{Path: path}
	}
	u.Scheme = scheme
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))
	return u
}

func probeHeaders(list []v1.HTTPHeader) http.Header {
	h := make(http.Header, len(list)+2)
	for _, kv := range list {
		h.Add(kv.Name, kv.Value)
	}
	if _, ok := h["User-Agent"]; !ok {
		h.Set("User-Agent", UserAgent())
	}
	if _, ok := h["Accept"]; !ok {
		h.Set("Accept", "*/*")
	} else if h.Get("Accept") == "" {
		h.Del("Accept")
	}
	return h
}

// Probe sends req and judges the answer: 200–399 passes, anything else fails, and so does
// a request that cannot complete within timeout. Redirects to the same host are followed;
// a redirect to another host is not, and counts as a pass with a warning.
func (p *HTTPProber) Probe(ctx context.Context, req *http.Request, timeout time.Duration) (Result, string, error) {
	client := &http.Client{Timeout: timeout, Transport: p.transport, CheckRedirect: sameHostRedirects}
	res, err := client.Do(req.WithContext(ctx))
	if err != nil {
		// Refused, timed out, reset: the container did not answer, which is a failure.
		return Failure, err.Error(), nil
	}
	defer res.Body.Close()
	body, err := utilio.ReadAtMost(res.Body, maxOutput)
	if err != nil && !errors.Is(err, utilio.ErrLimitReached) {
		return Failure, "", err
	}
	return judgeHTTP(req.URL, res.StatusCode, string(body))
}

func judgeHTTP(u *url.URL, code int, body string) (Result, string, error) {
	switch {
	case code >= http.StatusOK && code < http.StatusMultipleChoices:
		klog.V(4).InfoS("HTTP probe succeeded", "url", u.String(), "statusCode", code)
		return Success, body, nil
	case code >= http.StatusMultipleChoices && code < http.StatusBadRequest:
		// Only an unfollowed redirect (to another host) ends here.
		klog.V(4).InfoS("HTTP probe terminated redirects", "url", u.String(), "statusCode", code)
		return Warning, fmt.Sprintf("Probe terminated redirects, Response body: %v", body), nil
	default:
		klog.V(4).InfoS("HTTP probe failed", "url", u.String(), "statusCode", code, "body", body)
		// The body stays out of the message: events are visible to users who may not
		// be allowed to see what the container answers (upstream issue 99425).
		return Failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", code), nil
	}
}

// sameHostRedirects follows redirects while they stay on the probed host; on another host
// the redirect response itself becomes the answer.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= maxRedirects {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}
