// Package unixgrpc dials the node's plugins (device plugins, plugin-watcher sockets) the
// way upstream's kubelet does: a gRPC connection over a unix socket, waited for until it
// is ready, so that a plugin that does not answer fails its registration at once.
package unixgrpc

import (
	"context"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// DialReady connects to the unix socket and waits up to timeout for the connection to
// be ready (upstream's blocking dial). opts are further dial options (interceptors).
func DialReady(ctx context.Context, socket string, timeout time.Duration, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"), grpc.WithContextDialer(dialer)}, opts...)
	conn, err := grpc.NewClient("passthrough:///localhost", opts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := waitReady(ctx, conn); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	conn.Connect()
	for {
		state := conn.GetState()
		if state == connectivity.Ready {
			return nil
		}
		if !conn.WaitForStateChange(ctx, state) {
			return ctx.Err()
		}
	}
}
