package cri

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/connectivity"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestConnPoolSharesOneConnection: the runtime and image clients of one socket use one
// connection, which stays open until both are closed.
func TestConnPoolSharesOneConnection(t *testing.T) {
	pool := NewConnPool()
	rs, is := newTestClients(t, newFakeCRI(), WithConnPool(pool))
	conns := pool.conns
	if len(conns) != 1 {
		t.Fatalf("the pool holds %d connections, want 1", len(conns))
	}
	var pc *pooledConn
	for _, c := range conns {
		pc = c
	}
	if pc.refs != 2 {
		t.Fatalf("the connection has %d users, want 2", pc.refs)
	}
	ctx := context.Background()
	if err := rs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rs.Close(ctx); err != nil { // a second Close gives nothing back twice
		t.Fatal(err)
	}
	if _, err := is.ImageFsInfo(ctx); err != nil {
		t.Fatalf("the image client failed after the runtime client closed: %v", err)
	}
	if err := is.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(pool.conns) != 0 || pc.conn.GetState() != connectivity.Shutdown {
		t.Fatalf("after both clients closed: %d pooled, state %v; want none, Shutdown", len(pool.conns), pc.conn.GetState())
	}
}

// TestConnPoolImageBackWithRuntime restarts the runtime: once the runtime service answers
// again, so does the image service. With two connections, the image client kept
// failing with the last dial error until its own back-off ran out, which made the
// outage gate see a second outage right after the first ended.
func TestConnPoolImageBackWithRuntime(t *testing.T) {
	f := newFakeCRI()
	f.set("Status", &runtimeapi.StatusResponse{Status: readyStatus()})
	endpoint := startFakeCRI(t, f)
	socket := strings.TrimPrefix(endpoint, "unix://")
	ctx := context.Background()
	pool := NewConnPool()
	rs, err := NewRemoteRuntimeService(ctx, endpoint, 5*time.Second, testRequestTimeout, WithConnPool(pool), WithLogger(logr.Discard()))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close(ctx)
	is, err := NewRemoteImageService(ctx, endpoint, 5*time.Second, testRequestTimeout, WithConnPool(pool), WithLogger(logr.Discard()))
	if err != nil {
		t.Fatal(err)
	}
	defer is.Close(ctx)

	f.server.Stop() // the runtime goes away, its socket with it
	for range 3 {   // both clients fail meanwhile, and the connection backs off
		if _, err := is.ImageFsInfo(ctx); err == nil {
			t.Fatal("ImageFsInfo succeeded with the runtime stopped")
		}
		time.Sleep(500 * time.Millisecond)
	}
	serveFakeCRI(t, f, socket)
	deadline := time.Now().Add(10 * time.Second)
	for { // the health check, once a second until the runtime answers
		if _, err := rs.Status(ctx, false); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the runtime service did not answer after its restart")
		}
		time.Sleep(time.Second)
	}
	if _, err := is.ImageFsInfo(ctx); err != nil {
		t.Fatalf("the runtime answered, but the image service still fails: %v", err)
	}
}
