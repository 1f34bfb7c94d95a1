package kubeletserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/keyutil"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"
)

// errNoServingCert fails TLS handshakes until a serving certificate exists (with
// serverTLSBootstrap: until the CSR is approved and issued), as upstream.
var errNoServingCert = errors.New("no serving certificate available for the kubelet")

// certSource yields the serving certificate for each handshake.
type certSource interface {
	Current() *tls.Certificate
}

// tlsParameters turns upstream's names into crypto/tls values: tlsMinVersion
// ("VersionTLS12"...; default TLS 1.2), tlsCipherSuites (Go's names plus upstream's legacy
// CHACHA20 aliases) and tlsCurvePreferences (Go's numeric curve IDs).
func tlsParameters(o Options) (minVersion uint16, ciphers []uint16, curves []tls.CurveID, err error) {
	if ciphers, err = cliflag.TLSCipherSuites(o.TLSCipherSuites); err != nil {
		return 0, nil, nil, err
	}
	if minVersion, err = cliflag.TLSVersion(o.TLSMinVersion); err != nil {
		return 0, nil, nil, err
	}
	if curves, err = cliflag.TLSCurvePreferences(o.TLSCurvePreferences); err != nil {
		return 0, nil, nil, err
	}
	return minVersion, ciphers, curves, nil
}

// newTLSConfig is the HTTPS server's configuration. Client certificates are requested but
// not required or verified in the handshake: authentication verifies them against the
// client CA, so a request without one can still carry a token.
func newTLSConfig(o Options, certs certSource, clientCA *caBundle) (*tls.Config, error) {
	minVersion, ciphers, curves, err := tlsParameters(o)
	if err != nil {
		return nil, err
	}
	insecure := cliflag.InsecureTLSCiphers()
	for _, name := range o.TLSCipherSuites {
		if _, bad := insecure[name]; bad {
			klog.InfoS("Use of insecure cipher detected.", "cipher", name)
		}
	}
	if minVersion == tls.VersionTLS13 && len(ciphers) > 0 {
		klog.InfoS("Warning: TLS 1.3 cipher suites are not configurable, ignoring --tls-cipher-suites")
	}
	protos := []string{"h2", "http/1.1"}
	if !http2Allowed(minVersion, ciphers) {
		klog.InfoS("tlsCipherSuites has no cipher HTTP/2 requires (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 or TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256): serving HTTP/1.1 only")
		protos = []string{"http/1.1"}
	}
	base := &tls.Config{
		MinVersion:       minVersion,
		CipherSuites:     ciphers,
		CurvePreferences: curves,
		NextProtos:       protos,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := certs.Current(); c != nil {
				return c, nil
			}
			return nil, errNoServingCert
		},
	}
	if clientCA == nil {
		return base, nil
	}
	base.ClientAuth = tls.RequestClientCert
	// The CA names sent in the certificate request follow the (reloaded) client CA file.
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return clientCA.tlsConfig(base), nil
	}
	return base, nil
}

// http2Allowed reports whether Go's HTTP/2 server accepts the cipher list: below TLS 1.3
// it requires an ECDHE AES-128-GCM suite. (Upstream's kubelet fails to serve at all with
// such a list; nodelet serves HTTP/1.1, which is what the API server's proxy uses.)
func http2Allowed(minVersion uint16, ciphers []uint16) bool {
	if len(ciphers) == 0 || minVersion >= tls.VersionTLS13 {
		return true
	}
	return slices.Contains(ciphers, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) ||
		slices.Contains(ciphers, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)
}

// caBundle is the client CA file's content, reloaded when the file changes (upstream's
// ReloadKubeletClientCAFile, on by default).
type caBundle struct {
	pool atomic.Pointer[x509.CertPool]
	// forClients caches the per-handshake configuration for the current pool.
	forClients atomic.Pointer[tls.Config]
}

func (b *caBundle) set(pemData []byte) error {
	pool, err := certutil.NewPoolFromBytes(pemData)
	if err != nil {
		return err
	}
	b.pool.Store(pool)
	b.forClients.Store(nil)
	return nil
}

// Pool is the current set of client CAs.
func (b *caBundle) Pool() *x509.CertPool { return b.pool.Load() }

func (b *caBundle) tlsConfig(base *tls.Config) *tls.Config {
	if c := b.forClients.Load(); c != nil {
		return c
	}
	c := base.Clone()
	c.GetConfigForClient = nil
	c.ClientCAs = b.Pool()
	b.forClients.Store(c)
	return c
}

// fileCert is a serving certificate read from tlsCertFile/tlsPrivateKeyFile and read again
// when they change (upstream's ReloadKubeletServerCertificateFile, on by default).
type fileCert struct {
	cert atomic.Pointer[tls.Certificate]
}

func (f *fileCert) Current() *tls.Certificate { return f.cert.Load() }

func (f *fileCert) set(certPEM, keyPEM []byte) error {
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	f.cert.Store(&c)
	return nil
}

// watchedFiles reads a set of files and hands their contents to apply, at start and
// whenever one of them changes. A change that apply refuses (a half-written pair, a
// bad PEM) is logged and the previous content stays in use.
type watchedFiles struct {
	what  string
	paths []string
	apply func(contents [][]byte) error
	last  [][]byte
}

func (w *watchedFiles) read() ([][]byte, error) {
	out := make([][]byte, len(w.paths))
	for i, p := range w.paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out[i] = data
	}
	return out, nil
}

// load reads and applies the files once; used at start, where a failure is fatal.
func (w *watchedFiles) load() error {
	contents, err := w.read()
	if err == nil {
		err = w.apply(contents)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", w.what, err)
	}
	w.last = contents
	return nil
}

// check applies the files again if their content changed since the last success.
func (w *watchedFiles) check() {
	contents, err := w.read()
	if err == nil && slices.EqualFunc(contents, w.last, bytes.Equal) {
		return
	}
	if err == nil {
		err = w.apply(contents)
	}
	if err != nil {
		klog.ErrorS(err, "Failed to reload, keeping the previous content", "what", w.what, "files", w.paths)
		return
	}
	w.last = contents
	klog.InfoS("Reloaded", "what", w.what, "files", w.paths)
}

func (w *watchedFiles) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.check()
		}
	}
}

// selfSignedPaths are the pair upstream writes when no certificate is configured.
func selfSignedPaths(certDir string) (certFile, keyFile string) {
	return filepath.Join(certDir, "kubelet.crt"), filepath.Join(certDir, "kubelet.key")
}

// ensureSelfSigned makes a self-signed pair (a throw-away CA and a serving certificate
// for hostname, valid a year) in certDir unless a readable pair is already there, which
// is reused, as upstream does. The node IPs are added to the names it is valid for.
func ensureSelfSigned(certDir, hostname string, ips []net.IP) (certFile, keyFile string, err error) {
	certFile, keyFile = selfSignedPaths(certDir)
	ok, err := certutil.CanReadCertAndKey(certFile, keyFile)
	if err != nil || ok {
		return certFile, keyFile, err
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(hostname, ips, nil)
	if err != nil {
		return "", "", fmt.Errorf("unable to generate self signed cert: %w", err)
	}
	if err := certutil.WriteCert(certFile, certPEM); err != nil {
		return "", "", err
	}
	if err := keyutil.WriteKey(keyFile, keyPEM); err != nil {
		return "", "", err
	}
	klog.V(4).InfoS("Using self-signed cert", "TLSCertFile", certFile, "TLSPrivateKeyFile", keyFile)
	return certFile, keyFile, nil
}

// servingCertManager requests the serving certificate from the certificates API with the
// kubernetes.io/kubelet-serving signer (serverTLSBootstrap), keeps it in certDir as
// kubelet-server-current.pem and renews it at 70–90% of its lifetime, as upstream's
// manager (client-go's) does. Nothing in the cluster approves these requests by default:
// an administrator or an approver controller must, and until then the server has no
// certificate and refuses TLS handshakes.
func servingCertManager(o Options, client kubernetes.Interface, addresses func() []v1.NodeAddress, m *servingMetrics) (certificate.Manager, error) {
	if client == nil {
		return nil, errors.New("serverTLSBootstrap needs an API server client")
	}
	store, err := certificate.NewFileStore("kubelet-server", o.CertDir, o.CertDir, o.TLSCertFile, o.TLSPrivateKeyFile)
	if err != nil {
		return nil, fmt.Errorf("failed to initialize server certificate store: %w", err)
	}
	cfg := &certificate.Config{
		ClientsetFn:      func(*tls.Certificate) (kubernetes.Interface, error) { return client, nil },
		GetTemplate:      servingTemplate(o.NodeName, addresses),
		SignerName:       certificatesv1.KubeletServingSignerName,
		GetUsages:        certificate.DefaultKubeletServingGetUsages,
		CertificateStore: store,
	}
	if m != nil {
		cfg.CertificateRotation, cfg.CertificateRenewFailure = m.rotation, m.renewErrors
	}
	mgr, err := certificate.NewManager(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to initialize server certificate manager: %w", err)
	}
	return mgr, nil
}

// servingTemplate is the CSR for the node's addresses: CN system:node:<name>, O
// system:nodes, the DNS names and IPs of its status addresses. Until the node has an IP
// address there is nothing to request (upstream's AllowDNSOnlyNodeCSR is off by default).
func servingTemplate(nodeName string, addresses func() []v1.NodeAddress) func() *x509.CertificateRequest {
	return func() *x509.CertificateRequest {
		var addrs []v1.NodeAddress
		if addresses != nil {
			addrs = addresses()
		}
		dnsNames, ips := namesAndIPs(addrs)
		if len(ips) == 0 {
			return nil
		}
		return &x509.CertificateRequest{
			Subject:     pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
			DNSNames:    dnsNames,
			IPAddresses: ips,
		}
	}
}

// namesAndIPs sorts a node's addresses into DNS names and IPs, without duplicates; a
// Hostname address that is an IP counts as an IP.
func namesAndIPs(addrs []v1.NodeAddress) (dnsNames []string, ips []net.IP) {
	names, ipSet := map[string]bool{}, map[string]bool{}
	for _, a := range addrs {
		if a.Address == "" {
			continue
		}
		ip := netutils.ParseIPSloppy(a.Address)
		switch a.Type {
		case v1.NodeHostName:
			if ip != nil {
				ipSet[ip.String()] = true
			} else {
				names[a.Address] = true
			}
		case v1.NodeInternalIP, v1.NodeExternalIP:
			if ip != nil {
				ipSet[ip.String()] = true
			}
		case v1.NodeInternalDNS, v1.NodeExternalDNS:
			names[a.Address] = true
		}
	}
	for n := range names {
		dnsNames = append(dnsNames, n)
	}
	sort.Strings(dnsNames)
	ipStrings := make([]string, 0, len(ipSet))
	for s := range ipSet {
		ipStrings = append(ipStrings, s)
	}
	sort.Strings(ipStrings)
	for _, s := range ipStrings {
		ips = append(ips, netutils.ParseIPSloppy(s))
	}
	return dnsNames, ips
}
