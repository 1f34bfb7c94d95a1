package kubeclient

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
)

// useRotatingCert gives cfg a transport that presents whatever certificate
// current returns at each TLS handshake, and returns a function that closes every
// connection the transport opened. Calling it after a rotation makes the next
// request handshake again with the new certificate (HTTP/2 would otherwise keep
// one connection, and the old identity, for as long as it lives). cfg's own TLS
// client settings (CA, server name, insecure) move into the transport.
func useRotatingCert(cfg *rest.Config, current func() *tls.Certificate) (closeAll func(), err error) {
	if cfg.Transport != nil || cfg.Dial != nil {
		return nil, fmt.Errorf("there is already a transport or dialer configured")
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("unable to configure TLS for the API client: %w", err)
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{}
	}
	tlsConfig.Certificates = nil
	tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if cert := current(); cert != nil {
			return cert, nil
		}
		return &tls.Certificate{}, nil // no certificate yet: handshake anonymously
	}
	dialer := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	cfg.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		DialContext:         dialer.DialContext,
	})
	// The transport now carries all TLS settings; client-go refuses a custom
	// transport combined with its own.
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	return dialer.CloseAll, nil
}
