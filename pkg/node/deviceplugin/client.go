package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// dialTimeout bounds the connection to a registering plugin, as upstream's dial does
// (a variable for tests).
var dialTimeout = 10 * time.Second

// pluginClient is the connection to one registered plugin's socket (upstream's
// plugin/v1beta1 client).
type pluginClient struct {
	resource string
	socket   string

	mu   sync.Mutex
	conn *grpc.ClientConn
	api  pluginapi.DevicePluginClient
}

// connect dials the plugin and waits until the connection is up, so that a plugin that
// registers a socket nobody serves fails its Register call, as upstream's blocking dial
// makes it fail.
func (c *pluginClient) connect(ctx context.Context) error {
	conn, err := dialPlugin(ctx, c.socket)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.conn, c.api = conn, pluginapi.NewDevicePluginClient(conn)
	c.mu.Unlock()
	return nil
}

func dialPlugin(ctx context.Context, socket string) (*grpc.ClientConn, error) {
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}
	conn, err := grpc.NewClient("passthrough:///localhost",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(dialer))
	if err != nil {
		return nil, fmt.Errorf("failed to dial device plugin: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	if err := waitReady(ctx, conn); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("failed to dial device plugin: %v", err)
	}
	return conn, nil
}

// waitReady is grpc's blocking dial without the deprecated DialContext: it returns once
// the connection is ready, or the context's error.
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

// client returns the plugin's API, nil once disconnected.
func (c *pluginClient) client() pluginapi.DevicePluginClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.api
}

// run streams the plugin's device lists to receive until the stream ends: the plugin
// stopped, or the connection was closed by disconnect.
func (c *pluginClient) run(logger klog.Logger, receive func(devices []*pluginapi.Device)) {
	api := c.client()
	if api == nil {
		return
	}
	// Not a request's context: the stream lives as long as the connection, which
	// disconnect closes.
	stream, err := api.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		logger.Error(err, "ListAndWatch ended unexpectedly for device plugin", "resource", c.resource)
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			logger.Error(err, "ListAndWatch ended unexpectedly for device plugin", "resource", c.resource)
			return
		}
		logger.V(2).Info("State pushed for device plugin", "resource", c.resource, "resourceCapacity", len(resp.Devices))
		receive(resp.Devices)
	}
}

// close closes the connection; it is safe to call more than once.
func (c *pluginClient) close(logger klog.Logger) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return
	}
	if err := c.conn.Close(); err != nil {
		logger.V(2).Info("Failed to close grpc connection", "resource", c.resource, "err", err)
	}
	c.conn, c.api = nil, nil
}
