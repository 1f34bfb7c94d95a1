package prober

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/pod/prober/results"
)

// Label values of prober_probe_total's result label, as upstream.
const (
	metricSuccessful = "successful"
	metricFailed     = "failed"
	metricUnknown    = "unknown"
)

// metrics are upstream's prober_probe_total and prober_probe_duration_seconds.
type metrics struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "prober",
			Name:      "probe_total",
			Help:      "[BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
		}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "prober",
			Name:      "probe_duration_seconds",
			Help:      "[ALPHA] Duration in seconds for a probe response.",
			Buckets:   prometheus.DefBuckets,
		}, []string{"probe_type", "container", "pod", "namespace"}),
	}
	if reg != nil {
		m.total = register(reg, m.total)
		m.duration = register(reg, m.duration)
	}
	return m
}

// register registers c, or returns the collector already registered under its name, so
// that a second manager on the same registry shares the metrics instead of failing.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var dup prometheus.AlreadyRegisteredError
	if errors.As(err, &dup) {
		if existing, ok := dup.ExistingCollector.(C); ok {
			return existing
		}
	}
	klog.ErrorS(err, "Registering prober metric failed")
	return c
}

// workerMetrics holds one worker's label sets, built once.
type workerMetrics struct {
	m                           *metrics
	successful, failed, unknown prometheus.Labels
	duration                    prometheus.Labels
	// counters are the worker's prober_probe_total series by result, looked up on first
	// use so that the label hashing is not paid on every probe. Their labels include the
	// pod UID, so no other worker shares them, and the worker deletes them before it leaves
	// the manager (a successor with the same key comes only after that). The duration
	// series has no pod UID, a same-named pod may share it, so it is not kept.
	counters [3]prometheus.Counter
}

func (m *metrics) forWorker(w *worker) *workerMetrics {
	base := func() prometheus.Labels {
		return prometheus.Labels{
			"probe_type": w.kind.String(),
			"container":  w.container.Name,
			"pod":        w.pod.Name,
			"namespace":  w.pod.Namespace,
		}
	}
	withResult := func(r string) prometheus.Labels {
		l := base()
		l["pod_uid"] = string(w.pod.UID)
		l["result"] = r
		return l
	}
	return &workerMetrics{
		m:          m,
		successful: withResult(metricSuccessful),
		failed:     withResult(metricFailed),
		unknown:    withResult(metricUnknown),
		duration:   base(),
	}
}

// observe counts a probe run by its result; its duration is recorded for passes (and
// unknowns), not for failures, as upstream does: a failure's duration is mostly the timeout.
func (wm *workerMetrics) observe(r results.Result, took time.Duration) {
	switch r {
	case results.Success:
		wm.counter(0, wm.successful).Inc()
		wm.m.duration.With(wm.duration).Observe(took.Seconds())
	case results.Failure:
		wm.counter(1, wm.failed).Inc()
	default:
		wm.counter(2, wm.unknown).Inc()
		wm.m.duration.With(wm.duration).Observe(took.Seconds())
	}
}

func (wm *workerMetrics) counter(i int, labels prometheus.Labels) prometheus.Counter {
	if wm.counters[i] == nil {
		wm.counters[i] = wm.m.total.With(labels)
	}
	return wm.counters[i]
}

// delete drops the worker's series when it stops, so gone containers leave no metrics.
func (wm *workerMetrics) delete() {
	for _, l := range []prometheus.Labels{wm.successful, wm.failed, wm.unknown} {
		wm.m.total.Delete(l)
	}
	wm.m.duration.Delete(wm.duration)
	wm.counters = [3]prometheus.Counter{}
}
