package stats

import (
	"compress/gzip"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// ResourceMetricsPath is where upstream serves the resource metrics.
const ResourceMetricsPath = "/metrics/resource"

// family is one metric of /metrics/resource, with upstream's name, help
// (component-base prefixes the stability level) and type.
type family struct {
	name, help, kind string
}

// The resource metrics. Upstream's scrape_error, deprecated in 1.29 and
// ALPHA, has been hidden since 1.30 and is not served; resource_scrape_error
// replaces it.
var (
	nodeCPUUsage = family{"node_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the node in core-seconds", "counter"}
	nodeMemoryUsage = family{"node_memory_working_set_bytes",
		"[STABLE] Current working set of the node in bytes", "gauge"}
	nodeSwapUsage = family{"node_swap_usage_bytes",
		"[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems", "gauge"}
	containerCPUUsage = family{"container_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the container in core-seconds", "counter"}
	containerMemoryUsage = family{"container_memory_working_set_bytes",
		"[STABLE] Current working set of the container in bytes", "gauge"}
	containerSwapUsage = family{"container_swap_usage_bytes",
		"[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems", "gauge"}
	containerSwapLimit = family{"container_swap_limit_bytes",
		"[ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems", "gauge"}
	containerStartTime = family{"container_start_time_seconds",
		"[STABLE] Start time of the container since unix epoch in seconds", "gauge"}
	podCPUUsage = family{"pod_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the pod in core-seconds", "counter"}
	podMemoryUsage = family{"pod_memory_working_set_bytes",
		"[STABLE] Current working set of the pod in bytes", "gauge"}
	podSwapUsage = family{"pod_swap_usage_bytes",
		"[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems", "gauge"}
	resourceScrapeError = family{"resource_scrape_error",
		"[STABLE] 1 if there was an error while getting container metrics, 0 otherwise", "gauge"}
)

// textContentType is the Prometheus text format, version 0.0.4, which
// metrics-server and Prometheus both read.
const textContentType = "text/plain; version=0.0.4; charset=utf-8"

// NewResourceMetricsHandler serves /metrics/resource: the node's, pods' and
// containers' CPU time, working set and swap, stamped with the time their
// figures were taken (metrics-server computes CPU rates from two scrapes),
// in the Prometheus text format, gzipped when the client accepts it. Each
// scrape reads a fresh CPU-and-memory summary, so gone containers simply
// stop appearing.
func NewResourceMetricsHandler(sp SummaryProvider) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mw := metricsWriters.Get().(*metricsWriter)
		defer metricsWriters.Put(mw)
		mw.reset()
		s, err := sp.GetCPUAndMemoryStats(r.Context())
		if err != nil {
			klog.ErrorS(err, "Error getting summary for resourceMetric prometheus endpoint")
			mw.add(resourceScrapeError, nil, 1, time.Time{})
		} else {
			mw.addSummary(s)
			mw.add(resourceScrapeError, nil, 0, time.Time{})
		}
		body := mw.render()
		w.Header().Set("Content-Type", textContentType)
		w.Header().Add("Vary", "Accept-Encoding")
		if !acceptsGzip(r) {
			_, _ = w.Write(body)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzipWriters.Get().(*gzip.Writer)
		defer gzipWriters.Put(zw)
		zw.Reset(w)
		_, _ = zw.Write(body)
		_ = zw.Close()
	})
}

var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, _, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(enc, "gzip") {
			return true
		}
	}
	return false
}

// metricsWriter collects the samples of one scrape by family and renders
// them with the families in name order, as Prometheus clients do.
type metricsWriter struct {
	samples map[family][]byte // family → its rendered sample lines
	out     []byte
	seen    map[[2]string]bool // pods already written (namespace, name)
}

var metricsWriters = sync.Pool{New: func() any {
	return &metricsWriter{samples: map[family][]byte{}, seen: map[[2]string]bool{}}
}}

func (mw *metricsWriter) reset() {
	for f, b := range mw.samples {
		mw.samples[f] = b[:0]
	}
	clear(mw.seen)
	mw.out = mw.out[:0]
}

func (mw *metricsWriter) addSummary(s *statsapi.Summary) {
	n := s.Node
	if n.CPU != nil && n.CPU.UsageCoreNanoSeconds != nil {
		mw.add(nodeCPUUsage, nil, coreSeconds(*n.CPU.UsageCoreNanoSeconds), n.CPU.Time.Time)
	}
	if n.Memory != nil && n.Memory.WorkingSetBytes != nil {
		mw.add(nodeMemoryUsage, nil, float64(*n.Memory.WorkingSetBytes), n.Memory.Time.Time)
	}
	if n.Swap != nil && n.Swap.SwapUsageBytes != nil {
		mw.add(nodeSwapUsage, nil, float64(*n.Swap.SwapUsageBytes), n.Swap.Time.Time)
	}
	for i := range s.Pods {
		pod := &s.Pods[i]
		// A pod listed twice (two ready sandboxes while it is recreated)
		// would make duplicate series, which scrapers reject.
		key := [2]string{pod.PodRef.Namespace, pod.PodRef.Name}
		if mw.seen[key] {
			continue
		}
		mw.seen[key] = true
		for j := range pod.Containers {
			mw.addContainer(pod, &pod.Containers[j])
		}
		mw.addPod(pod)
	}
}

func (mw *metricsWriter) addContainer(pod *statsapi.PodStats, c *statsapi.ContainerStats) {
	// Labels in name order, as Prometheus clients write them.
	labels := []string{"container", c.Name, "namespace", pod.PodRef.Namespace, "pod", pod.PodRef.Name}
	if c.StartTime.Unix() > 0 {
		mw.add(containerStartTime, labels, float64(c.StartTime.UnixNano())/float64(time.Second), time.Time{})
	}
	if c.CPU != nil && c.CPU.UsageCoreNanoSeconds != nil {
		mw.add(containerCPUUsage, labels, coreSeconds(*c.CPU.UsageCoreNanoSeconds), c.CPU.Time.Time)
	}
	if c.Memory != nil && c.Memory.WorkingSetBytes != nil {
		mw.add(containerMemoryUsage, labels, float64(*c.Memory.WorkingSetBytes), c.Memory.Time.Time)
	}
	if c.Swap == nil {
		return
	}
	// The limit is what is available plus what is used, as upstream.
	var used float64
	if c.Swap.SwapUsageBytes != nil {
		used = float64(*c.Swap.SwapUsageBytes)
		mw.add(containerSwapUsage, labels, used, c.Swap.Time.Time)
	}
	if c.Swap.SwapAvailableBytes != nil {
		mw.add(containerSwapLimit, labels, float64(*c.Swap.SwapAvailableBytes)+used, c.Swap.Time.Time)
	}
}

func (mw *metricsWriter) addPod(pod *statsapi.PodStats) {
	labels := []string{"namespace", pod.PodRef.Namespace, "pod", pod.PodRef.Name}
	if pod.CPU != nil && pod.CPU.UsageCoreNanoSeconds != nil {
		mw.add(podCPUUsage, labels, coreSeconds(*pod.CPU.UsageCoreNanoSeconds), pod.CPU.Time.Time)
	}
	if pod.Memory != nil && pod.Memory.WorkingSetBytes != nil {
		mw.add(podMemoryUsage, labels, float64(*pod.Memory.WorkingSetBytes), pod.Memory.Time.Time)
	}
	if pod.Swap != nil && pod.Swap.SwapUsageBytes != nil {
		mw.add(podSwapUsage, labels, float64(*pod.Swap.SwapUsageBytes), pod.Swap.Time.Time)
	}
}

// add renders one sample line: name{label="value",...} value [timestamp-ms].
// labels alternate names and values; a zero ts writes no timestamp.
func (mw *metricsWriter) add(f family, labels []string, v float64, ts time.Time) {
	b := append(mw.samples[f], f.name...)
	if len(labels) > 0 {
		b = append(b, '{')
		for i := 0; i < len(labels); i += 2 {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, labels[i]...)
			b = append(b, `="`...)
			b = appendLabelValue(b, labels[i+1])
			b = append(b, '"')
		}
		b = append(b, '}')
	}
	b = append(b, ' ')
	b = strconv.AppendFloat(b, v, 'g', -1, 64)
	if !ts.IsZero() {
		b = append(b, ' ')
		b = strconv.AppendInt(b, ts.UnixMilli(), 10)
	}
	mw.samples[f] = append(b, '\n')
}

// appendLabelValue escapes a label value as the text format wants.
func appendLabelValue(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			b = append(b, `\\`...)
		case '"':
			b = append(b, `\"`...)
		case '\n':
			b = append(b, `\n`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// render writes the families that have samples, in name order.
func (mw *metricsWriter) render() []byte {
	families := make([]family, 0, len(mw.samples))
	for f, b := range mw.samples {
		if len(b) > 0 {
			families = append(families, f)
		}
	}
	slices.SortFunc(families, func(a, b family) int { return strings.Compare(a.name, b.name) })
	out := mw.out[:0]
	for _, f := range families {
		out = append(out, "# HELP "...)
		out = append(out, f.name...)
		out = append(out, ' ')
		out = append(out, f.help...)
		out = append(out, "\n# TYPE "...)
		out = append(out, f.name...)
		out = append(out, ' ')
		out = append(out, f.kind...)
		out = append(out, '\n')
		out = append(out, mw.samples[f]...)
	}
	mw.out = out
	return out
}

func coreSeconds(nanos uint64) float64 { return float64(nanos) / float64(time.Second) }
