package cri

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	// maxMsgSize raises gRPC's 4 MiB default receive limit: a ListContainers
	// or ListImages answer on a busy node is easily larger.
	maxMsgSize = 16 * 1024 * 1024

	// Reconnect quickly while the runtime restarts (upstream's values).
	baseBackoffDelay     = 100 * time.Millisecond
	maxBackoffDelay      = 3 * time.Second
	minConnectionTimeout = 5 * time.Second
)

// ParseEndpoint returns the socket path of a CRI endpoint. Accepted forms are
// "unix:///abs/path" and a bare absolute path (treated as unix, as the kubelet
// does). Everything else, including tcp:// and an empty endpoint, is an error
// wrapping ErrInvalidEndpoint and naming the endpoint.
func ParseEndpoint(endpoint string) (string, error) {
	if endpoint == "" {
		return "", fmt.Errorf("%w: endpoint is empty", ErrInvalidEndpoint)
	}
	if filepath.IsAbs(endpoint) {
		return filepath.Clean(endpoint), nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("%w %q: %v", ErrInvalidEndpoint, endpoint, err)
	}
	if u.Scheme != "unix" {
		return "", fmt.Errorf("%w %q: only unix sockets are supported (unix:///path or /path)", ErrInvalidEndpoint, endpoint)
	}
	if u.Host != "" || !filepath.IsAbs(u.Path) {
		return "", fmt.Errorf("%w %q: want unix:///absolute/path/to/socket", ErrInvalidEndpoint, endpoint)
	}
	return filepath.Clean(u.Path), nil
}

// ImageEndpointOrDefault returns the image service endpoint to use: the
// configured one, or the runtime's when none is configured (the kubelet's
// --image-service-endpoint default).
func ImageEndpointOrDefault(imageEndpoint, runtimeEndpoint string) string {
	if imageEndpoint == "" {
		return runtimeEndpoint
	}
	return imageEndpoint
}

// newConn creates a lazily connecting gRPC client for the socket. The target
// is a fixed placeholder and the dialer ignores it: the dialer always opens
// socketPath, so no path character can confuse gRPC's target parsing. extra adds to
// the dial options (tracing).
func newConn(socketPath string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socketPath)
	}
	params := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: minConnectionTimeout}
	params.Backoff.BaseDelay = baseBackoffDelay
	params.Backoff.MaxDelay = maxBackoffDelay
	return grpc.NewClient("passthrough:///localhost", append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(dial),
		grpc.WithConnectParams(params),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize)),
	}, extra...)...)
}
