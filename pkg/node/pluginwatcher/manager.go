package pluginwatcher

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// RegistryDirName is the registry directory under the kubelet's root directory
// (upstream's DefaultKubeletPluginsRegistrationDirName).
const RegistryDirName = "plugins_registry"

// reconcilePeriod is upstream's loopSleepDuration: the pause between reconciler passes.
const reconcilePeriod = time.Second

// Handler is what a plugin type (CSIPlugin, DRAPlugin) registers with the manager:
// upstream's cache.PluginHandler. For one socket, calls never overlap and follow
// Validate, Register, then DeRegister once the socket is deleted or re-created.
type Handler interface {
	// ValidatePlugin rejects a plugin the handler cannot use (unsupported versions, ...).
	ValidatePlugin(ctx context.Context, pluginName, endpoint string, versions []string) error
	// RegisterPlugin starts using the plugin; an error is reported to the plugin and the
	// registration is retried.
	RegisterPlugin(ctx context.Context, pluginName, endpoint string, versions []string, pluginClientTimeout *time.Duration) error
	// DeRegisterPlugin stops using a plugin registered before.
	DeRegisterPlugin(ctx context.Context, pluginName, endpoint string)
}

// Manager is upstream's plugin manager: a watcher filling the desired state and a
// reconciler registering and deregistering plugins to match it.
type Manager struct {
	dir    string
	period time.Duration

	handlersMu sync.RWMutex
	handlers   map[string]Handler

	desired *desiredState
	actual  *actualState
	ops     *operations
	// goroutines counts everything Run started, operations included.
	goroutines sync.WaitGroup
}

// New returns a manager for the registry directory dir, usually
// <root-dir>/plugins_registry.
func New(dir string) *Manager {
	m := &Manager{
		dir:      dir,
		period:   reconcilePeriod,
		handlers: map[string]Handler{},
		desired:  newDesiredState(),
		actual:   newActualState(),
	}
	m.ops = newOperations(&m.goroutines)
	return m
}

// AddHandler routes the plugins whose GetInfo answers pluginType to h. Upstream's kubelet
// adds its handlers before Run; a handler added later serves the next registrations.
func (m *Manager) AddHandler(pluginType string, h Handler) {
	m.handlersMu.Lock()
	defer m.handlersMu.Unlock()
	m.handlers[pluginType] = h
}

// Collector returns the plugin_manager_total_plugins gauge, for the caller's /metrics
// registry.
func (m *Manager) Collector() prometheus.Collector {
	return totalPluginsCollector{m: m}
}

// Run, called once, starts watching the registry directory, creating it when missing,
// and returns an error if that fails. The reconciler starts once sourcesReady reports
// true. A nil sourcesReady starts it at once, which is upstream's behaviour: its plugin
// manager is handed the kubelet's SourcesReady but never consults it. Everything stops
// when ctx ends.
func (m *Manager) Run(ctx context.Context, sourcesReady func() bool) error {
	logger := klog.FromContext(ctx)
	w, err := startWatcher(ctx, m.dir, m.desired)
	if err != nil {
		logger.Error(err, "The desired_state_of_world populator (plugin watcher) starts failed!")
		return err
	}
	logger.V(2).Info("The desired_state_of_world populator (plugin watcher) starts")
	m.goroutines.Go(func() { w.loop(ctx) })

	logger.Info("Starting Kubelet Plugin Manager")
	m.goroutines.Go(func() {
		if m.waitForSources(ctx, sourcesReady) {
			m.reconcileUntilDone(ctx)
		}
		logger.Info("Shutting down Kubelet Plugin Manager")
	})
	return nil
}

// wait blocks until everything Run started has returned; for tests.
func (m *Manager) wait() { m.goroutines.Wait() }

// waitForSources polls sourcesReady once a period; it reports false if ctx ended first.
func (m *Manager) waitForSources(ctx context.Context, sourcesReady func() bool) bool {
	if sourcesReady == nil {
		return true
	}
	for !sourcesReady() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(m.period):
		}
	}
	return true
}

// reconcileUntilDone runs a reconciler pass, then another one period after it ended.
func (m *Manager) reconcileUntilDone(ctx context.Context) {
	for {
		m.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(m.period):
		}
	}
}

// reconcile starts the operations that bring the actual state to the desired one:
// deregistrations first, then registrations. Operations refused because one is already
// running on the socket, or because it failed recently, are tried again next pass.
func (m *Manager) reconcile(ctx context.Context) {
	logger := klog.FromContext(ctx)
	desired := m.desired.snapshot()
	for _, p := range m.actual.snapshot() {
		generation, wanted := desired[p.socket]
		if wanted && generation == p.generation {
			continue
		}
		if wanted {
			logger.V(5).Info("An updated version of plugin has been found, unregistering the plugin first before reregistering", "path", p.socket, "pluginName", p.name)
		}
		if m.ops.start(logger, p.socket, func() error { return m.unregister(ctx, p) }) {
			logger.V(1).Info("OperationExecutor.UnregisterPlugin started", "path", p.socket, "pluginName", p.name)
		}
	}
	for socket, generation := range desired {
		if m.actual.isRegistered(socket, generation) {
			continue
		}
		handlers := m.handlersSnapshot()
		if m.ops.start(logger, socket, func() error { return m.register(ctx, socket, generation, handlers) }) {
			logger.V(1).Info("OperationExecutor.RegisterPlugin started", "path", socket)
		}
	}
}

func (m *Manager) handlersSnapshot() map[string]Handler {
	m.handlersMu.RLock()
	defer m.handlersMu.RUnlock()
	out := make(map[string]Handler, len(m.handlers))
	for pluginType, h := range m.handlers {
		out[pluginType] = h
	}
	return out
}
