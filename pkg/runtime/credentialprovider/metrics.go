package credentialprovider

import "github.com/prometheus/client_golang/prometheus"

// metrics are upstream's credential provider metrics (pkg/credentialprovider/plugin/
// metrics.go), with their names, labels, buckets and ALPHA help texts. They belong to one
// Plugins rather than to the process, so that tests can read them; the caller registers
// them (Plugins.Collectors).
type metrics struct {
	pluginErrors   *prometheus.CounterVec
	pluginDuration *prometheus.HistogramVec
	configInfo     *prometheus.GaugeVec
}

func newMetrics() *metrics {
	return &metrics{
		pluginErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet",
			Name:      "credential_provider_plugin_errors_total",
			Help:      "[ALPHA] Number of errors from credential provider plugin",
		}, []string{"plugin_name"}),
		// Upstream's name has no _seconds suffix.
		pluginDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet",
			Name:      "credential_provider_plugin_duration",
			Help:      "[ALPHA] Duration of execution in seconds for credential provider plugin",
			Buckets:   prometheus.DefBuckets,
		}, []string{"plugin_name"}),
		configInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "kubelet",
			Name:      "credential_provider_config_info",
			Help:      "[ALPHA] Information about the last applied credential provider configuration with hash as label",
		}, []string{"hash"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.pluginErrors, m.pluginDuration, m.configInfo}
}
