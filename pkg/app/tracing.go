// Wiring of tracing (pkg/tracing): the tracer provider the CRI clients and the pod loop
// share, as upstream's kubelet Dependencies.TracerProvider.
package app

import (
	"context"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/config"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/tracing"
)

// tracingFlushTimeout bounds the export of the last spans when nodelet stops, so an
// unreachable collector cannot hold the stop up.
const tracingFlushTimeout = 5 * time.Second

// startTracing builds the tracer provider from the configuration's tracing field, with the
// host name on every span; stop flushes the spans not yet exported.
func startTracing(ctx context.Context, opts *config.Options, hostName string) (tp *tracing.Provider, stop func(), err error) {
	tp, err = tracing.NewProvider(ctx, opts.Config, hostName)
	if err != nil {
		return nil, nil, err
	}
	if tp.Enabled() {
		// An empty endpoint is the OTLP default (localhost:4317); no rate samples no trace
		// nodelet starts.
		c := opts.Config.Tracing
		klog.InfoS("Tracing enabled", "endpoint", ptr.Deref(c.Endpoint, ""), "samplingRatePerMillion", ptr.Deref(c.SamplingRatePerMillion, 0))
	}
	stop = func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			klog.ErrorS(err, "Failed to flush the last spans")
		}
	}
	return tp, stop, nil
}

// criTracing instruments the CRI clients when tracing is on. Off, the calls go without the
// gRPC stats handler: with no span to carry there is nothing for it to do.
func criTracing(tp *tracing.Provider) []cri.Option {
	if !tp.Enabled() {
		return nil
	}
	return []cri.Option{cri.WithTracerProvider(tp)}
}
