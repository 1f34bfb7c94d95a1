package pluginwatcher

import "github.com/prometheus/client_golang/prometheus"

// Label values of the state label.
const (
	stateDesired = "desired_state_of_world"
	stateActual  = "actual_state_of_world"
)

// totalPluginsDesc is upstream's plugin_manager_total_plugins (pkg/kubelet/pluginmanager/
// metrics). Upstream gives it no kubelet_ prefix; the "[ALPHA] " help prefix is what
// component-base shows once it is registered.
var totalPluginsDesc = prometheus.NewDesc("plugin_manager_total_plugins",
	"[ALPHA] Number of plugins in Plugin Manager", []string{"socket_path", "state"}, nil)

// totalPluginsCollector reads both states at every scrape, as upstream's custom collector
// does, rather than keeping a gauge up to date. Upstream counts plugins per socket path;
// both states are keyed by socket path, so every series is 1.
type totalPluginsCollector struct{ m *Manager }

func (c totalPluginsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- totalPluginsDesc }

func (c totalPluginsCollector) Collect(ch chan<- prometheus.Metric) {
	for socket := range c.m.desired.snapshot() {
		ch <- prometheus.MustNewConstMetric(totalPluginsDesc, prometheus.GaugeValue, 1, socket, stateDesired)
	}
	for _, p := range c.m.actual.snapshot() {
		ch <- prometheus.MustNewConstMetric(totalPluginsDesc, prometheus.GaugeValue, 1, p.socket, stateActual)
	}
}
