package csi

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// PluginType is the plugin watcher's type for CSI drivers.
const PluginType = registerapi.CSIPlugin

// csiTimeout bounds every driver call, as upstream's csiTimeout.
const csiTimeout = 2 * time.Minute

// ErrDriverNotRegistered is returned by the node operations for a driver that is not
// (or no longer) registered. Upstream treats it as a transient failure: retry later.
var ErrDriverNotRegistered = errors.New("not found in the list of registered CSI drivers")

// ErrNotSupported is returned by VolumeStats and Expand when the driver lacks the node
// capability they need.
var ErrNotSupported = errors.New("not supported by the CSI driver")

// uncertainError marks a failed driver call that may still have done its work (a
// timeout, an aborted or unavailable call): upstream's UncertainProgressError.
type uncertainError struct{ err error }

func (e *uncertainError) Error() string { return e.err.Error() }
func (e *uncertainError) Unwrap() error { return e.err }

// IsUncertain reports whether err comes from a driver call that may have staged,
// published or expanded the volume despite failing. The caller must then treat the
// volume as possibly mounted, so that it is unpublished or unstaged later, as upstream
// records such volumes in an uncertain state.
func IsUncertain(err error) bool {
	var u *uncertainError
	return errors.As(err, &u)
}

// Config is what a Manager needs.
type Config struct {
	// RootDir is the kubelet's root directory (--root-dir).
	RootDir string
	// NodeName is this node's name: the Node and CSINode objects updated on
	// registration, and part of the attachment ID recorded in vol_data.json.
	NodeName string
	// Client updates the Node and CSINode objects. Nil runs standalone: drivers
	// register without touching the API.
	Client kubernetes.Interface
}

// Manager is the kubelet's CSI node side; see the package documentation. It is safe
// for concurrent use.
type Manager struct {
	rootDir  string
	nodeName string
	client   kubernetes.Interface

	driversMu sync.RWMutex
	drivers   map[string]registeredDriver

	// nodeMu serializes the read-modify-write cycles on the Node and CSINode objects
	// (upstream's nodeInfoManager lock) and guards nodeUID.
	nodeMu sync.Mutex
	// nodeUID is the Node's UID, owner of the CSINode object; learnt from the API.
	nodeUID types.UID
}

// registeredDriver is a driver's socket and the newest CSI version it speaks.
type registeredDriver struct {
	endpoint string
	version  *utilversion.Version
}

// New returns a Manager with no drivers registered.
func New(cfg Config) *Manager {
	return &Manager{
		rootDir:  cfg.RootDir,
		nodeName: cfg.NodeName,
		client:   cfg.Client,
		drivers:  map[string]registeredDriver{},
	}
}

// RegisteredDrivers returns the names of the registered drivers, sorted.
func (m *Manager) RegisteredDrivers() []string {
	m.driversMu.RLock()
	defer m.driversMu.RUnlock()
	names := make([]string, 0, len(m.drivers))
	for name := range m.drivers {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func (m *Manager) driver(name string) (registeredDriver, bool) {
	m.driversMu.RLock()
	defer m.driversMu.RUnlock()
	d, ok := m.drivers[name]
	return d, ok
}

func (m *Manager) setDriver(name string, d registeredDriver) {
	m.driversMu.Lock()
	defer m.driversMu.Unlock()
	m.drivers[name] = d
}

func (m *Manager) deleteDriver(name string) {
	m.driversMu.Lock()
	defer m.driversMu.Unlock()
	delete(m.drivers, name)
}

// endpointOf returns the socket of a registered driver.
func (m *Manager) endpointOf(name string) (string, error) {
	if name == "" {
		return "", errors.New("driver name is empty")
	}
	d, ok := m.driver(name)
	if !ok {
		return "", fmt.Errorf("driver name %s %w", name, ErrDriverNotRegistered)
	}
	return d.endpoint, nil
}

// logf formats a message with upstream's "kubernetes.io/csi: " prefix.
func logf(format string, args ...any) string {
	return fmt.Sprintf(pluginName+": "+format, args...)
}
