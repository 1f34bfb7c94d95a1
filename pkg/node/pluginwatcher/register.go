package pluginwatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodelet/nodelet/pkg/unixgrpc"
)

// Upstream's operation generator timeouts.
const (
	dialTimeout    = 10 * time.Second
	getInfoTimeout = time.Second
	notifyTimeout  = 5 * time.Second
)

// register is upstream's register operation for one creation (generation) of socket:
// GetInfo, the type's handler validates then registers the plugin, and the plugin is told
// the outcome. Any error leaves the plugin unregistered, to be retried.
func (m *Manager) register(ctx context.Context, socket string, generation uint64, handlers map[string]Handler) error {
	conn, err := unixgrpc.DialReady(ctx, socket, dialTimeout)
	if err != nil {
		return fmt.Errorf("RegisterPlugin error -- dial failed at socket %s, err: failed to dial socket %s, err: %v", socket, socket, err)
	}
	defer func() { _ = conn.Close() }()
	client := registerapi.NewRegistrationClient(conn)

	info, err := getInfo(ctx, client)
	if err != nil {
		return fmt.Errorf("RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket %s, err: %v", socket, err)
	}
	handler, ok := handlers[info.Type]
	if !ok {
		return reject(ctx, client, socket,
			fmt.Sprintf("RegisterPlugin error -- no handler registered for plugin type: %s at socket %s", info.Type, socket))
	}
	// A plugin may serve its own API elsewhere (CSI's node-driver-registrar does);
	// without an endpoint, its registration socket is the endpoint.
	endpoint := info.Endpoint
	if endpoint == "" {
		endpoint = socket
	}
	if err := handler.ValidatePlugin(ctx, info.Name, endpoint, info.SupportedVersions); err != nil {
		return reject(ctx, client, socket, fmt.Sprintf("RegisterPlugin error -- plugin validation failed with err: %v", err))
	}
	// Recorded before the handler's Register, as upstream does, so that a socket deleted
	// meanwhile is deregistered once this operation is over.
	m.actual.add(registeredPlugin{socket: socket, generation: generation, name: info.Name, endpoint: endpoint, handler: handler})
	if err := handler.RegisterPlugin(ctx, info.Name, endpoint, info.SupportedVersions, nil); err != nil {
		m.actual.remove(socket)
		return reject(ctx, client, socket, fmt.Sprintf("RegisterPlugin error -- plugin registration failed with err: %v", err))
	}
	// Notified only after Register, so that a plugin that cannot be told is still
	// registered and deregistered in order.
	if err := notify(ctx, client, true, ""); err != nil {
		m.actual.remove(socket)
		handler.DeRegisterPlugin(ctx, info.Name, endpoint)
		return fmt.Errorf("RegisterPlugin error -- failed to send registration status at socket %s, err: %v", socket, err)
	}
	return nil
}

// unregister is upstream's unregister operation: the plugin leaves the actual state
// before its handler's DeRegister, so that a new socket at the same path can register.
func (m *Manager) unregister(ctx context.Context, p registeredPlugin) error {
	m.actual.remove(p.socket)
	p.handler.DeRegisterPlugin(ctx, p.name, p.endpoint)
	klog.FromContext(ctx).V(4).Info("DeRegisterPlugin called", "pluginName", p.name, "pluginHandler", p.handler)
	return nil
}

func getInfo(ctx context.Context, client registerapi.RegistrationClient) (*registerapi.PluginInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, getInfoTimeout)
	defer cancel()
	return client.GetInfo(ctx, &registerapi.InfoRequest{})
}

// reject tells the plugin it was not registered, and why; the reason is the operation's
// error.
func reject(ctx context.Context, client registerapi.RegistrationClient, socket, reason string) error {
	if err := notify(ctx, client, false, reason); err != nil {
		return fmt.Errorf("RegisterPlugin error -- failed to send error at socket %s, err: %s: %w", socket, reason, err)
	}
	return errors.New(reason)
}

func notify(ctx context.Context, client registerapi.RegistrationClient, registered bool, reason string) error {
	ctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	_, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: registered, Error: reason})
	return err
}
