// Package cadvisor serves the kubelet API's /metrics/cadvisor without cAdvisor.
//
// Where the runtime reports pod sandbox metrics (ListMetricDescriptors and
// ListPodSandboxMetrics: containerd 2.x, CRI-O), they are passed through with the
// runtime's names, help and labels, as upstream's kubelet does with the
// PodAndContainerStatsFromCRI feature gate. Where it does not (containerd 1.6), the
// endpoint serves a subset of cAdvisor's container_* metrics, with cAdvisor's names and
// labels, computed from the stats summary the kubelet already builds for /stats/summary:
// Prometheus setups that scrape /metrics/cadvisor keep their CPU, memory and network
// series. Both also get cAdvisor's machine_* metrics, which upstream serves either way.
//
// A collection costs about what a /stats/summary does (one call to every container's
// shim), and containerd 2.4 answers ListPodSandboxMetrics at no more than ten pods a
// second; collections are therefore shared between scrapes (see collections).
package cadvisor

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
)

// Runtime is the part of the CRI runtime service the endpoint reads; pkg/runtime/cri's has it.
type Runtime interface {
	ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error)
	ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
}

// Summary is the kubelet's stats summary (pkg/node/stats's Provider).
type Summary interface {
	Get(ctx context.Context) (*statsapi.Summary, error)
}

// Machine is what the machine_* metrics report.
type Machine struct {
	NumCores    int
	MemoryBytes uint64
	SwapBytes   uint64
	MachineID   string
	SystemUUID  string
	BootID      string
}

// Options are the endpoint's sources.
type Options struct {
	Runtime Runtime
	// Summary gives the figures served where the runtime has no pod sandbox metrics.
	Summary Summary
	// Pods are the kubelet's pods: their specs name the images the summary's containers
	// are labelled with (the runtime lists only image IDs). nil: the runtime's image.
	Pods func() []*v1.Pod
	// Machine gives the machine_* metrics; nil serves none.
	Machine func() (*Machine, error)

	// MaxAge: a collection younger than this is served again without asking the runtime.
	// Zero means 10 s, upstream's cAdvisor housekeeping interval.
	MaxAge time.Duration
	// MaxWait: how long a scrape waits for a running collection before it is served the
	// previous one instead (when that is not older than staleLimit). Zero means 5 s, half
	// Prometheus's default scrape timeout.
	MaxWait time.Duration

	now func() time.Time // tests
}

// Handler serves /metrics/cadvisor.
type Handler struct {
	machine     prometheus.Collector
	collections *collections
	runtime     *runtimeMetrics
	summary     *summaryMetrics

	mu     sync.Mutex
	source string // what the last collection was served from, for one log line per change
}

// NewHandler returns the /metrics/cadvisor handler. It asks the runtime nothing until
// the first scrape.
func NewHandler(o Options) *Handler {
	if o.MaxAge <= 0 {
		o.MaxAge = 10 * time.Second
	}
	if o.MaxWait <= 0 {
		o.MaxWait = 5 * time.Second
	}
	if o.now == nil {
		o.now = time.Now
	}
	h := &Handler{
		runtime: &runtimeMetrics{runtime: o.Runtime, now: o.now},
		summary: &summaryMetrics{summary: o.Summary, runtime: o.Runtime, pods: o.Pods, now: o.now},
	}
	if o.Machine != nil {
		h.machine = newMachineCollector(o.Machine)
	}
	h.collections = newCollections(h.collect, o.MaxAge, o.MaxWait, o.now)
	return h
}

// ServeHTTP answers with the machine metrics and the latest container metrics; when the
// container metrics cannot be had, the machine metrics alone (logged), as upstream
// serves what it can.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	promhttp.HandlerFor(h.registry(r.Context()), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
}

// registry holds what one scrape serves.
func (h *Handler) registry(ctx context.Context) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	if h.machine != nil {
		reg.MustRegister(h.machine)
	}
	metrics, err := h.collections.get(ctx)
	if err != nil {
		klog.ErrorS(err, "Failed to get the container metrics for /metrics/cadvisor")
		return reg
	}
	reg.MustRegister(constCollector(metrics))
	return reg
}

// collect reads the runtime's pod sandbox metrics, or the summary where the runtime has
// none.
func (h *Handler) collect(ctx context.Context) ([]prometheus.Metric, error) {
	metrics, err := h.runtime.collect(ctx)
	if err == nil {
		h.servedFrom("runtime")
		return metrics, nil
	}
	if !cri.IsNotSupported(err) && !errors.Is(err, errNoDescriptors) {
		return nil, err
	}
	h.servedFrom("summary")
	return h.summary.collect(ctx)
}

// servedFrom logs once whenever the metrics' source changes.
func (h *Handler) servedFrom(source string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.source == source {
		return
	}
	h.source = source
	if source == "runtime" {
		klog.InfoS("Serving /metrics/cadvisor from the runtime's pod sandbox metrics (ListPodSandboxMetrics)")
	} else {
		klog.InfoS("The runtime reports no pod sandbox metrics: /metrics/cadvisor serves cAdvisor's container metrics computed from the stats summary")
	}
}

// constCollector collects metrics made beforehand. It describes nothing: the runtime
// decides which metrics there are, so the registry checks them only when gathering.
type constCollector []prometheus.Metric

func (c constCollector) Describe(chan<- *prometheus.Desc) {}

func (c constCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c {
		ch <- m
	}
}
