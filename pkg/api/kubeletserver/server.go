// Package kubeletserver is the kubelet API: the HTTPS server on address:port (10250) with
// upstream's authentication and authorization, and the optional read-only port. It serves
// /healthz, /pods, /runningpods/, /configz and the debug endpoints itself, and mounts
// the handlers other packages build (streaming, stats, metrics) behind the same checks.
package kubeletserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate"
	"k8s.io/klog/v2"
	kc "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/api/server"
)

// Host is what the server needs from the kubelet.
type Host interface {
	// PodsWithStatus lists the pods bound to the node, with the status the kubelet last
	// computed (/pods).
	PodsWithStatus() []*v1.Pod
	// RunningPods lists what the runtime runs, as API pods carrying only what a runtime
	// pod knows: name, namespace, UID, containers' names, images and IDs (/runningpods/).
	RunningPods(ctx context.Context) ([]*v1.Pod, error)
	// SyncLoopHealthy fails when the sync loop has not run for too long (upstream: the
	// larger of 2×syncFrequency and 5 minutes) (/healthz/syncloop).
	SyncLoopHealthy() error
}

// Deps are the server's collaborators.
type Deps struct {
	Host Host
	// Client reaches the API server for TokenReviews, SubjectAccessReviews and serving
	// CSRs; nil standalone (then webhook authentication and authorization are refused).
	Client kubernetes.Interface
	// NodeAddresses are the node's status addresses, the names a bootstrapped serving
	// certificate is requested for (serverTLSBootstrap).
	NodeAddresses func() []v1.NodeAddress
	// HealthChecks are added to /healthz after ping, log and syncloop.
	HealthChecks []server.HealthCheck
	// Registerer gets kubelet_http_* and, with serverTLSBootstrap, the serving-certificate
	// metrics; nil registers nothing.
	Registerer prometheus.Registerer

	// Handlers built elsewhere, mounted under their paths behind authentication and
	// authorization; each receives the request with its full path. nil: 404.
	Exec          http.Handler // /exec/
	Attach        http.Handler // /attach/
	PortForward   http.Handler // /portForward/
	Run           http.Handler // /run/
	ContainerLogs http.Handler // /containerLogs/
	Checkpoint    http.Handler // /checkpoint/
	Stats         http.Handler // /stats/ (also on the read-only port)
	// Metrics endpoints (also on the read-only port).
	Metrics         http.Handler // /metrics
	MetricsResource http.Handler // /metrics/resource
	MetricsProbes   http.Handler // /metrics/probes
	MetricsSLIs     http.Handler // /metrics/slis
	MetricsCadvisor http.Handler // /metrics/cadvisor
}

// Server is the kubelet API server.
type Server struct {
	opts     Options
	deps     Deps
	secure   http.Handler
	readOnly http.Handler
	tls      *tls.Config
	authn    *authenticator
	authz    Authorizer
	watchers []*watchedFiles
	certMgr  certificate.Manager
	metrics  *httpMetrics

	mu           sync.Mutex
	addr         net.Addr
	readOnlyAddr net.Addr
}

// New builds the server: TLS material (files, a self-signed pair written to the cert dir,
// or the bootstrap manager), authentication, authorization and routes. Nothing listens
// until Start.
func New(opts Options, deps Deps) (*Server, error) {
	if deps.Host == nil {
		return nil, errors.New("kubelet server: no host")
	}
	if opts.FileCheckInterval <= 0 {
		opts.FileCheckInterval = time.Minute
	}
	if opts.NodeLogDir == "" {
		opts.NodeLogDir = "/var/log/"
	}
	// Names of versions and ciphers are checked before anything is written to the cert dir.
	if _, _, _, err := tlsParameters(opts); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, deps: deps}
	metrics, err := newHTTPMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	s.metrics = metrics
	clientCA, err := s.loadClientCA()
	if err != nil {
		return nil, err
	}
	if s.authn, err = newAuthenticator(opts, deps.Client, clientCA); err != nil {
		return nil, err
	}
	if s.authz, err = newAuthorizer(opts, deps.Client); err != nil {
		return nil, err
	}
	certs, err := s.servingCerts()
	if err != nil {
		return nil, err
	}
	if s.tls, err = newTLSConfig(opts, certs, clientCA); err != nil {
		return nil, err
	}
	s.secure = s.instrument(withAuth(opts.NodeName, s.authn, s.authz, s.routes(false)), "readwrite")
	if opts.ReadOnlyPort > 0 {
		s.readOnly = s.instrument(s.routes(true), "readonly")
	}
	return s, nil
}

// loadClientCA reads authentication.x509.clientCAFile; nil without one.
func (s *Server) loadClientCA() (*caBundle, error) {
	if s.opts.ClientCAFile == "" {
		return nil, nil
	}
	b := &caBundle{}
	w := &watchedFiles{what: "client CA file", paths: []string{s.opts.ClientCAFile},
		apply: func(c [][]byte) error { return b.set(c[0]) }}
	if err := w.load(); err != nil {
		return nil, fmt.Errorf("unable to load client CA file %s: %w", s.opts.ClientCAFile, err)
	}
	s.watchers = append(s.watchers, w)
	return b, nil
}

// servingCerts picks the serving certificate's source as upstream: the bootstrap manager
// with serverTLSBootstrap, else tlsCertFile/tlsPrivateKeyFile, else a self-signed pair
// in the cert dir (made once, then reused).
func (s *Server) servingCerts() (certSource, error) {
	o := s.opts
	if o.ServerTLSBootstrap {
		metrics, err := newServingMetrics(s.deps.Registerer, func() certificate.Manager { return s.certMgr })
		if err != nil {
			return nil, err
		}
		if s.certMgr, err = servingCertManager(o, s.deps.Client, s.deps.NodeAddresses, metrics); err != nil {
			return nil, err
		}
		return s.certMgr, nil
	}
	certFile, keyFile := o.TLSCertFile, o.TLSPrivateKeyFile
	if certFile == "" && keyFile == "" {
		var err error
		if certFile, keyFile, err = ensureSelfSigned(o.CertDir, o.Hostname, o.NodeIPs); err != nil {
			return nil, err
		}
	}
	fc := &fileCert{}
	w := &watchedFiles{what: "serving certificate", paths: []string{certFile, keyFile},
		apply: func(c [][]byte) error { return fc.set(c[0], c[1]) }}
	if err := w.load(); err != nil {
		return nil, fmt.Errorf("failed to load certificate: %w", err)
	}
	s.watchers = append(s.watchers, w)
	return fc, nil
}

// newAuthenticator builds authentication as configured; like upstream it refuses a
// configuration that could identify nobody, and webhook authentication without a client.
func newAuthenticator(o Options, client kubernetes.Interface, clientCA *caBundle) (*authenticator, error) {
	a := &authenticator{anonymous: o.Anonymous}
	if clientCA != nil {
		a.clientCAs = clientCA.Pool
	}
	if o.WebhookAuthentication {
		if client == nil {
			return nil, errors.New("no client provided, cannot use webhook authentication")
		}
		t, err := newTokenReviewer(client.AuthenticationV1().TokenReviews(), o.TokenCacheTTL)
		if err != nil {
			return nil, err
		}
		a.tokens = t
	}
	if a.clientCAs == nil && a.tokens == nil && !a.anonymous {
		return nil, errors.New("no authentication method configured")
	}
	return a, nil
}

func newAuthorizer(o Options, client kubernetes.Interface) (Authorizer, error) {
	switch o.AuthorizationMode {
	case string(kc.KubeletAuthorizationModeAlwaysAllow):
		return alwaysAllow{}, nil
	case string(kc.KubeletAuthorizationModeWebhook):
		if client == nil {
			return nil, errors.New("no client provided, cannot use webhook authorization")
		}
		return newSARAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), o.CacheAuthorizedTTL, o.CacheUnauthorizedTTL), nil
	case "":
		return nil, errors.New("no authorization mode specified")
	}
	return nil, fmt.Errorf("unknown authorization mode %s", o.AuthorizationMode)
}

// Start binds address:port (and the read-only port when set), so that a port in use is
// an error now, then serves until ctx ends. It also starts the certificate reloaders and,
// with serverTLSBootstrap, the certificate manager.
func (s *Server) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(s.opts.Address, strconv.Itoa(int(s.opts.Port))))
	if err != nil {
		return fmt.Errorf("kubelet server: %w", err)
	}
	var roLn net.Listener
	if s.readOnly != nil {
		if roLn, err = net.Listen("tcp", net.JoinHostPort(s.opts.Address, strconv.Itoa(int(s.opts.ReadOnlyPort)))); err != nil {
			ln.Close()
			return fmt.Errorf("kubelet read-only server: %w", err)
		}
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	if roLn != nil {
		s.readOnlyAddr = roLn.Addr()
	}
	s.mu.Unlock()
	for _, w := range s.watchers {
		go w.run(ctx, s.opts.FileCheckInterval)
	}
	if s.certMgr != nil {
		s.certMgr.Start()
		go func() { <-ctx.Done(); s.certMgr.Stop() }()
	}
	klog.InfoS("Starting to listen", "address", s.opts.Address, "port", s.opts.Port)
	go serve(ctx, newHTTPServer(s.secure, s.tls), ln, true)
	if roLn != nil {
		klog.InfoS("Starting to listen read-only", "address", s.opts.Address, "port", s.opts.ReadOnlyPort)
		go serve(ctx, newHTTPServer(s.readOnly, nil), roLn, false)
	}
	return nil
}

// Addr is the bound address of the HTTPS server (nil before Start).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// ReadOnlyAddr is the bound address of the read-only server (nil when off).
func (s *Server) ReadOnlyAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readOnlyAddr
}

// ServingCertificate is the certificate currently served (nil while a bootstrap CSR waits).
func (s *Server) ServingCertificate() *tls.Certificate {
	c, err := s.tls.GetCertificate(nil)
	if err != nil {
		return nil
	}
	return c
}

// newHTTPServer has upstream's limits: long reads and writes (streams last), 90s idle.
func newHTTPServer(h http.Handler, tlsConfig *tls.Config) *http.Server {
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tlsConfig,
		IdleTimeout:       90 * time.Second,
		ReadTimeout:       4 * 60 * time.Minute,
		WriteTimeout:      4 * 60 * time.Minute,
		ReadHeaderTimeout: 32 * time.Second,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          newTLSErrorLog(),
	}
	if tlsConfig != nil && !slices.Contains(tlsConfig.NextProtos, "h2") {
		// An empty map keeps net/http from setting up HTTP/2 (which would refuse the ciphers).
		srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	return srv
}

func serve(ctx context.Context, srv *http.Server, ln net.Listener, useTLS bool) {
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(shutdownCtx) != nil {
			srv.Close()
		}
	}()
	var err error
	if useTLS {
		err = srv.ServeTLS(ln, "", "")
	} else {
		err = srv.Serve(ln)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		klog.ErrorS(err, "Failed to listen and serve")
		ln.Close()
	}
}
