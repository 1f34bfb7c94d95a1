package probe

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// testServer answers /status/<code>, redirects, a slow path and a big body.
func testServer(t *testing.T, tls bool) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.PathValue("code"))
		w.WriteHeader(code)
		_, _ = w.Write([]byte("body of " + r.PathValue("code")))
	})
	mux.HandleFunc("/same-host", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/status/200", http.StatusFound)
	})
	mux.HandleFunc("/same-host-to-500", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/status/500", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/other-host", func(w http.ResponseWriter, r *http.Request) {
		// Same server, but named "localhost" instead of 127.0.0.1: another host.
		_, port, _ := net.SplitHostPort(r.Host)
		http.Redirect(w, r, "http://localhost:"+port+"/status/200", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(5 * time.Second):
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("b", 50<<10)))
	})
	var s *httptest.Server
	if tls {
		s = httptest.NewTLSServer(mux)
	} else {
		s = httptest.NewServer(mux)
	}
	t.Cleanup(s.Close)
	return s
}

func hostPort(t *testing.T, s *httptest.Server) (string, int) {
	u, _ := url.Parse(s.URL)
	port, _ := strconv.Atoi(u.Port())
	return u.Hostname(), port
}

func probeHTTP(t *testing.T, s *httptest.Server, scheme v1.URIScheme, path string, timeout time.Duration) (Result, string, error) {
	t.Helper()
	host, port := hostPort(t, s)
	req, err := NewHTTPRequest(&v1.HTTPGetAction{Path: path, Port: intstr.FromInt(port), Scheme: scheme}, &v1.Container{}, host)
	if err != nil {
		t.Fatal(err)
	}
	return NewHTTPProber().Probe(context.Background(), req, timeout)
}

func TestHTTPStatusCodesAndRedirects(t *testing.T) {
	s := testServer(t, false)
	for _, tc := range []struct {
		path       string
		want       Result
		wantOutput string
	}{
		{"/status/200", Success, "body of 200"},
		{"/status/204", Success, ""},
		{"/status/399", Warning, "Probe terminated redirects, Response body: body of 399"},
		{"/status/400", Failure, "HTTP probe failed with statuscode: 400"},
		{"/status/404", Failure, "HTTP probe failed with statuscode: 404"},
		{"/status/503", Failure, "HTTP probe failed with statuscode: 503"},
		{"/same-host", Success, "body of 200"},
		{"/same-host-to-500", Failure, "HTTP probe failed with statuscode: 500"},
		{"/other-host", Warning, "Probe terminated redirects, Response body: "},
	} {
		got, output, err := probeHTTP(t, s, "", tc.path, 2*time.Second)
		if got != tc.want || err != nil || !strings.HasPrefix(output, tc.wantOutput) {
			t.Errorf("GET %s = %q, %q, %v; want %q, %q...", tc.path, got, output, err, tc.want, tc.wantOutput)
		}
	}
}

func TestHTTPRedirectLoopFails(t *testing.T) {
	got, output, err := probeHTTP(t, testServer(t, false), "", "/loop", 2*time.Second)
	if got != Failure || err != nil || !strings.Contains(output, "stopped after 10 redirects") {
		t.Errorf("redirect loop = %q, %q, %v", got, output, err)
	}
}

func TestHTTPTimeoutFails(t *testing.T) {
	start := time.Now()
	got, output, err := probeHTTP(t, testServer(t, false), "", "/slow", 200*time.Millisecond)
	if got != Failure || err != nil || !strings.Contains(output, "Timeout") {
		t.Errorf("slow server = %q, %q, %v; want a timeout failure", got, output, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("probe took %v, want about the 200ms timeout", took)
	}
}

func TestHTTPClosedPortFails(t *testing.T) {
	s := testServer(t, false)
	s.Close()
	got, output, err := probeHTTP(t, s, "", "/status/200", time.Second)
	if got != Failure || err != nil || !strings.Contains(output, "connection refused") {
		t.Errorf("closed port = %q, %q, %v", got, output, err)
	}
}

func TestHTTPSSkipsCertificateVerification(t *testing.T) {
	got, output, err := probeHTTP(t, testServer(t, true), v1.URISchemeHTTPS, "/status/200", 2*time.Second)
	if got != Success || err != nil {
		t.Errorf("self-signed HTTPS = %q, %q, %v; want success", got, output, err)
	}
}

func TestHTTPBodyIsCutAt10KiB(t *testing.T) {
	got, output, err := probeHTTP(t, testServer(t, false), "", "/big", 2*time.Second)
	if got != Success || err != nil || len(output) != 10<<10 {
		t.Errorf("big body = %q, %d bytes, %v; want success with 10240 bytes", got, len(output), err)
	}
}

func TestHTTPRequestHeaders(t *testing.T) {
	seen := make(chan *http.Request, 1)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r }))
	defer s.Close()
	host, port := hostPort(t, s)
	c := &v1.Container{Ports: []v1.ContainerPort{{Name: "web", ContainerPort: int32(port)}}}

	for _, tc := range []struct {
		name    string
		headers []v1.HTTPHeader
		check   func(r *http.Request) string
	}{
		{"defaults", nil, func(r *http.Request) string {
			if ua := r.Header.Get("User-Agent"); ua != "kube-probe/1.37" {
				return "User-Agent " + ua
			}
			if a := r.Header.Get("Accept"); a != "*/*" {
				return "Accept " + a
			}
			if r.Header.Get("Accept-Encoding") != "" {
				return "compression asked for"
			}
			if r.URL.RequestURI() != "/healthz?verbose=1" {
				return "URI " + r.URL.RequestURI()
			}
			return ""
		}},
		{"overrides", []v1.HTTPHeader{{Name: "User-Agent", Value: "mine"}, {Name: "X-Custom", Value: "a"}, {Name: "X-Custom", Value: "b"}, {Name: "Host", Value: "example.com"}}, func(r *http.Request) string {
			if ua := r.Header.Get("User-Agent"); ua != "mine" {
				return "User-Agent " + ua
			}
			if v := r.Header.Values("X-Custom"); len(v) != 2 {
				return "X-Custom " + strings.Join(v, ",")
			}
			if r.Host != "example.com" {
				return "Host " + r.Host
			}
			return ""
		}},
		{"empty accept removes it", []v1.HTTPHeader{{Name: "Accept", Value: ""}}, func(r *http.Request) string {
			if _, ok := r.Header["Accept"]; ok {
				return "Accept still sent"
			}
			return ""
		}},
	} {
		get := &v1.HTTPGetAction{Path: "/healthz?verbose=1", Port: intstr.FromString("web"), HTTPHeaders: tc.headers}
		req, err := NewHTTPRequest(get, c, host)
		if err != nil {
			t.Fatal(err)
		}
		if got, out, err := NewHTTPProber().Probe(context.Background(), req, time.Second); got != Success || err != nil {
			t.Fatalf("%s: probe = %q, %q, %v", tc.name, got, out, err)
		}
		if problem := tc.check(<-seen); problem != "" {
			t.Errorf("%s: %s", tc.name, problem)
		}
	}
}

func TestHTTPRequestUnknownNamedPort(t *testing.T) {
	_, err := NewHTTPRequest(&v1.HTTPGetAction{Port: intstr.FromString("nope")}, &v1.Container{}, "10.0.0.1")
	if err == nil {
		t.Error("NewHTTPRequest with an unknown port name succeeded")
	}
}

func TestHTTPRequestHostAndScheme(t *testing.T) {
	req, err := NewHTTPRequest(&v1.HTTPGetAction{Host: "192.0.2.9", Scheme: v1.URISchemeHTTPS, Path: "/x", Port: intstr.FromInt32(443)}, &v1.Container{}, "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if got := req.URL.String(); got != "https://192.0.2.9:443/x" {
		t.Errorf("URL = %s", got)
	}
	req, _ = NewHTTPRequest(&v1.HTTPGetAction{Port: intstr.FromInt32(80)}, &v1.Container{}, "fd00::5")
	if got := req.URL.String(); got != "http://[fd00::5]:80" {
		t.Errorf("URL with pod IPv6 = %s", got)
	}
}
