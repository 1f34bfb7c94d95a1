package kubeletserver

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/certificate"
)

// httpMetrics are upstream's kubelet_http_* metrics, labelled by method, path bucket,
// server type (readwrite or readonly) and whether the request is long-running. Their help
// texts carry the stability prefix upstream's registry adds ("[ALPHA] ").
type httpMetrics struct {
	requests *prometheus.CounterVec
	inflight *prometheus.GaugeVec
	duration *prometheus.HistogramVec
}

var httpLabels = []string{"method", "path", "server_type", "long_running"}

// RegisterMetrics registers the kubelet_http_* metrics on reg, as upstream registers them
// at start whether or not the API is served; a server built later on the same registry
// shares them.
func RegisterMetrics(reg prometheus.Registerer) error {
	_, err := newHTTPMetrics(reg)
	return err
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "http_requests_total",
			Help: "[ALPHA] Number of the http requests received since the server started",
		}, httpLabels),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "http_inflight_requests",
			Help: "[ALPHA] Number of the inflight http requests",
		}, httpLabels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "http_requests_duration_seconds",
			Help: "[ALPHA] Duration in seconds to serve http requests", Buckets: prometheus.DefBuckets,
		}, httpLabels),
	}
	if reg == nil {
		return m, nil
	}
	if err := register(reg, &m.requests); err != nil {
		return nil, err
	}
	if err := register(reg, &m.inflight); err != nil {
		return nil, err
	}
	return m, register(reg, &m.duration)
}

// register registers c; one already registered (a second server on the same registry)
// is shared rather than an error.
func register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	var already prometheus.AlreadyRegisteredError
	switch err := reg.Register(*c); {
	case errors.As(err, &already):
		if existing, ok := already.ExistingCollector.(C); ok {
			*c = existing
		}
	case err != nil:
		return err
	}
	return nil
}

// metricBuckets are the path roots counted under their own name; others count as "other"
// so that arbitrary paths cannot create unbounded label values.
var metricBuckets = map[string]bool{
	"healthz": true, "pods": true, "stats": true, "metrics": true, "metrics/cadvisor": true,
	"metrics/probes": true, "metrics/resource": true, "metrics/slis": true, "run": true, "exec": true,
	"attach": true, "portForward": true, "containerLogs": true, "configz": true, "runningpods": true,
	"checkpoint": true, "logs": true, "debug": true, "pprof": true, "flagz": true, "statusz": true,
}

var metricMethods = map[string]bool{"OPTIONS": true, "GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true, "TRACE": true, "CONNECT": true}

// longRunningBuckets are upstream's (its "portforward" never matches the portForward path
// root; kept as upstream counts it).
var longRunningBuckets = map[string]bool{"exec": true, "attach": true, "portforward": true, "debug": true}

// metricLabels are the label values for a request, as upstream computes them.
func metricLabels(method, path, serverType string) []string {
	if !metricMethods[method] {
		method = "other"
	}
	bucket := urlRootPath(path)
	if !metricBuckets[bucket] {
		bucket = "other"
	}
	return []string{method, bucket, serverType, strconv.FormatBool(longRunningBuckets[bucket])}
}

// urlRootPath is the first path element, or the first two under /metrics.
func urlRootPath(path string) string {
	parts := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 3)
	if parts[0] == "metrics" && len(parts) > 1 {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}

// observe counts a request and returns the function that ends it.
func (m *httpMetrics) observe(method, path, serverType string) func() {
	if m == nil {
		return func() {}
	}
	labels := metricLabels(method, path, serverType)
	start := time.Now()
	m.requests.WithLabelValues(labels...).Inc()
	inflight := m.inflight.WithLabelValues(labels...)
	inflight.Inc()
	return func() {
		inflight.Dec()
		m.duration.WithLabelValues(labels...).Observe(time.Since(start).Seconds())
	}
}

// servingMetrics are upstream's serving-certificate metrics, registered with
// serverTLSBootstrap as upstream does.
type servingMetrics struct {
	rotation    prometheus.Histogram
	renewErrors prometheus.Counter
}

func newServingMetrics(reg prometheus.Registerer, current func() certificate.Manager) (*servingMetrics, error) {
	m := &servingMetrics{
		rotation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "certificate_manager_server_rotation_seconds",
			Help:    "[ALPHA] Histogram of the number of seconds the previous certificate lived before being rotated.",
			Buckets: []float64{60, 3600, 14400, 86400, 604800, 2592000, 7776000, 15552000, 31104000, 124416000},
		}),
		renewErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "server_expiration_renew_errors",
			Help: "[ALPHA] Counter of certificate renewal errors.",
		}),
	}
	var ttl prometheus.Collector = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Subsystem: "kubelet", Name: "certificate_manager_server_ttl_seconds",
		Help: "[ALPHA] Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. " +
			"The value is in seconds until certificate expiry (negative if already expired). " +
			"If serving certificate is invalid or unused, the value will be +INF.",
	}, func() float64 {
		if mgr := current(); mgr != nil {
			if c := mgr.Current(); c != nil && c.Leaf != nil {
				return math.Trunc(time.Until(c.Leaf.NotAfter).Seconds())
			}
		}
		return math.Inf(1)
	})
	if reg == nil {
		return m, nil
	}
	if err := register(reg, &m.rotation); err != nil {
		return nil, err
	}
	if err := register(reg, &m.renewErrors); err != nil {
		return nil, err
	}
	return m, register(reg, &ttl)
}
