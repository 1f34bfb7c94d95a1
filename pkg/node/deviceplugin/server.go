package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/pkg/resourcename"
)

// registrationServer serves the Registration service on kubelet.sock and keeps the
// connections to the plugins that registered (upstream's plugin/v1beta1 server).
type registrationServer struct {
	pluginapi.UnsafeRegistrationServer

	m      *Manager
	dir    string
	logger klog.Logger

	mu      sync.Mutex
	grpc    *grpc.Server
	done    chan struct{}
	clients map[string][]*pluginClient // by resource name
	// lastErr is why serving stopped; the server is healthy until it fails.
	lastErr error
}

func newRegistrationServer(m *Manager, dir string) *registrationServer {
	return &registrationServer{m: m, dir: dir, logger: klog.Background(), clients: map[string][]*pluginClient{}}
}

func (s *registrationServer) socketPath() string {
	return filepath.Join(s.dir, KubeletSocketName)
}

// start removes the sockets left in the directory (plugins notice the new kubelet.sock
// and register again) and serves the Registration service.
func (s *registrationServer) start(logger klog.Logger) error {
	s.logger = logger
	logger.V(2).Info("Starting device plugin registration server")
	if err := os.MkdirAll(s.dir, 0o750); err != nil {
		logger.Error(err, "Failed to create the device plugin socket directory", "directory", s.dir)
		return err
	}
	if err := cleanupPluginDirectory(logger, s.dir); err != nil {
		logger.Error(err, "Failed to cleanup the device plugin directory", "directory", s.dir)
		return err
	}
	ln, err := net.Listen("unix", s.socketPath())
	if err != nil {
		logger.Error(err, "Failed to listen to socket while starting device plugin registry")
		return err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, s)
	done := make(chan struct{})
	s.mu.Lock()
	s.grpc, s.done, s.lastErr = srv, done, nil
	s.mu.Unlock()
	go s.serve(srv, ln, done)
	return nil
}

func (s *registrationServer) serve(srv *grpc.Server, ln net.Listener, done chan struct{}) {
	defer close(done)
	if err := srv.Serve(ln); err != nil {
		s.setUnhealthy(err)
		s.logger.Error(err, "Error while serving device plugin registration grpc server")
	}
}

// cleanupPluginDirectory is upstream's CleanupPluginDirectory: it removes every unix
// socket in dir, and nothing else (not the checkpoint, not directories or other files).
func cleanupPluginDirectory(logger klog.Logger, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, entry := range entries {
		path := filepath.Join(dir, entry.Name())
		stat, err := os.Stat(path)
		if err != nil {
			logger.Error(err, "Failed to stat file", "path", path)
			continue
		}
		if stat.IsDir() || stat.Mode()&os.ModeSocket == 0 {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, err)
			logger.Error(err, "Failed to remove file", "path", path)
		}
	}
	return errors.Join(errs...)
}

// stop disconnects every plugin and stops serving; it may be called without a start and
// more than once.
func (s *registrationServer) stop(logger klog.Logger) {
	for _, c := range s.allClients() {
		s.disconnect(logger, c)
	}
	s.mu.Lock()
	srv, done := s.grpc, s.done
	s.grpc, s.done = nil, nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	<-done
	// While stopped (the kubelet is terminating) the server counts as healthy.
	s.mu.Lock()
	s.lastErr = nil
	s.mu.Unlock()
	logger.V(2).Info("Stopping device plugin registration server")
}

// Register is the Registration service's RPC. Upstream checks the version and the
// resource name only; the plugin's options are asked from the plugin itself once
// connected.
func (s *registrationServer) Register(ctx context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	logger := s.logger
	logger.Info("Got registration request from device plugin with resource", "resourceName", r.ResourceName)
	RegistrationTotal.WithLabelValues(r.ResourceName).Inc()
	if !isSupportedVersion(r.Version) {
		err := fmt.Errorf("requested API version %q is not supported by kubelet. Supported version is %q", r.Version, pluginapi.SupportedVersions)
		logger.Error(err, "Bad registration request from device plugin with resource", "resourceName", r.ResourceName)
		return &pluginapi.Empty{}, err
	}
	if !resourcename.IsExtended(v1.ResourceName(r.ResourceName)) {
		err := fmt.Errorf("the ResourceName %q is invalid", r.ResourceName)
		logger.Error(err, "Bad registration request from device plugin")
		return &pluginapi.Empty{}, err
	}
	if err := s.connect(klog.NewContext(ctx, logger), r.ResourceName, filepath.Join(s.dir, r.Endpoint)); err != nil {
		logger.Error(err, "Error connecting to device plugin client")
		return &pluginapi.Empty{}, err
	}
	return &pluginapi.Empty{}, nil
}

func isSupportedVersion(version string) bool {
	for _, supported := range pluginapi.SupportedVersions {
		if version == supported {
			return true
		}
	}
	return false
}

// connect dials the plugin, hands it to the manager and streams its devices.
func (s *registrationServer) connect(ctx context.Context, resource, socket string) error {
	logger := klog.FromContext(ctx)
	c := &pluginClient{resource: resource, socket: socket}
	s.addClient(c)
	if err := s.connectClient(ctx, c); err != nil {
		s.removeClient(c)
		c.close(logger)
		logger.Error(err, "Failed to connect to new client", "resource", resource, "socketPath", socket)
		return err
	}
	logger.V(2).Info("Connected to new client", "resource", resource, "socketPath", socket)
	go s.runClient(c)
	return nil
}

func (s *registrationServer) connectClient(ctx context.Context, c *pluginClient) error {
	if err := c.connect(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Unable to connect to device plugin client with socket path", "path", c.socket)
		return err
	}
	return s.m.pluginConnected(ctx, c)
}

// runClient streams the plugin's devices; when the stream ends the plugin is
// disconnected, unless it already was (stop, or a failed connection).
func (s *registrationServer) runClient(c *pluginClient) {
	logger := s.logger
	c.run(logger, func(devices []*pluginapi.Device) { s.m.updateDevices(logger, c.resource, devices) })
	if s.hasClient(c) {
		s.disconnect(logger, c)
	}
}

func (s *registrationServer) disconnect(logger klog.Logger, c *pluginClient) {
	s.removeClient(c)
	c.close(logger)
	s.m.pluginDisconnected(logger, c.resource, c.socket)
	logger.V(2).Info("Device plugin disconnected", "resource", c.resource)
}

func (s *registrationServer) addClient(c *pluginClient) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients[c.resource] = append(s.clients[c.resource], c)
}

// removeClient forgets c itself, not another connection to the same socket: a plugin
// that restarted may have registered again before its old stream ended.
func (s *registrationServer) removeClient(c *pluginClient) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var kept []*pluginClient
	for _, other := range s.clients[c.resource] {
		if other != c {
			kept = append(kept, other)
		}
	}
	if len(kept) == 0 {
		delete(s.clients, c.resource)
		return
	}
	s.clients[c.resource] = kept
}

func (s *registrationServer) hasClient(c *pluginClient) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, other := range s.clients[c.resource] {
		if other == c {
			return true
		}
	}
	return false
}

func (s *registrationServer) allClients() []*pluginClient {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []*pluginClient
	for _, cs := range s.clients {
		all = append(all, cs...)
	}
	return all
}

func (s *registrationServer) setUnhealthy(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = fmt.Errorf("device registration error: device plugin registration gRPC server failed and no device plugins can register: %w", err)
}

// check is the health check: the error that stopped the server, if it failed.
func (s *registrationServer) check(*http.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}
