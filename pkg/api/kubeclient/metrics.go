package kubeclient

import (
	"errors"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// certMetrics are upstream's client-certificate metrics, registered when
// rotation is on (as upstream does).
type certMetrics struct {
	renewErrors prometheus.Counter
}

// registerCertMetrics registers kubelet_certificate_manager_client_ttl_seconds
// (seconds until notAfter, +Inf without a certificate) and
// kubelet_certificate_manager_client_expiration_renew_errors on reg.
func registerCertMetrics(reg prometheus.Registerer, notAfter func() time.Time) (*certMetrics, error) {
	m := &certMetrics{renewErrors: prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "kubelet", Subsystem: "certificate_manager", Name: "client_expiration_renew_errors",
		Help: "[ALPHA] Counter of certificate renewal errors.",
	})}
	if reg == nil {
		return m, nil
	}
	ttl := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Subsystem: "kubelet", Name: "certificate_manager_client_ttl_seconds",
		Help: "[ALPHA] Gauge of the TTL (time-to-live) of the Kubelet's client certificate. " +
			"The value is in seconds until certificate expiry (negative if already expired). " +
			"If client certificate is invalid or unused, the value will be +INF.",
	}, func() float64 { return ttlSeconds(notAfter(), time.Now()) })
	if err := reg.Register(ttl); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		return nil, err
	}
	var already prometheus.AlreadyRegisteredError
	switch err := reg.Register(m.renewErrors); {
	case errors.As(err, &already):
		// A second Build on the same registry keeps counting on the registered counter.
		if existing, ok := already.ExistingCollector.(prometheus.Counter); ok {
			m.renewErrors = existing
		}
	case err != nil:
		return nil, err
	}
	return m, nil
}

// ttlSeconds is whole seconds from now to notAfter, +Inf for no certificate.
func ttlSeconds(notAfter, now time.Time) float64 {
	if notAfter.IsZero() {
		return math.Inf(1)
	}
	return math.Trunc(notAfter.Sub(now).Seconds())
}

func (m *certMetrics) renewFailed() {
	if m != nil {
		m.renewErrors.Inc()
	}
}
