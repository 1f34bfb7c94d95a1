// Package tracingtest is an in-process OTLP/gRPC trace receiver for tests: it collects the
// spans a tracer provider exports and counts the connections made to it.
package tracingtest

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
)

// Span is one received span with its IDs in hex, its attributes and its resource's
// attributes as strings.
type Span struct {
	Name, Scope                   string
	TraceID, SpanID, ParentSpanID string
	Attributes, Resource          map[string]string
}

// Receiver is an OTLP trace collector on a loopback port.
type Receiver struct {
	collectorpb.UnimplementedTraceServiceServer
	// Endpoint is host:port, as tracing.endpoint takes it.
	Endpoint string
	conns    atomic.Int32
	mu       sync.Mutex
	spans    []Span
}

// Start serves a receiver until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Endpoint: lis.Addr().String()}
	srv := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(&countingListener{Listener: lis, n: &r.conns}) }()
	t.Cleanup(srv.Stop)
	return r
}

// Export records the spans of one export request.
func (r *Receiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := attributes(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, Span{
					Name: s.GetName(), Scope: ss.GetScope().GetName(),
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()),
					Attributes:   attributes(s.GetAttributes()), Resource: res,
				})
			}
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// Spans are the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Connections is how many connections were made to the receiver.
func (r *Receiver) Connections() int { return int(r.conns.Load()) }

// WaitFor polls the received spans until found returns "" and fails the test with its
// last explanation after timeout.
func (r *Receiver) WaitFor(t testing.TB, timeout time.Duration, found func([]Span) string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		why := found(r.Spans())
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Named returns the spans called name.
func Named(spans []Span, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// AncestorNamed returns the nearest ancestor of s called name, following parent span IDs
// within s's trace.
func AncestorNamed(spans []Span, s Span, name string) (Span, bool) {
	byID := map[string]Span{}
	for _, sp := range spans {
		if sp.TraceID == s.TraceID {
			byID[sp.SpanID] = sp
		}
	}
	for seen := 0; seen <= len(byID); seen++ {
		parent, ok := byID[s.ParentSpanID]
		if !ok {
			return Span{}, false
		}
		if parent.Name == name {
			return parent, true
		}
		s = parent
	}
	return Span{}, false // a cycle: not a tree
}

func attributes(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = value(kv.GetValue())
	}
	return out
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	default:
		return v.String()
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}
