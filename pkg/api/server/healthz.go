// Package server holds nodelet's HTTP endpoints. For now: the healthz endpoint that
// upstream's kubelet serves on healthzBindAddress:healthzPort (127.0.0.1:10248).
package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/metrics"
)

// HealthCheck is one named check behind /healthz.
type HealthCheck struct {
	Name  string
	Check func() error
}

// healthzHandler answers 200 "ok" when every check passes. Otherwise 500 with the failing
// checks named; details are given only with ?verbose, as upstream's healthz does. Each
// check's result goes to the /metrics/slis metrics, as upstream's healthz records it.
func healthzHandler(checks []HealthCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var report strings.Builder
		failed := false
		for _, c := range checks {
			err := c.Check()
			metrics.ObserveHealthcheck(c.Name, "healthz", err)
			if err != nil {
				failed = true
				fmt.Fprintf(&report, "[-]%s failed: reason withheld\n", c.Name)
				klog.V(2).InfoS("Healthz check failed", "check", c.Name, "err", err)
				continue
			}
			fmt.Fprintf(&report, "[+]%s ok\n", c.Name)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if failed {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, report.String()+"healthz check failed\n")
			return
		}
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			fmt.Fprint(w, report.String()+"healthz check passed\n")
			return
		}
		fmt.Fprint(w, "ok")
	})
}

// HealthzServer serves /healthz until its context ends.
type HealthzServer struct {
	srv *http.Server
	ln  net.Listener
}

// ListenHealthz binds address:port now, so a port conflict is reported at start-up.
func ListenHealthz(address string, port int32, checks ...HealthCheck) (*HealthzServer, error) {
	mux := http.NewServeMux()
	h := healthzHandler(append([]HealthCheck{{Name: "ping", Check: func() error { return nil }}}, checks...))
	mux.Handle("/healthz", h)
	mux.Handle("/healthz/", h)
	addr := net.JoinHostPort(address, strconv.Itoa(int(port)))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("healthz server: %w", err)
	}
	return &HealthzServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln}, nil
}

// Addr is the bound address.
func (s *HealthzServer) Addr() string { return s.ln.Addr().String() }

// Serve blocks until ctx ends, then shuts the server down.
func (s *HealthzServer) Serve(ctx context.Context) {
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = s.srv.Shutdown(shutdownCtx)
	}()
	if err := s.srv.Serve(s.ln); err != nil && err != http.ErrServerClosed {
		klog.ErrorS(err, "Healthz server failed")
	}
}
