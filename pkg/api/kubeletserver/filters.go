package kubeletserver

import (
	"bufio"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// withAuth authenticates and authorizes every request before any handler runs, so that
// nothing (not even whether a pod exists) is revealed to a caller who may not see it.
// Nobody identified: 401 "Unauthorized". Identified but refused: 403 naming the user,
// verb, resource and subresources. An authorizer that cannot answer: 500.
func withAuth(nodeName string, authn *authenticator, authz Authorizer, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, err := authn.authenticate(r)
		if u == nil {
			if !errors.Is(err, errNoCredentials) {
				klog.ErrorS(err, "Unable to authenticate the request due to an error")
			}
			writeText(w, http.StatusUnauthorized, "Unauthorized")
			return
		}
		attrs := RequestAttributes(nodeName, u, r)
		subresources := make([]string, 0, len(attrs))
		for _, a := range attrs {
			subresources = append(subresources, a.Subresource)
			decision, _, err := authz.Authorize(r.Context(), a)
			if err != nil {
				klog.ErrorS(err, "Authorization error", "user", u.Name, "verb", a.Verb, "resource", a.Resource, "subresource", a.Subresource)
				writeText(w, http.StatusInternalServerError, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=%s, subresource=%s)", u.Name, a.Verb, a.Resource, a.Subresource))
				return
			}
			if decision == DecisionAllow {
				next.ServeHTTP(w, r)
				return
			}
		}
		a := attrs[0]
		klog.V(2).InfoS("Forbidden", "user", u.Name, "verb", a.Verb, "resource", a.Resource, "subresource(s)", subresources)
		writeText(w, http.StatusForbidden, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource(s)=%v)\n", u.Name, a.Verb, a.Resource, subresources))
	})
}

// writeText writes a plain-text answer, as go-restful's WriteErrorString does.
func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg))
}

// instrument counts requests in the kubelet_http_* metrics and, at -v=3 and above, logs
// each one with its status and latency (upstream's httplog).
func (s *Server) instrument(next http.Handler, serverType string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done := s.metrics.observe(r.Method, r.URL.Path, serverType)
		defer done()
		if !klog.V(3).Enabled() {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		klog.V(3).InfoS("HTTP", "verb", r.Method, "URI", r.RequestURI, "latency", time.Since(start),
			"userAgent", r.UserAgent(), "srcIP", r.RemoteAddr, "resp", rec.code())
	})
}

// statusRecorder notes the status written; it keeps the writer's flushing and hijacking
// (streams and upgrades need them).
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := r.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("response writer cannot hijack the connection")
	}
	r.status = http.StatusSwitchingProtocols
	return h.Hijack()
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) code() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

// newTLSErrorLog sends the HTTP server's own messages (TLS handshake failures: scanners,
// clients that do not trust a self-signed certificate, no certificate yet) to klog at -v=2.
func newTLSErrorLog() *log.Logger {
	return log.New(klogWriter{}, "", 0)
}

type klogWriter struct{}

func (klogWriter) Write(p []byte) (int, error) {
	klog.V(2).InfoS(strings.TrimSpace(string(p)))
	return len(p), nil
}
