package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstats "google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/ptr"
)

// PluginType is the plugin watcher's type for DRA plugins.
const PluginType = registerapi.DRAPlugin

// healthRetryPeriod is the pause before a health stream that ended is opened again.
const healthRetryPeriod = 5 * time.Second

// healthStreamHandler consumes one plugin's health stream until it ends.
type healthStreamHandler func(ctx context.Context, stream drahealth.DRAResourceHealth_NodeWatchResourcesClient, driverName string) error

// Registry is the plugin watcher's handler for DRA plugins (upstream's
// DRAPluginManager). It keeps every registered plugin by driver, watches whether their
// gRPC connections are up, and deletes a driver's ResourceSlices once none of its
// plugins has been connected for the wiping delay: pods must not be scheduled to the
// node for devices nobody can prepare.
type Registry struct {
	ctx          context.Context
	cancel       context.CancelFunc
	logger       klog.Logger
	client       kubernetes.Interface
	nodeName     string
	wipingDelay  time.Duration
	health       healthStreamHandler
	grpcDuration *prometheus.HistogramVec

	// wg tracks the health streams and the slice wiping.
	wg sync.WaitGroup
	mu sync.RWMutex
	// plugins are the plugins of each driver in registration order.
	plugins map[string][]*driverPlugin
	// wipes are the drivers whose slices get deleted unless a plugin connects first.
	wipes map[string]*pendingWipe
}

func newRegistry(client kubernetes.Interface, nodeName string, wipingDelay time.Duration, health healthStreamHandler, grpcDuration *prometheus.HistogramVec) *Registry {
	ctx, cancel := context.WithCancel(context.Background())
	logger := klog.Background().WithName("DRA registration handler")
	return &Registry{
		ctx: klog.NewContext(ctx, logger), cancel: cancel, logger: logger,
		client: client, nodeName: nodeName, wipingDelay: wipingDelay,
		health: health, grpcDuration: grpcDuration,
		plugins: map[string][]*driverPlugin{}, wipes: map[string]*pendingWipe{},
	}
}

// ValidatePlugin checks that the plugin serves a DRAPlugin service the kubelet knows.
func (r *Registry) ValidatePlugin(_ context.Context, pluginName, endpoint string, versions []string) error {
	if _, err := chooseService(versions); err != nil {
		return fmt.Errorf("invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: %w", pluginName, endpoint, err)
	}
	return nil
}

// RegisterPlugin adds a plugin of the driver pluginName (DRA plugins register under
// their driver's name) and connects to its endpoint. pluginClientTimeout bounds each
// call; nil means DefaultCallTimeout.
func (r *Registry) RegisterPlugin(_ context.Context, pluginName, endpoint string, versions []string, pluginClientTimeout *time.Duration) error {
	service, err := chooseService(versions)
	if err != nil {
		return fmt.Errorf("invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: %w", pluginName, endpoint, err)
	}
	p := &driverPlugin{
		driverName: pluginName, endpoint: endpoint, service: service,
		healthService: chooseHealthService(versions),
		timeout:       ptr.Deref(pluginClientTimeout, DefaultCallTimeout),
	}
	return r.add(p)
}

func (r *Registry) add(p *driverPlugin) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.ContainsFunc(r.plugins[p.driverName], func(old *driverPlugin) bool { return old.endpoint == p.endpoint }) {
		// One plugin instance cannot hijack the endpoint of another instance.
		return fmt.Errorf("endpoint %s already registered for DRA driver plugin %s", p.endpoint, p.driverName)
	}
	conn, err := grpc.NewClient("unix:"+p.endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(grpcDurationInterceptor(p.driverName, r.grpcDuration)),
		grpc.WithStatsHandler(&connMonitor{registry: r, plugin: p}),
	)
	if err != nil {
		return fmt.Errorf("create gRPC connection to DRA driver %s plugin at endpoint %s: %w", p.driverName, p.endpoint, err)
	}
	p.conn = conn
	r.startHealthStream(p)
	// Connect now rather than at the first call, so that a plugin that is not really
	// there is noticed (and its slices wiped) even when no pod needs it.
	conn.Connect()
	r.plugins[p.driverName] = append(r.plugins[p.driverName], p)
	r.logger.V(3).Info("Registered DRA plugin", "driverName", p.driverName, "endpoint", p.endpoint, "chosenService", p.service, "numPlugins", len(r.plugins[p.driverName]))
	r.syncWipe(p.driverName)
	return nil
}

// DeRegisterPlugin forgets a plugin whose registration socket went away. Its driver's
// slices get wiped after the delay unless another plugin of the driver is connected
// by then.
func (r *Registry) DeRegisterPlugin(_ context.Context, pluginName, endpoint string) {
	if p := r.remove(pluginName, endpoint); p != nil {
		// Closed without the lock: closing makes gRPC report the connection's end,
		// which takes the lock.
		if err := p.conn.Close(); err != nil {
			r.logger.Error(err, "Closing gRPC connection", "driverName", pluginName, "endpoint", endpoint)
		}
	}
}

func (r *Registry) remove(driverName, endpoint string) *driverPlugin {
	r.mu.Lock()
	defer r.mu.Unlock()
	plugins := r.plugins[driverName]
	i := slices.IndexFunc(plugins, func(p *driverPlugin) bool { return p.endpoint == endpoint })
	if i < 0 {
		return nil
	}
	p := plugins[i]
	if len(plugins) == 1 {
		delete(r.plugins, driverName)
	} else {
		r.plugins[driverName] = slices.Delete(plugins, i, i+1)
	}
	if p.stopHealth != nil {
		p.stopHealth()
	}
	r.logger.V(3).Info("Unregistered DRA plugin", "driverName", driverName, "endpoint", endpoint, "numPlugins", len(r.plugins[driverName]))
	r.syncWipe(driverName)
	return p
}

// getPlugin returns the plugin to call for a driver: the newest connected one, else
// the newest (after a kubelet restart plugins register in random order, so "newest"
// is only a heuristic).
func (r *Registry) getPlugin(driverName string) (*driverPlugin, error) {
	if driverName == "" {
		return nil, errors.New("DRA driver name is empty")
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	plugins := r.plugins[driverName]
	if len(plugins) == 0 {
		return nil, fmt.Errorf("DRA driver %s is not registered", driverName)
	}
	for i := len(plugins) - 1; i >= 0; i-- {
		if plugins[i].connected {
			return plugins[i], nil
		}
	}
	return plugins[len(plugins)-1], nil
}

// usable tells whether a plugin of the driver is connected. Caller holds the lock.
func (r *Registry) usable(driverName string) bool {
	return slices.ContainsFunc(r.plugins[driverName], func(p *driverPlugin) bool { return p.connected })
}

// startHealthStream follows the plugin's health service, if it has one, reopening the
// stream when it ends, until the plugin goes away or says it does not implement it.
// Caller holds the lock.
func (r *Registry) startHealthStream(p *driverPlugin) {
	if r.health == nil || p.healthService == "" || r.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(r.ctx)
	p.stopHealth = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer cancel()
		logger := r.logger.WithValues("driverName", p.driverName, "endpoint", p.endpoint)
		for {
			err := r.followHealth(ctx, p)
			if status.Code(err) == codes.Unimplemented {
				// A driver that gains support registers again.
				logger.V(2).Info("Driver does not support WatchResources health stream, stopping")
				return
			}
			logger.V(3).Info("WatchResources health stream ended, will retry", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(healthRetryPeriod):
			}
		}
	}()
}

func (r *Registry) followHealth(ctx context.Context, p *driverPlugin) error {
	stream, err := p.watchHealth(ctx)
	if err != nil {
		return err
	}
	return r.health(ctx, stream, p.driverName)
}

// stop ends the streams and the wiping, closes the connections and waits for the
// background work.
func (r *Registry) stop() {
	r.cancel()
	r.mu.Lock()
	var conns []*grpc.ClientConn
	for _, plugins := range r.plugins {
		for _, p := range plugins {
			conns = append(conns, p.conn)
		}
	}
	for driverName := range r.wipes {
		r.cancelWipe(driverName)
	}
	r.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	r.wg.Wait()
}

// connMonitor learns from gRPC when a plugin's connection comes and goes.
type connMonitor struct {
	registry *Registry
	plugin   *driverPlugin
}

func (*connMonitor) TagRPC(ctx context.Context, _ *grpcstats.RPCTagInfo) context.Context {
	return ctx
}
func (*connMonitor) HandleRPC(context.Context, grpcstats.RPCStats) {}
func (*connMonitor) TagConn(ctx context.Context, _ *grpcstats.ConnTagInfo) context.Context {
	return ctx
}

func (m *connMonitor) HandleConn(_ context.Context, s grpcstats.ConnStats) {
	var connected bool
	switch s.(type) {
	case *grpcstats.ConnBegin:
		connected = true
	case *grpcstats.ConnEnd:
		// gRPC only reconnects when asked; without this a restarted plugin would go
		// unnoticed. Asked from another goroutine: gRPC deadlocks when Connect is
		// called from inside this callback.
		go m.plugin.conn.Connect()
	default:
		return
	}
	r := m.registry
	if r.ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logger.V(2).Info("Connection changed", "driverName", m.plugin.driverName, "endpoint", m.plugin.endpoint, "connected", connected)
	m.plugin.connected = connected
	r.syncWipe(m.plugin.driverName)
}
