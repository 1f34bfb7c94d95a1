// Package kubeclient builds the node's API clients from its kubeconfig, the way
// upstream's kubelet does (cmd/kubelet/app/server.go and pkg/kubelet/certificate):
// TLS bootstrap of the node's client certificate from a bootstrap kubeconfig,
// rotation of that certificate through the CSR API, and three clients — the
// general one (rate-limited, protobuf), one for events (its own rate limit) and
// one for heartbeats (no rate limit, a short timeout).
//
// On disk, in the cert dir: kubelet-client-<timestamp>.pem (certificate and key)
// per issued certificate, kubelet-client-current.pem, a symlink to the newest, and
// kubelet-client.key.tmp while a bootstrap CSR is pending. The kubeconfig written
// after bootstrap names kubelet-client-current.pem as client certificate and key.
package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/version"
)

const (
	contentTypeProtobuf = "application/vnd.kubernetes.protobuf"
	contentTypeJSON     = "application/json"
)

// Options are the flags and configuration fields that shape the clients.
type Options struct {
	KubeConfig          string // --kubeconfig; required
	BootstrapKubeconfig string // --bootstrap-kubeconfig; optional
	CertDir             string // --cert-dir, where client certificates are stored
	NodeName            string // the certificate is for system:node:<NodeName>
	RotateCertificates  bool   // rotateCertificates

	QPS         float32 // kubeAPIQPS
	Burst       int     // kubeAPIBurst
	ContentType string  // contentType; protobuf when empty

	EventQPS   float32 // eventRecordQPS; 0 means no limit
	EventBurst int     // eventBurst

	// The heartbeat client's timeout is the smaller of these two, as upstream.
	NodeStatusUpdateFrequency time.Duration // nodeStatusUpdateFrequency
	NodeLeaseDuration         time.Duration // nodeLeaseDurationSeconds

	// UserAgent defaults to "kubelet/<kubelet version> (<os>/<arch>) nodelet/<version>".
	UserAgent string
	// Registerer receives the client certificate metrics when rotation is on.
	Registerer prometheus.Registerer
}

// Clients are the node's API clients. Stop ends certificate rotation.
type Clients struct {
	Kube      kubernetes.Interface // kubeAPIQPS/kubeAPIBurst, configured content type
	Events    kubernetes.Interface // eventRecordQPS/eventBurst
	Heartbeat kubernetes.Interface // no rate limit, timeout from nodeStatusUpdateFrequency

	Config          *rest.Config // Kube's configuration, for further clients
	EventConfig     *rest.Config
	HeartbeatConfig *rest.Config

	kubeconfig string // the file whose credentials the clients use
	server     string
	certs      *certManager // nil without rotation
	stopOnce   sync.Once
}

// Build creates the clients. Without rotation and with a bootstrap kubeconfig it
// first makes sure the kubeconfig has a valid client certificate, bootstrapping
// one if needed; that blocks until the certificate is issued, ctx ends, or a
// permanent error (see IsPermanent) occurs. With rotation, bootstrapping happens
// in the background, as upstream does; WaitForServer waits for it. Rotation runs
// until Stop, not bounded by ctx.
func Build(ctx context.Context, o Options) (*Clients, error) {
	if o.KubeConfig == "" {
		return nil, errors.New("no kubeconfig: API clients need --kubeconfig")
	}
	o = o.withDefaults()
	var (
		c   *Clients
		err error
	)
	if o.RotateCertificates {
		c, err = buildRotating(ctx, o)
	} else {
		c, err = buildStatic(ctx, o)
	}
	if err != nil {
		return nil, err
	}
	if err := c.makeClients(o); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (o Options) withDefaults() Options {
	if o.ContentType == "" {
		o.ContentType = contentTypeProtobuf
	}
	if o.UserAgent == "" {
		o.UserAgent = fmt.Sprintf("kubelet/%s (%s/%s) nodelet/%s",
			version.KubeletVersion, runtime.GOOS, runtime.GOARCH, version.Nodelet)
	}
	return o
}

// buildStatic uses the kubeconfig's credentials as they are (client-go reloads
// certificate files when they change), after bootstrapping them if asked to.
func buildStatic(ctx context.Context, o Options) (*Clients, error) {
	if o.BootstrapKubeconfig != "" {
		if err := bootstrapClientCert(ctx, o); err != nil {
			return nil, err
		}
	}
	cfg, err := loadKubeconfig(o.KubeConfig)
	if err != nil {
		return nil, err
	}
	c := &Clients{kubeconfig: o.KubeConfig, server: cfg.Host, Config: cfg}
	return c, nil
}

// buildRotating mirrors upstream's rotation set-up: pick the kubeconfig or, when
// it is missing or its certificate expired, write one that points at the cert
// dir and let the certificate manager bootstrap with the bootstrap credentials;
// then give the clients a transport that follows the manager's certificate.
func buildRotating(ctx context.Context, o Options) (*Clients, error) {
	logger := klog.FromContext(ctx)
	logger.Info("Client rotation is on, will bootstrap in background")
	node, err := nodeConfig(logger, o)
	if err != nil {
		return nil, err
	}
	store, err := newClientCertStore(logger, o.CertDir, node.CertFile, node.KeyFile)
	if err != nil {
		return nil, err
	}
	m := &certManager{store: store, nodeName: o.NodeName, rotationPoint: jitteredRotationPoint, retry: renewBackoff}
	cert, rotateNow, err := m.loadInitialCert(logger, node.CertData, node.KeyData)
	if err != nil {
		return nil, err
	}
	m.cert = cert

	cfg := rest.AnonymousClientConfig(node)
	closeAll, err := useRotatingCert(cfg, m.Current)
	if err != nil {
		return nil, err
	}
	m.onRotate = func() {
		logger.Info("Certificate rotation detected, shutting down client connections to start using new credentials")
		closeAll()
	}
	if m.csrClient, err = csrClients(o, node.Host, csrClientConfig(cfg, o)); err != nil {
		return nil, err
	}
	if m.metrics, err = registerCertMetrics(o.Registerer, m.notAfter); err != nil {
		return nil, err
	}
	m.start(context.WithoutCancel(ctx), rotateNow)
	return &Clients{kubeconfig: o.KubeConfig, server: node.Host, Config: cfg, certs: m}, nil
}

// nodeConfig is upstream's LoadClientConfig: the kubeconfig as it is when there
// is no bootstrap kubeconfig or its certificate is still valid; otherwise the
// bootstrap kubeconfig's cluster with the cert dir's current pair as credentials,
// written to the kubeconfig path for the next start.
func nodeConfig(logger klog.Logger, o Options) (*rest.Config, error) {
	if o.BootstrapKubeconfig != "" {
		valid, err := kubeconfigCertValid(logger, o.KubeConfig, time.Now())
		if err != nil {
			return nil, err
		}
		if !valid {
			return kubeconfigFromBootstrap(o)
		}
	}
	return loadKubeconfig(o.KubeConfig)
}

func kubeconfigFromBootstrap(o Options) (*rest.Config, error) {
	boot, err := loadKubeconfig(o.BootstrapKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("unable to load bootstrap kubeconfig: %w", err)
	}
	if o.CertDir == "" {
		return nil, fmt.Errorf("no certificate directory (--cert-dir) to store the client certificate in")
	}
	node := rest.AnonymousClientConfig(boot)
	node.CertFile = pemPath(o.CertDir)
	node.KeyFile = node.CertFile
	if err := writeNodeKubeconfig(o.KubeConfig, boot, node.CertFile); err != nil {
		return nil, err
	}
	return node, nil
}

// csrClients returns the certificate manager's client chooser: the node's own
// credentials (nodeCfg, the rotating transport) while its certificate is valid,
// else the bootstrap kubeconfig's, re-read each time so a fixed bootstrap file
// takes effect without a restart.
func csrClients(o Options, server string, nodeCfg *rest.Config) (func(bool) (kubernetes.Interface, string, string, error), error) {
	nodeClient, err := kubernetes.NewForConfig(nodeCfg)
	if err != nil {
		return nil, fmt.Errorf("unable to create certificate signing request client: %w", err)
	}
	return func(haveCert bool) (kubernetes.Interface, string, string, error) {
		if haveCert || o.BootstrapKubeconfig == "" {
			return nodeClient, o.KubeConfig, server, nil
		}
		boot, err := loadKubeconfig(o.BootstrapKubeconfig)
		if err != nil {
			return nil, o.BootstrapKubeconfig, "", err
		}
		client, err := kubernetes.NewForConfig(csrClientConfig(boot, o))
		return client, o.BootstrapKubeconfig, boot.Host, err
	}, nil
}

// makeClients derives the three clients from c.Config with upstream's settings.
func (c *Clients) makeClients(o Options) error {
	kube := rest.CopyConfig(c.Config)
	setContentType(kube, o.ContentType)
	kube.QPS = o.QPS
	kube.Burst = o.Burst
	kube.UserAgent = o.UserAgent

	events := rest.CopyConfig(kube)
	events.QPS = o.EventQPS
	if int(events.QPS) == 0 { // upstream: eventRecordQPS 0 means no limit
		events.QPS = -1
	}
	events.Burst = o.EventBurst

	heartbeat := rest.CopyConfig(kube)
	heartbeat.Timeout = o.NodeStatusUpdateFrequency
	if o.NodeLeaseDuration > 0 && heartbeat.Timeout > o.NodeLeaseDuration {
		heartbeat.Timeout = o.NodeLeaseDuration
	}
	heartbeat.QPS = -1

	var err error
	if c.Kube, err = kubernetes.NewForConfig(kube); err != nil {
		return fmt.Errorf("failed to initialize kubelet client: %w", err)
	}
	if c.Events, err = kubernetes.NewForConfig(events); err != nil {
		return fmt.Errorf("failed to initialize kubelet event client: %w", err)
	}
	if c.Heartbeat, err = kubernetes.NewForConfig(heartbeat); err != nil {
		return fmt.Errorf("failed to initialize kubelet heartbeat client: %w", err)
	}
	c.Config, c.EventConfig, c.HeartbeatConfig = kube, events, heartbeat
	return nil
}

// setContentType sends contentType and, for protobuf, accepts JSON as well, for
// the resources the server cannot encode as protobuf.
func setContentType(cfg *rest.Config, contentType string) {
	if contentType == "" {
		return
	}
	cfg.ContentType = contentType
	if contentType == contentTypeProtobuf {
		cfg.AcceptContentTypes = strings.Join([]string{contentTypeProtobuf, contentTypeJSON}, ",")
	}
}

// Kubeconfig is the file whose credentials the clients use; Server is its API server.
func (c *Clients) Kubeconfig() string { return c.kubeconfig }

// Server is the API server's URL.
func (c *Clients) Server() string { return c.server }

// Describe renders an error from any of the clients as one log line naming the
// kubeconfig and server, with the reason in words (see Classify).
func (c *Clients) Describe(err error) string {
	return Describe(wrapError(c.kubeconfig, c.server, err))
}

// WaitForServer blocks until the API server answers /readyz with the node's
// credentials (with rotation on, once the first certificate is issued). An
// unreachable or not-ready server is retried with back-off, one log line per
// step; a permanent failure (untrusted server, rejected credentials, denied CSR)
// returns at once as an *Error naming the kubeconfig and server.
func (c *Clients) WaitForServer(ctx context.Context) error {
	if err := c.waitForCert(ctx); err != nil {
		return err
	}
	return retryUntil(ctx, serverBackoff, "Waiting for the API server", func(ctx context.Context) error {
		return wrapError(c.kubeconfig, c.server, probeServer(ctx, c.Heartbeat.Discovery().RESTClient()))
	})
}

// Probe asks the API server once whether it is ready, with the node's credentials. A
// server that cannot work with this kubeconfig (IsPermanent) is found at the first
// contact; nil also when there is no client certificate yet to try (rotation bootstraps
// in the background).
func (c *Clients) Probe(ctx context.Context) error {
	if c.certs != nil && c.certs.Current() == nil {
		return nil
	}
	return wrapError(c.kubeconfig, c.server, probeServer(ctx, c.Heartbeat.Discovery().RESTClient()))
}

// waitForCert waits for the certificate manager's first certificate. It does not
// log: the manager logs each failed attempt itself.
func (c *Clients) waitForCert(ctx context.Context) error {
	if c.certs == nil {
		return nil
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for c.certs.Current() == nil {
		if err := c.certs.LastError(); err != nil && IsPermanent(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for a client certificate: %w; last error: %s", ctx.Err(), Describe(c.certs.LastError()))
		case <-tick.C:
		}
	}
	return nil
}

// ClientCertExpiry is when the client certificate in use expires; false when
// the clients use no client certificate.
func (c *Clients) ClientCertExpiry() (time.Time, bool) {
	if c.certs != nil {
		t := c.certs.notAfter()
		return t, !t.IsZero()
	}
	certs, err := clientCertificates(c.Config)
	if err != nil || len(certs) == 0 {
		return time.Time{}, false
	}
	return certs[0].NotAfter, true
}

// OnHeartbeatFailure closes the clients' idle connections, upstream's remedy
// for a heartbeat that failed on a stale connection.
func (c *Clients) OnHeartbeatFailure() {
	if t, err := rest.TransportFor(c.Config); err == nil {
		utilnet.CloseIdleConnectionsFor(t)
	}
}

// Stop ends certificate rotation. The clients keep working with the current
// certificate until it expires.
func (c *Clients) Stop() {
	c.stopOnce.Do(func() {
		if c.certs != nil {
			c.certs.stopIt()
		}
	})
}
