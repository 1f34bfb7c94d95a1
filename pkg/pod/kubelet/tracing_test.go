package kubelet

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/pod/podworkers"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// newTracedTestKubelet is newTestKubelet with its sync spans recorded.
func newTracedTestKubelet(rt *fakeRuntime) (*Kubelet, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ready := true
	base := newTestKubelet(rt, &fakeVolumes{}, &ready)
	deps := base.deps
	deps.Tracer = tp.Tracer("test")
	return New(base.cfg, deps), rec
}

// endedSpan returns the ended span called name, if any.
func endedSpan(rec *tracetest.SpanRecorder, name string) (sdktrace.ReadOnlySpan, bool) {
	for _, s := range rec.Ended() {
		if s.Name() == name {
			return s, true
		}
	}
	return nil, false
}

func spanAttributes(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

// Each phase of a pod's worker is a span with upstream's name and attributes, and the
// runtime works inside the syncPod span, so its CRI calls are the span's children.
func TestPodWorkerPhasesAreSpans(t *testing.T) {
	var mu sync.Mutex
	var runtimeSpan trace.SpanContext
	rt := &fakeRuntime{onSync: func(ctx context.Context) {
		mu.Lock()
		defer mu.Unlock()
		runtimeSpan = trace.SpanContextFromContext(ctx)
	}}
	k, rec := newTracedTestKubelet(rt)
	pod := testPod("a", "a")
	k.handlePodAdditions([]*v1.Pod{pod})
	eventually(t, "syncPod span", func() bool { _, ok := endedSpan(rec, "syncPod"); return ok })

	syncSpan, _ := endedSpan(rec, "syncPod")
	want := map[string]string{"k8s.pod.uid": "a", "k8s.pod": "ns/a", "k8s.pod.name": "a",
		"k8s.namespace.name": "ns", "k8s.pod.update_type": "create"}
	if got := spanAttributes(syncSpan); !maps.Equal(got, want) {
		t.Errorf("syncPod attributes %v, want %v", got, want)
	}
	mu.Lock()
	if !runtimeSpan.Equal(syncSpan.SpanContext()) {
		t.Errorf("the runtime synced under span %v, want the syncPod span %v", runtimeSpan.SpanID(), syncSpan.SpanContext().SpanID())
	}
	mu.Unlock()

	k.handlePodRemoves([]*v1.Pod{pod})
	eventually(t, "a's worker done", func() bool { return k.workers.ShouldPodContentBeRemoved("a") })
	for _, name := range []string{"syncTerminatingPod", "syncTerminatedPod"} {
		s, ok := endedSpan(rec, name)
		if !ok {
			t.Errorf("no %s span", name)
			continue
		}
		delete(want, "k8s.pod.update_type")
		if got := spanAttributes(s); !maps.Equal(got, want) {
			t.Errorf("%s attributes %v, want %v", name, got, want)
		}
	}
}

// A failed sync marks its span as upstream does: an error status and the error recorded.
func TestFailedSyncMarksItsSpan(t *testing.T) {
	rt := &fakeRuntime{result: container.PodSyncResult{SyncError: errors.New("sandbox refused")}}
	k, rec := newTracedTestKubelet(rt)
	pod := testPod("a", "a")
	k.pods.AddPod(pod)
	_, _, err := newTracedSyncer(k, k.deps.Tracer).SyncPod(context.Background(), podworkers.SyncPodSync, pod,
		&container.PodStatus{ID: "a", Name: "a", Namespace: "ns"})
	if err == nil {
		t.Fatal("SyncPod succeeded, want the runtime's error")
	}
	s, ok := endedSpan(rec, "syncPod")
	if !ok {
		t.Fatal("no syncPod span")
	}
	if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "sandbox refused") {
		t.Errorf("span status %+v, want Error with the sync's error", s.Status())
	}
	if len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
		t.Errorf("span events %+v, want the recorded error", s.Events())
	}
}
