package cri

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// remoteRuntimeService is internalapi.RuntimeService over a CRI v1 gRPC
// connection. Its methods are spread over runtime_*.go by topic.
type remoteRuntimeService struct {
	client    runtimeapi.RuntimeServiceClient
	closeConn func() error
	timeout   time.Duration // the kubelet's runtimeRequestTimeout
	logger    klog.Logger
	// errLogs keeps repeated ContainerStatus/ContainerStats/PodSandboxStats
	// failures for one ID to one log line a minute.
	errLogs *errorLogThrottle
}

var _ internalapi.RuntimeService = (*remoteRuntimeService)(nil)

// NewRemoteRuntimeService connects to the CRI runtime service at endpoint
// ("unix:///path" or "/path") and checks, within connectionTimeout, that it
// answers the CRI v1 Version call. requestTimeout bounds each later call, as
// the kubelet's runtimeRequestTimeout does (some calls get more, see the
// methods). A missing socket fails at once rather than after the timeout.
func NewRemoteRuntimeService(ctx context.Context, endpoint string, connectionTimeout, requestTimeout time.Duration, opts ...Option) (internalapi.RuntimeService, error) {
	o := buildOptions(opts)
	conn, closeConn, connectionTimeout, err := dialService(o, "runtime", endpoint, connectionTimeout, requestTimeout)
	if err != nil {
		return nil, err
	}
	r := &remoteRuntimeService{
		client:    runtimeapi.NewRuntimeServiceClient(conn),
		closeConn: closeConn,
		timeout:   requestTimeout,
		logger:    o.logger,
		errLogs:   newErrorLogThrottle(o.clock, identicalErrorDelay),
	}
	// Version tells an absent runtime, or one that only speaks the removed v1alpha2
	// API, at startup with the endpoint named, instead of as a failure of a later call.
	err = checkCRIv1(ctx, o.logger, "runtime", endpoint, connectionTimeout, func(ctx context.Context) error {
		_, err := r.client.Version(ctx, &runtimeapi.VersionRequest{})
		return err
	})
	if err != nil {
		_ = closeConn()
		return nil, err
	}
	if o.metrics != nil {
		return NewInstrumentedRuntimeService(r, o.metrics), nil
	}
	return r, nil
}

// dialService checks the timeouts and the endpoint and opens the (lazy) connection for
// the "runtime" or "image" service, or takes the pool's; closeConn gives it up.
func dialService(o options, kind, endpoint string, connectionTimeout, requestTimeout time.Duration) (conn *grpc.ClientConn, closeConn func() error, timeout time.Duration, err error) {
	connectionTimeout, err = checkTimeouts(connectionTimeout, requestTimeout)
	if err != nil {
		return nil, nil, 0, err
	}
	socket, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, nil, 0, err
	}
	o.logger.V(3).Info("Connecting to "+kind+" service", "endpoint", endpoint)
	pool := o.pool
	if pool == nil { // a connection of its own: the last give-back is its Close
		pool = NewConnPool()
	}
	conn, closeConn, err = pool.get(socket, tracingDialOptions(o.tracerProvider))
	if err != nil {
		return nil, nil, 0, fmt.Errorf("%s endpoint %q: %w", kind, endpoint, err)
	}
	return conn, closeConn, connectionTimeout, nil
}

// checkCRIv1 makes one call of the service within timeout and words its failure with the
// endpoint named: Unimplemented means the service does not speak CRI v1.
func checkCRIv1(ctx context.Context, logger klog.Logger, kind, endpoint string, timeout time.Duration, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := call(ctx)
	if err == nil {
		logger.V(2).Info("Validated CRI v1 "+kind+" API", "endpoint", endpoint)
		return nil
	}
	if status.Code(err) == codes.Unimplemented {
		return fmt.Errorf("%s endpoint %q does not implement the CRI v1 %s API: %w", kind, endpoint, kind, err)
	}
	return fmt.Errorf("cannot reach %s endpoint %q: %w", kind, endpoint, err)
}

// trace logs a request or response at V(10), as the kubelet does.
func (r *remoteRuntimeService) trace(msg string, keysAndValues ...any) {
	if v := r.logger.V(10); v.Enabled() {
		v.Info("[RemoteRuntimeService] "+msg, keysAndValues...)
	}
}

// Close closes the gRPC connection.
func (r *remoteRuntimeService) Close(context.Context) error {
	return r.closeConn()
}

// Version returns the runtime name, runtime version and runtime API version.
func (r *remoteRuntimeService) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	r.trace("Version", "apiVersion", apiVersion, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.Version(ctx, &runtimeapi.VersionRequest{Version: apiVersion})
	if err != nil {
		r.logger.Error(err, "Version from runtime service failed")
		return nil, err
	}
	r.trace("Version Response", "version", resp)
	if err := checkVersion(resp); err != nil {
		r.logger.Error(err, "Version from runtime service failed")
		return nil, err
	}
	return resp, nil
}

// Status returns the runtime's conditions (RuntimeReady, NetworkReady, ...).
func (r *remoteRuntimeService) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	r.trace("Status", "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.Status(ctx, &runtimeapi.StatusRequest{Verbose: verbose})
	if err != nil {
		r.logger.Error(err, "Status from runtime service failed")
		return nil, err
	}
	r.trace("Status Response", "status", resp.GetStatus())
	if err := checkRuntimeStatus(resp); err != nil {
		r.logger.Error(err, "Status failed")
		return nil, err
	}
	return resp, nil
}

// UpdateRuntimeConfig passes the node's pod CIDR to the runtime.
func (r *remoteRuntimeService) UpdateRuntimeConfig(ctx context.Context, runtimeConfig *runtimeapi.RuntimeConfig) error {
	r.trace("UpdateRuntimeConfig", "runtimeConfig", runtimeConfig, "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if _, err := r.client.UpdateRuntimeConfig(ctx, &runtimeapi.UpdateRuntimeConfigRequest{RuntimeConfig: runtimeConfig}); err != nil {
		r.logger.Error(err, "UpdateRuntimeConfig from runtime service failed")
		return err
	}
	r.trace("UpdateRuntimeConfig Response", "runtimeConfig", runtimeConfig)
	return nil
}

// RuntimeConfig returns the runtime's configuration (e.g. its cgroup driver). A runtime
// without the call (containerd 1.6) gets an error wrapping ErrNotSupported, logged at
// V(2) only: it is an answer, not a failure.
func (r *remoteRuntimeService) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	r.trace("RuntimeConfig", "timeout", r.timeout)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.client.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
	if err != nil {
		return nil, r.optionalCallFailed("RuntimeConfig", err)
	}
	r.trace("RuntimeConfig Response", "linuxConfig", resp.GetLinux())
	return resp, nil
}

// optionalCallFailed logs and returns the error of a call that older runtimes lack:
// Unimplemented becomes a quiet ErrNotSupported, anything else is logged as a failure.
func (r *remoteRuntimeService) optionalCallFailed(method string, err error) error {
	if err := notSupported(method, err); errors.Is(err, ErrNotSupported) {
		r.logger.V(2).Info("Container runtime does not implement "+method, "err", err)
		return err
	}
	r.logger.Error(err, method+" from runtime service failed")
	return err
}

// withDefaultTimeout bounds ctx by d only when the caller set no deadline of
// its own. It is for the pod checkpoint calls, where the CRI asks the caller
// to choose the deadline and a checkpoint may need longer than d.
func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
