package podresources

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubelet/pkg/apis/podresources/v1alpha1"
)

const (
	// DirName is the directory, in the kubelet's root directory, of the socket.
	DirName = "pod-resources"
	// SocketName is the socket's file name.
	SocketName = "kubelet.sock"

	// DefaultQPS and DefaultBurstTokens are upstream's rate limit: known consumers have no
	// legitimate need to query more than 100 times a second, and the managers behind the
	// API would not change that fast anyway.
	DefaultQPS         = 100
	DefaultBurstTokens = 10
)

// ErrLimitExceeded is what a request over the rate limit gets, upstream's error.
var ErrLimitExceeded = status.Error(codes.ResourceExhausted, "rejected by rate limit")

// SocketPath returns where the kubelet serves the API: <rootDir>/pod-resources/kubelet.sock.
func SocketPath(rootDir string) string {
	return filepath.Join(rootDir, DirName, SocketName)
}

// Limiter decides whether a request may be served now; *rate.Limiter is one.
type Limiter interface {
	Allow() bool
}

// Config is what Serve serves.
type Config struct {
	Providers Providers
	Options   Options
	// Metrics counts the requests; nil counts them in counters nobody registered.
	Metrics *Metrics
	// Limiter rate-limits every request; nil is upstream's token bucket of DefaultQPS
	// refilled per second, DefaultBurstTokens deep.
	Limiter Limiter
}

// Serve serves the v1 and v1alpha1 APIs on the unix socket socketPath until ctx ends,
// replacing a socket a previous run left behind. It returns nil when ctx ends and an
// error when the socket cannot be created or serving fails.
func Serve(ctx context.Context, socketPath string, cfg Config) error {
	logger := klog.FromContext(ctx)
	server := NewGRPCServer(ctx, cfg)
	listener, err := Listen(socketPath)
	if err != nil {
		return fmt.Errorf("failed to create listener for podResources endpoint: %w", err)
	}
	logger.Info("Starting to serve the podresources API", "endpoint", socketPath)
	// Stop rather than GracefulStop: the calls are short and unary, and a shutdown must
	// not wait on a client that keeps its connection open.
	stop := context.AfterFunc(ctx, server.Stop)
	defer stop()
	if err := server.Serve(listener); err != nil && ctx.Err() == nil {
		return fmt.Errorf("failed to serve the podresources API: %w", err)
	}
	return nil
}

// NewGRPCServer returns a gRPC server with both API versions registered behind the rate
// limit. Like upstream it sets no message size limits, leaving gRPC's defaults.
func NewGRPCServer(ctx context.Context, cfg Config) *grpc.Server {
	metrics := cfg.Metrics.orNew()
	server := grpc.NewServer(grpc.UnaryInterceptor(limitInterceptor(rateLimiter(ctx, cfg.Limiter))))
	v1alpha1.RegisterPodResourcesListerServer(server, NewV1alpha1Server(cfg.Providers, metrics))
	podresourcesv1.RegisterPodResourcesListerServer(server, NewV1Server(ctx, cfg.Providers, cfg.Options, metrics))
	return server
}

// rateLimiter returns the injected limiter, or upstream's default token bucket.
func rateLimiter(ctx context.Context, injected Limiter) Limiter {
	if injected != nil {
		return injected
	}
	klog.FromContext(ctx).Info("Setting rate limiting for endpoint", "service", "podresources",
		"qps", rate.Limit(DefaultQPS), "burstTokens", DefaultBurstTokens)
	return rate.NewLimiter(rate.Limit(DefaultQPS), DefaultBurstTokens)
}

// limitInterceptor rejects, before any handler runs, the requests the limiter refuses.
func limitInterceptor(limiter Limiter) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !limiter.Allow() {
			return nil, ErrLimitExceeded
		}
		return handler(ctx, req)
	}
}

// Listen listens on the unix socket path as upstream's CRI listener does: it unlinks a
// stale socket, creates the directory 0750, and binds a temporary name first, renaming
// it into place, so clients never see a path that is there but not yet listening.
func Listen(path string) (net.Listener, error) {
	if err := syscall.Unlink(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("failed to unlink socket file %q: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("error creating socket directory %q: %w", dir, err)
	}
	tmp, err := reserveTempName(dir)
	if err != nil {
		return nil, err
	}
	listener, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, err
	}
	// The socket now lives at path; closing must not unlink a stranger at the old name.
	listener.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Rename(tmp, path); err != nil {
		listener.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("failed to move temporary file to addr %q: %w", path, err)
	}
	return listener, nil
}

// reserveTempName picks an unused name in dir for the socket to be bound on.
func reserveTempName(dir string) (string, error) {
	file, err := os.CreateTemp(dir, "")
	if err != nil {
		return "", fmt.Errorf("failed to create temporary file: %w", err)
	}
	file.Close()
	if err := os.Remove(file.Name()); err != nil {
		return "", fmt.Errorf("failed to remove temporary file: %w", err)
	}
	return file.Name(), nil
}
