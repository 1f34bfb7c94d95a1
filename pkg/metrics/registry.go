package metrics

import (
	"net/http"
	"os"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Registries are the registries behind the kubelet API's two metric endpoints, split as
// upstream splits them.
type Registries struct {
	// Kubelet is served on /metrics (upstream's legacy registry): the kubelet_* metrics,
	// the volume stats and container log collectors (reporting once SetPodStats has
	// given them the stats provider), the process and Go runtime collectors, and
	// whatever the runtime client, the kubelet API and the client certificate manager
	// register on it.
	Kubelet *Registry
	// Probes is served on /metrics/probes: process_start_time_seconds and what the
	// prober registers on it (prober_probe_total, prober_probe_duration_seconds).
	Probes *prometheus.Registry
	// SLIs is served on /metrics/slis: the health checks' results (kubernetes_healthcheck,
	// kubernetes_healthchecks_total) and process_start_time_seconds.
	SLIs *prometheus.Registry
	// started is when the registries were built; the /metrics handler reports it in its
	// Process-Start-Time-Unix header, as upstream's does.
	started time.Time
}

// NewRegistries builds both registries and records the node's name and cgroup version.
func NewRegistries(nodeName string) (*Registries, error) {
	r := &Registries{Kubelet: NewRegistry(), Probes: prometheus.NewRegistry(), SLIs: prometheus.NewRegistry(), started: time.Now()}
	kubelet := append(kubeletCollectors(),
		volumeStatsCollector{podStats}, logMetricsCollector{podStats},
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll)),
	)
	for _, c := range kubelet {
		if err := r.Kubelet.Register(c); err != nil {
			return nil, err
		}
	}
	if err := r.Probes.Register(processStartTime()); err != nil {
		return nil, err
	}
	for _, c := range []prometheus.Collector{healthcheck, healthchecksTotal, processStartTime()} {
		if err := r.SLIs.Register(c); err != nil {
			return nil, err
		}
	}
	NodeName.WithLabelValues(nodeName).Set(1)
	CgroupVersion.Set(float64(cgroupVersion("/sys/fs/cgroup")))
	return r, nil
}

// Handler serves /metrics. A collector that fails makes the scrape fail, as upstream's.
func (r *Registries) Handler() http.Handler {
	return promhttp.HandlerFor(r.Kubelet, promhttp.HandlerOpts{ProcessStartTime: r.started})
}

// ProbesHandler serves /metrics/probes; it serves what it can when a collector fails.
func (r *Registries) ProbesHandler() http.Handler {
	return promhttp.HandlerFor(r.Probes, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Registry is a prometheus registry that remembers the names of the metric families its
// collectors describe, so that what /metrics can expose is known without scraping it
// (vectors without series expose nothing).
type Registry struct {
	*prometheus.Registry

	mu       sync.Mutex
	families map[string]int // family name -> registered collectors describing it
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{Registry: prometheus.NewRegistry(), families: map[string]int{}}
}

// Register registers c and notes the families it describes.
func (r *Registry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.note(c, 1)
	return nil
}

// MustRegister registers the collectors, panicking on the first error.
func (r *Registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister unregisters c and forgets its families.
func (r *Registry) Unregister(c prometheus.Collector) bool {
	if !r.Registry.Unregister(c) {
		return false
	}
	r.note(c, -1)
	return true
}

func (r *Registry) note(c prometheus.Collector, delta int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, name := range describedFamilies(c) {
		if r.families[name] += delta; r.families[name] <= 0 {
			delete(r.families, name)
		}
	}
}

// FamilyNames are the names of the metric families the registered collectors describe,
// sorted.
func (r *Registry) FamilyNames() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.families))
	for name := range r.families {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// descFQName finds the family name in a Desc's description: client_golang does not export it.
var descFQName = regexp.MustCompile(`^Desc\{fqName: "([^"]*)"`)

func describedFamilies(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var names []string
	for d := range ch {
		if m := descFQName.FindStringSubmatch(d.String()); m != nil && !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	return names
}

// ProcessStartTime is when this process started (from /proc, or now when it cannot be
// read).
func ProcessStartTime() time.Time {
	start := processStart()
	return time.Unix(0, int64(start*float64(time.Second)))
}

// processStartTime is the gauge upstream adds to the probe registry (component-base's
// RegisterProcessStartTime): the process's start time, in seconds since the epoch.
func processStartTime() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "process_start_time_seconds",
		Help: alpha("Start time of the process since unix epoch in seconds."),
	}, nil)
	g.WithLabelValues().Set(processStart())
	return g
}

func processStart() float64 {
	if p, err := procfs.NewProc(os.Getpid()); err == nil {
		if st, err := p.Stat(); err == nil {
			if start, err := st.StartTime(); err == nil {
				return start
			}
		}
	}
	return float64(time.Now().Unix())
}

// cgroupVersion is 2 when dir holds the unified hierarchy, 1 for the v1 tmpfs of
// controllers, 0 when it cannot tell.
func cgroupVersion(dir string) int {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	switch st.Type {
	case unix.CGROUP2_SUPER_MAGIC:
		return 2
	case unix.TMPFS_MAGIC:
		return 1
	}
	return 0
}
