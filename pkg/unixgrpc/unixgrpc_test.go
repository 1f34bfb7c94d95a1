package unixgrpc

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
)

func TestDialReady(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "p.sock")
	if _, err := DialReady(context.Background(), socket, 200*time.Millisecond); err == nil {
		t.Fatal("dialing a socket nobody serves succeeded")
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := DialReady(context.Background(), socket, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
}
