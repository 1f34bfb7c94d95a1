package cadvisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
)

// errNoDescriptors: the runtime implements ListMetricDescriptors but describes no metric
// (CRI-O with its metrics turned off); the summary serves instead.
var errNoDescriptors = errors.New("the runtime describes no pod sandbox metrics")

// recheckUnsupported is how long a runtime without pod sandbox metrics is believed before
// it is asked again (it may have been upgraded): asking on every scrape would count a
// failed runtime operation each time.
const recheckUnsupported = 10 * time.Minute

// runtimeMetrics passes the runtime's pod sandbox metrics through, as upstream's CRI
// metrics collector does: each metric with the name, help and label keys of the
// runtime's descriptor, its help annotated "[INTERNAL] " as component-base annotates
// the descriptors' stability level, and the runtime's timestamp when it gives one. It
// is used by one collection at a time.
type runtimeMetrics struct {
	runtime Runtime
	now     func() time.Time

	descs            map[string]*prometheus.Desc // by name; nil until read
	unsupportedUntil time.Time                   // the runtime lacked the calls when last asked
	unsupportedErr   error
}

func (r *runtimeMetrics) collect(ctx context.Context) ([]prometheus.Metric, error) {
	if r.now().Before(r.unsupportedUntil) {
		return nil, r.unsupportedErr
	}
	metrics, err := r.read(ctx)
	if cri.IsNotSupported(err) || errors.Is(err, errNoDescriptors) {
		r.descs = nil
		r.unsupportedUntil, r.unsupportedErr = r.now().Add(recheckUnsupported), err
	}
	return metrics, err
}

func (r *runtimeMetrics) read(ctx context.Context) ([]prometheus.Metric, error) {
	if r.descs == nil {
		descs, err := r.runtime.ListMetricDescriptors(ctx)
		if err != nil {
			return nil, err
		}
		if len(descs) == 0 {
			return nil, errNoDescriptors
		}
		r.descs = promDescs(descs)
	}
	pods, err := r.runtime.ListPodSandboxMetrics(ctx)
	if err != nil {
		return nil, err
	}
	var out []prometheus.Metric
	var undescribed, invalid int
	add := func(ms []*runtimeapi.Metric) {
		for _, m := range ms {
			pm, err := r.convert(m)
			switch {
			case pm != nil:
				out = append(out, pm)
			case err == nil:
				undescribed++
			default:
				invalid++
				klog.V(4).InfoS("Dropped an invalid metric from the runtime", "name", m.GetName(), "err", err)
			}
		}
	}
	for _, pod := range pods {
		add(pod.GetMetrics())
		for _, c := range pod.GetContainerMetrics() {
			add(c.GetMetrics())
		}
	}
	if undescribed > 0 {
		// The runtime reports metrics it did not describe: it may have been replaced by
		// a newer one. Its descriptors are read again next time.
		klog.V(2).InfoS("The runtime reported metrics without a descriptor; dropped them", "count", undescribed)
		r.descs = nil
	}
	if invalid > 0 {
		klog.InfoS("Dropped metrics from the runtime that do not match their descriptors", "count", invalid)
	}
	return out, nil
}

// promDescs are the runtime's descriptors as Prometheus descriptors; their labels are
// variable labels, one value per container.
func promDescs(descs []*runtimeapi.MetricDescriptor) map[string]*prometheus.Desc {
	out := make(map[string]*prometheus.Desc, len(descs))
	for _, d := range descs {
		out[d.GetName()] = prometheus.NewDesc(d.GetName(), "[INTERNAL] "+d.GetHelp(), d.GetLabelKeys(), nil)
	}
	return out
}

// convert turns one runtime metric into a Prometheus one: nil and no error when no
// descriptor has its name, an error when it does not fit its descriptor.
func (r *runtimeMetrics) convert(m *runtimeapi.Metric) (prometheus.Metric, error) {
	desc, ok := r.descs[m.GetName()]
	if !ok {
		return nil, nil
	}
	pm, err := prometheus.NewConstMetric(desc, valueType(m.GetMetricType()), float64(m.GetValue().GetValue()), m.GetLabelValues()...)
	if err != nil {
		return nil, fmt.Errorf("metric %s: %w", m.GetName(), err)
	}
	// A zero timestamp means the runtime collected the value on request.
	if m.GetTimestamp() == 0 {
		return pm, nil
	}
	return prometheus.NewMetricWithTimestamp(time.Unix(0, m.GetTimestamp()), pm), nil
}

func valueType(t runtimeapi.MetricType) prometheus.ValueType {
	switch t {
	case runtimeapi.MetricType_COUNTER:
		return prometheus.CounterValue
	case runtimeapi.MetricType_GAUGE:
		return prometheus.GaugeValue
	}
	return prometheus.UntypedValue
}
