package deviceplugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/pkg/unixgrpc"
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
	conn, err := unixgrpc.DialReady(ctx, c.socket, dialTimeout)
	if err != nil {
		return fmt.Errorf("failed to dial device plugin: %v", err)
	}
	c.mu.Lock()
	c.conn, c.api = conn, pluginapi.NewDevicePluginClient(conn)
	c.mu.Unlock()
	return nil
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
