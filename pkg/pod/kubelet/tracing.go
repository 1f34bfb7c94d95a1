package kubelet

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/pod/podworkers"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// tracedSyncer is the Kubelet as the pod workers' Syncer, with each phase in a span named
// and attributed as upstream's SyncPod, SyncTerminatingPod and SyncTerminatedPod start
// theirs. The span's context goes down to the runtime, so the CRI calls of a sync are its
// children.
type tracedSyncer struct {
	*Kubelet
	tracer trace.Tracer
}

// newTracedSyncer wraps k; a nil tracer (no tracing) makes no-op spans.
func newTracedSyncer(k *Kubelet, tracer trace.Tracer) tracedSyncer {
	if tracer == nil {
		tracer = noop.NewTracerProvider().Tracer("")
	}
	return tracedSyncer{Kubelet: k, tracer: tracer}
}

func (s tracedSyncer) SyncPod(ctx context.Context, updateType podworkers.SyncPodType, pod *v1.Pod, ps *container.PodStatus) (isTerminal bool, postSync func(), err error) {
	ctx, span := s.tracer.Start(ctx, "syncPod", trace.WithAttributes(
		append(podAttributes(pod), attribute.String("k8s.pod.update_type", updateType.String()))...))
	defer func() { endSpan(span, err) }()
	return s.Kubelet.SyncPod(ctx, updateType, pod, ps)
}

func (s tracedSyncer) SyncTerminatingPod(ctx context.Context, pod *v1.Pod, ps *container.PodStatus, gracePeriod *int64, statusFn func(*v1.PodStatus)) (err error) {
	ctx, span := s.tracer.Start(ctx, "syncTerminatingPod", trace.WithAttributes(podAttributes(pod)...))
	defer func() { endSpan(span, err) }()
	return s.Kubelet.SyncTerminatingPod(ctx, pod, ps, gracePeriod, statusFn)
}

// SyncTerminatedPod's span records no error, as upstream's.
func (s tracedSyncer) SyncTerminatedPod(ctx context.Context, pod *v1.Pod, ps *container.PodStatus) error {
	ctx, span := s.tracer.Start(ctx, "syncTerminatedPod", trace.WithAttributes(podAttributes(pod)...))
	defer span.End()
	return s.Kubelet.SyncTerminatedPod(ctx, pod, ps)
}

// podAttributes are the pod's attributes on every sync span, upstream's keys.
func podAttributes(pod *v1.Pod) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.K8SPodUIDKey.String(string(pod.UID)),
		attribute.String("k8s.pod", klog.KObj(pod).String()),
		semconv.K8SPodNameKey.String(pod.Name),
		semconv.K8SNamespaceNameKey.String(pod.Namespace),
	}
}

// endSpan marks a failed phase on its span, as upstream, and ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
