package cri

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/tracing"
	"github.com/nodelet/nodelet/pkg/tracing/tracingtest"
)

const runPodSandboxSpan = "runtime.v1.RuntimeService/RunPodSandbox"

// traceparents records the traceparent metadata each method's last call brought ("" for
// none).
type traceparents struct {
	mu   sync.Mutex
	seen map[string]string
}

func (p *traceparents) record(ctx context.Context, fullMethod string) {
	md, _ := metadata.FromIncomingContext(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen[fullMethod[strings.LastIndex(fullMethod, "/")+1:]] = strings.Join(md.Get("traceparent"), ",")
}

func (p *traceparents) of(method string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[method]
}

// startMetadataFakeCRI serves f, as startFakeCRI does, recording the traceparent of each
// call.
func startMetadataFakeCRI(t *testing.T, f *fakeCRI) (endpoint string, seen *traceparents) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	lis, err := net.Listen("unix", filepath.Join(dir, "cri.sock"))
	if err != nil {
		t.Fatal(err)
	}
	seen = &traceparents{seen: map[string]string{}}
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		seen.record(ctx, info.FullMethod)
		return h(ctx, req)
	}))
	runtimeapi.RegisterRuntimeServiceServer(srv, &fakeRuntimeServer{f: f})
	runtimeapi.RegisterImageServiceServer(srv, &fakeImageServer{f: f})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return "unix://" + filepath.Join(dir, "cri.sock"), seen
}

// newSampledProvider exports every span to rcv, as tracing.samplingRatePerMillion 1000000
// makes the kubelet's provider do.
func newSampledProvider(t *testing.T, rcv *tracingtest.Receiver) *tracing.Provider {
	t.Helper()
	cfg := &kubeletconfig.KubeletConfiguration{Tracing: &tracingapi.TracingConfiguration{
		Endpoint: ptr.To(rcv.Endpoint), SamplingRatePerMillion: ptr.To[int32](1000000)}}
	tp, err := tracing.NewProvider(context.Background(), cfg, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// runSandboxUnder makes a RunPodSandbox call inside a "syncPod" span of tp, through a
// client made with opts, and flushes tp; it returns the span's trace and span IDs.
func runSandboxUnder(t *testing.T, tp *tracing.Provider, endpoint string, opts ...Option) (traceID, spanID string) {
	t.Helper()
	ctx := context.Background()
	rs, err := NewRemoteRuntimeService(ctx, endpoint, 5*time.Second, testRequestTimeout, append(opts, WithLogger(logr.Discard()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close(ctx)
	ctx, span := tp.KubeletTracer().Start(ctx, "syncPod")
	if _, err := rs.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{}, ""); err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	span.End()
	flush, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tp.Shutdown(flush); err != nil {
		t.Fatal(err)
	}
	return span.SpanContext().TraceID().String(), span.SpanContext().SpanID().String()
}

// With a tracer provider each CRI call is a client span, a child of the span it is made
// under, exported to the collector, and the runtime gets the trace context (W3C
// traceparent naming the call's span) in the call's metadata.
func TestCallsAreSpansAndCarryTheTraceContext(t *testing.T) {
	f := newFakeCRI()
	f.set("RunPodSandbox", &runtimeapi.RunPodSandboxResponse{PodSandboxId: "sb"})
	endpoint, seen := startMetadataFakeCRI(t, f)
	rcv := tracingtest.Start(t)
	tp := newSampledProvider(t, rcv)
	traceID, parentID := runSandboxUnder(t, tp, endpoint, WithTracerProvider(tp))

	calls := tracingtest.Named(rcv.Spans(), runPodSandboxSpan)
	if len(calls) != 1 {
		t.Fatalf("received %d %s spans, want 1; all: %+v", len(calls), runPodSandboxSpan, rcv.Spans())
	}
	call := calls[0]
	if call.TraceID != traceID || call.ParentSpanID != parentID {
		t.Errorf("%s is in trace %s under %s, want trace %s under the syncPod span %s", call.Name, call.TraceID, call.ParentSpanID, traceID, parentID)
	}
	if want := "00-" + traceID + "-" + call.SpanID + "-01"; seen.of("RunPodSandbox") != want {
		t.Errorf("the runtime got traceparent %q, want %q", seen.of("RunPodSandbox"), want)
	}
	if len(tracingtest.Named(rcv.Spans(), "runtime.v1.RuntimeService/Version")) != 1 {
		t.Error("the client's CRI v1 check (Version) is not a span")
	}
}

// Without a tracer provider the client adds nothing: no span for the call, no trace
// context to the runtime, even under a sampled span.
func TestCallsAreNotTracedWithoutAProvider(t *testing.T) {
	f := newFakeCRI()
	f.set("RunPodSandbox", &runtimeapi.RunPodSandboxResponse{PodSandboxId: "sb"})
	endpoint, seen := startMetadataFakeCRI(t, f)
	rcv := tracingtest.Start(t)
	runSandboxUnder(t, newSampledProvider(t, rcv), endpoint)

	if got := seen.of("RunPodSandbox"); got != "" {
		t.Errorf("the runtime got traceparent %q, want none", got)
	}
	for _, s := range rcv.Spans() {
		if s.Name != "syncPod" {
			t.Errorf("received span %q, want only the test's syncPod span", s.Name)
		}
	}
}
