package stats

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// ResourceMetricsPath is where upstream serves the resource metrics.
const ResourceMetricsPath = "/metrics/resource"

// The resource metrics, with upstream's names, labels and help texts
// (component-base prefixes the stability level to the help). Upstream's
// scrape_error, deprecated in 1.29 and ALPHA, is hidden since 1.30 and so
// not served; resource_scrape_error replaces it.
var (
	containerLabels = []string{"container", "pod", "namespace"}
	podLabels       = []string{"pod", "namespace"}

	nodeCPUUsageDesc = prometheus.NewDesc("node_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	nodeMemoryUsageDesc = prometheus.NewDesc("node_memory_working_set_bytes",
		"[STABLE] Current working set of the node in bytes", nil, nil)
	nodeSwapUsageDesc = prometheus.NewDesc("node_swap_usage_bytes",
		"[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems", nil, nil)
	containerCPUUsageDesc = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the container in core-seconds", containerLabels, nil)
	containerMemoryUsageDesc = prometheus.NewDesc("container_memory_working_set_bytes",
		"[STABLE] Current working set of the container in bytes", containerLabels, nil)
	containerSwapUsageDesc = prometheus.NewDesc("container_swap_usage_bytes",
		"[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems", containerLabels, nil)
	containerSwapLimitDesc = prometheus.NewDesc("container_swap_limit_bytes",
		"[ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems", containerLabels, nil)
	podCPUUsageDesc = prometheus.NewDesc("pod_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the pod in core-seconds", podLabels, nil)
	podMemoryUsageDesc = prometheus.NewDesc("pod_memory_working_set_bytes",
		"[STABLE] Current working set of the pod in bytes", podLabels, nil)
	podSwapUsageDesc = prometheus.NewDesc("pod_swap_usage_bytes",
		"[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems", podLabels, nil)
	resourceScrapeErrorDesc = prometheus.NewDesc("resource_scrape_error",
		"[STABLE] 1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
	containerStartTimeDesc = prometheus.NewDesc("container_start_time_seconds",
		"[STABLE] Start time of the container since unix epoch in seconds", containerLabels, nil)
)

// NewResourceMetricsHandler serves /metrics/resource: the node's, pods' and
// containers' CPU time, working set and swap, with the sample timestamps
// metrics-server computes rates from, in the Prometheus text format.
func NewResourceMetricsHandler(sp SummaryProvider) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&resourceCollector{sp: sp})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// resourceCollector reads a fresh CPU-and-memory summary on every scrape,
// so metrics of gone containers simply stop (no stale series).
type resourceCollector struct {
	sp SummaryProvider
}

func (c *resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeCPUUsageDesc, nodeMemoryUsageDesc, nodeSwapUsageDesc,
		containerStartTimeDesc, containerCPUUsageDesc, containerMemoryUsageDesc, containerSwapUsageDesc,
		containerSwapLimitDesc, podCPUUsageDesc, podMemoryUsageDesc, podSwapUsageDesc, resourceScrapeErrorDesc} {
		ch <- d
	}
}

func (c *resourceCollector) Collect(ch chan<- prometheus.Metric) {
	var scrapeError float64
	defer func() {
		ch <- prometheus.MustNewConstMetric(resourceScrapeErrorDesc, prometheus.GaugeValue, scrapeError)
	}()
	// promhttp gives collectors no request context.
	s, err := c.sp.GetCPUAndMemoryStats(context.TODO())
	if err != nil {
		scrapeError = 1
		klog.ErrorS(err, "Error getting summary for resourceMetric prometheus endpoint")
		return
	}
	collectNode(ch, s.Node)
	for i := range s.Pods {
		pod := &s.Pods[i]
		for j := range pod.Containers {
			collectContainer(ch, pod, &pod.Containers[j])
		}
		collectPod(ch, pod)
	}
}

func collectNode(ch chan<- prometheus.Metric, n statsapi.NodeStats) {
	if n.CPU != nil && n.CPU.UsageCoreNanoSeconds != nil {
		sample(ch, n.CPU.Time.Time, nodeCPUUsageDesc, prometheus.CounterValue, coreSeconds(*n.CPU.UsageCoreNanoSeconds))
	}
	if n.Memory != nil && n.Memory.WorkingSetBytes != nil {
		sample(ch, n.Memory.Time.Time, nodeMemoryUsageDesc, prometheus.GaugeValue, float64(*n.Memory.WorkingSetBytes))
	}
	if n.Swap != nil && n.Swap.SwapUsageBytes != nil {
		sample(ch, n.Swap.Time.Time, nodeSwapUsageDesc, prometheus.GaugeValue, float64(*n.Swap.SwapUsageBytes))
	}
}

func collectContainer(ch chan<- prometheus.Metric, pod *statsapi.PodStats, c *statsapi.ContainerStats) {
	labels := []string{c.Name, pod.PodRef.Name, pod.PodRef.Namespace}
	if c.StartTime.Unix() > 0 {
		ch <- prometheus.MustNewConstMetric(containerStartTimeDesc, prometheus.GaugeValue,
			float64(c.StartTime.UnixNano())/float64(time.Second), labels...)
	}
	if c.CPU != nil && c.CPU.UsageCoreNanoSeconds != nil {
		sample(ch, c.CPU.Time.Time, containerCPUUsageDesc, prometheus.CounterValue, coreSeconds(*c.CPU.UsageCoreNanoSeconds), labels...)
	}
	if c.Memory != nil && c.Memory.WorkingSetBytes != nil {
		sample(ch, c.Memory.Time.Time, containerMemoryUsageDesc, prometheus.GaugeValue, float64(*c.Memory.WorkingSetBytes), labels...)
	}
	if c.Swap == nil {
		return
	}
	// The limit is what is available plus what is used, as upstream.
	var used float64
	if c.Swap.SwapUsageBytes != nil {
		used = float64(*c.Swap.SwapUsageBytes)
		sample(ch, c.Swap.Time.Time, containerSwapUsageDesc, prometheus.GaugeValue, used, labels...)
	}
	if c.Swap.SwapAvailableBytes != nil {
		sample(ch, c.Swap.Time.Time, containerSwapLimitDesc, prometheus.GaugeValue, float64(*c.Swap.SwapAvailableBytes)+used, labels...)
	}
}

func collectPod(ch chan<- prometheus.Metric, pod *statsapi.PodStats) {
	labels := []string{pod.PodRef.Name, pod.PodRef.Namespace}
	if pod.CPU != nil && pod.CPU.UsageCoreNanoSeconds != nil {
		sample(ch, pod.CPU.Time.Time, podCPUUsageDesc, prometheus.CounterValue, coreSeconds(*pod.CPU.UsageCoreNanoSeconds), labels...)
	}
	if pod.Memory != nil && pod.Memory.WorkingSetBytes != nil {
		sample(ch, pod.Memory.Time.Time, podMemoryUsageDesc, prometheus.GaugeValue, float64(*pod.Memory.WorkingSetBytes), labels...)
	}
	if pod.Swap != nil && pod.Swap.SwapUsageBytes != nil {
		sample(ch, pod.Swap.Time.Time, podSwapUsageDesc, prometheus.GaugeValue, float64(*pod.Swap.SwapUsageBytes), labels...)
	}
}

// sample sends a metric stamped with the time its figure was taken.
func sample(ch chan<- prometheus.Metric, t time.Time, d *prometheus.Desc, vt prometheus.ValueType, v float64, labels ...string) {
	ch <- prometheus.NewMetricWithTimestamp(t, prometheus.MustNewConstMetric(d, vt, v, labels...))
}

func coreSeconds(nanos uint64) float64 { return float64(nanos) / float64(time.Second) }
