package kubeletserver

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/api/server"
	"github.com/nodelet/nodelet/pkg/metrics"
)

// installHealthz serves /healthz as upstream's healthz package does: every check at
// /healthz (200 "ok", or 500 naming the failed checks with reasons withheld; ?verbose
// lists them; ?exclude=<name> skips one), and each check alone at /healthz/<name>. The
// checks run at /healthz are recorded for /metrics/slis, as upstream records them.
func (s *Server) installHealthz(mux *http.ServeMux) {
	checks := []server.HealthCheck{
		{Name: "ping", Check: func() error { return nil }},
		{Name: "log", Check: logHealth.check},
		{Name: "syncloop", Check: s.deps.Host.SyncLoopHealthy},
	}
	checks = append(checks, s.deps.HealthChecks...)
	mux.Handle(healthzPath, rootHealth(checks))
	for _, c := range checks {
		mux.Handle(healthzPath+"/"+c.Name, singleHealth(c))
	}
}

func rootHealth(checks []server.HealthCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		excluded := r.URL.Query()["exclude"]
		var out strings.Builder
		var failed []string
		for _, c := range checks {
			if slices.Contains(excluded, c.Name) {
				excluded = slices.DeleteFunc(excluded, func(e string) bool { return e == c.Name })
				fmt.Fprintf(&out, "[+]%s excluded: ok\n", c.Name)
				continue
			}
			err := c.Check()
			metrics.ObserveHealthcheck(c.Name, "healthz", err)
			if err != nil {
				klog.V(2).InfoS("Health check failed", "check", c.Name, "err", err)
				fmt.Fprintf(&out, "[-]%s failed: reason withheld\n", c.Name)
				failed = append(failed, c.Name)
				continue
			}
			fmt.Fprintf(&out, "[+]%s ok\n", c.Name)
		}
		if len(excluded) > 0 {
			fmt.Fprintf(&out, "warn: some health checks cannot be excluded: no matches for %s\n", quoted(excluded))
		}
		if len(failed) > 0 {
			http.Error(w, out.String()+"healthz check failed", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if _, verbose := r.URL.Query()["verbose"]; !verbose {
			fmt.Fprint(w, "ok")
			return
		}
		fmt.Fprint(w, out.String()+"healthz check passed\n")
	})
}

func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ",")
}

func singleHealth(c server.HealthCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := c.Check(); err != nil {
			http.Error(w, fmt.Sprintf("internal server error: %v", err), http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "ok")
	})
}

// logHealth is upstream's "log" check: logging works if klog could flush within the
// last two minutes (a blocked log destination blocks the flush).
var logHealth = &logChecker{}

type logChecker struct {
	start        sync.Once
	lastVerified atomic.Int64
}

func (l *logChecker) check() error {
	l.start.Do(func() {
		l.lastVerified.Store(time.Now().UnixNano())
		go func() {
			for range time.Tick(time.Minute) {
				klog.Flush()
				l.lastVerified.Store(time.Now().UnixNano())
			}
		}()
	})
	if time.Since(time.Unix(0, l.lastVerified.Load())) < 2*time.Minute {
		return nil
	}
	return errors.New("logging blocked")
}
