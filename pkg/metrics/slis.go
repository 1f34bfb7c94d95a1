package metrics

import (
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The component SLI metrics served on /metrics/slis (component-base's slis package): the
// latest result of each health check and the count of every result, as upstream's healthz
// handlers record them on each /healthz request.
var (
	healthcheck = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "kubernetes", Name: "healthcheck",
		Help: stable("This metric records the result of a single healthcheck."),
	}, []string{"name", "type"})
	healthchecksTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kubernetes", Name: "healthchecks_total",
		Help: stable("This metric records the results of all healthcheck."),
	}, []string{"name", "type", "status"})
)

// ObserveHealthcheck records one run of the health check name behind the endpoint
// checkType ("healthz"): gauge 1 and status "success" when err is nil, 0 and "error" otherwise.
func ObserveHealthcheck(name, checkType string, err error) {
	value, status := 1.0, "success"
	if err != nil {
		value, status = 0, "error"
	}
	healthcheck.WithLabelValues(name, checkType).Set(value)
	healthchecksTotal.WithLabelValues(name, checkType, status).Inc()
}

// SLIsHandler serves /metrics/slis. A DELETE resets the health check metrics, as
// upstream's handler with reset does.
func (r *Registries) SLIsHandler() http.Handler {
	serve := promhttp.HandlerFor(r.SLIs, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodDelete {
			healthcheck.Reset()
			healthchecksTotal.Reset()
			_, _ = io.WriteString(w, "metrics reset\n")
			return
		}
		serve.ServeHTTP(w, req)
	})
}
