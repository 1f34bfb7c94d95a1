package cri

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the kubelet's runtime operation metrics, with upstream's names
// and labels so existing dashboards and alerts keep working:
//
//	kubelet_runtime_operations_total{operation_type}
//	kubelet_runtime_operations_duration_seconds{operation_type}
//	kubelet_runtime_operations_errors_total{operation_type}
//	kubelet_run_podsandbox_duration_seconds{runtime_handler}
//	kubelet_run_podsandbox_errors_total{runtime_handler}
type Metrics struct {
	operations            *prometheus.CounterVec
	operationDuration     *prometheus.HistogramVec
	operationErrors       *prometheus.CounterVec
	runPodSandboxDuration *prometheus.HistogramVec
	runPodSandboxErrors   *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg. Calling it again
// with the same registry returns metrics backed by the already registered
// collectors, so the runtime and image clients may each call it.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "runtime_operations_total",
			Help: "[ALPHA] Cumulative number of runtime operations by operation type.",
		}, []string{"operation_type"}),
		operationDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "runtime_operations_duration_seconds",
			Help:    "[ALPHA] Duration in seconds of runtime operations. Broken down by operation type.",
			Buckets: prometheus.ExponentialBuckets(.005, 2.5, 14),
		}, []string{"operation_type"}),
		operationErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "runtime_operations_errors_total",
			Help: "[ALPHA] Cumulative number of runtime operation errors by operation type.",
		}, []string{"operation_type"}),
		runPodSandboxDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "run_podsandbox_duration_seconds",
			Help:    "[ALPHA] Duration in seconds of the run_podsandbox operations. Broken down by RuntimeClass.Handler.",
			Buckets: prometheus.DefBuckets,
		}, []string{"runtime_handler"}),
		runPodSandboxErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "run_podsandbox_errors_total",
			Help: "[ALPHA] Cumulative number of the run_podsandbox operation errors by RuntimeClass.Handler.",
		}, []string{"runtime_handler"}),
	}
	var err error
	if m.operations, err = registerOrReuse(reg, m.operations); err != nil {
		return nil, err
	}
	if m.operationDuration, err = registerOrReuse(reg, m.operationDuration); err != nil {
		return nil, err
	}
	if m.operationErrors, err = registerOrReuse(reg, m.operationErrors); err != nil {
		return nil, err
	}
	if m.runPodSandboxDuration, err = registerOrReuse(reg, m.runPodSandboxDuration); err != nil {
		return nil, err
	}
	if m.runPodSandboxErrors, err = registerOrReuse(reg, m.runPodSandboxErrors); err != nil {
		return nil, err
	}
	return m, nil
}

// registerOrReuse registers c, or returns the identical collector that is
// already registered.
func registerOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// record counts one operation, its duration, and its error if any.
func (m *Metrics) record(operation string, start time.Time, err error) {
	m.operations.WithLabelValues(operation).Inc()
	m.operationDuration.WithLabelValues(operation).Observe(time.Since(start).Seconds())
	if err != nil {
		m.operationErrors.WithLabelValues(operation).Inc()
	}
}

// recordRunPodSandbox adds the per-runtime-handler sandbox metrics.
func (m *Metrics) recordRunPodSandbox(runtimeHandler string, start time.Time, err error) {
	m.runPodSandboxDuration.WithLabelValues(runtimeHandler).Observe(time.Since(start).Seconds())
	if err != nil {
		m.runPodSandboxErrors.WithLabelValues(runtimeHandler).Inc()
	}
}
