package kubeclient

import (
	"context"
	"crypto"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
)

// bootstrapClientCert is upstream's TLS bootstrap without rotation: unless the
// kubeconfig already holds an unexpired client certificate, it uses the bootstrap
// kubeconfig's credentials to have a certificate for system:node:<name> issued,
// stores it in the cert dir and writes the kubeconfig to point at it. It blocks
// until then, retrying an unreachable server with back-off; a server that is not
// trusted, a rejected credential or a denied CSR end it with an *Error.
func bootstrapClientCert(ctx context.Context, o Options) error {
	logger := klog.FromContext(ctx)
	if valid, err := kubeconfigCertValid(logger, o.KubeConfig, time.Now()); err != nil || valid {
		if valid {
			logger.V(2).Info("Kubeconfig exists and is valid, skipping bootstrap", "path", o.KubeConfig)
		}
		return err
	}
	logger.Info("Using bootstrap kubeconfig to generate TLS client cert, key and kubeconfig file",
		"bootstrapKubeconfig", o.BootstrapKubeconfig, "kubeconfig", o.KubeConfig, "certDir", o.CertDir)
	boot, err := loadKubeconfig(o.BootstrapKubeconfig)
	if err != nil {
		return fmt.Errorf("unable to load bootstrap kubeconfig: %w", err)
	}
	store, err := newClientCertStore(logger, o.CertDir, "", "")
	if err != nil {
		return err
	}
	key, keyPEM, err := bootstrapKey(store, o.CertDir)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(csrClientConfig(boot, o))
	if err != nil {
		return fmt.Errorf("unable to create certificate signing request client: %w", err)
	}
	name, err := bootstrapCSRName(key, o.NodeName)
	if err != nil {
		return err
	}
	var certPEM []byte
	err = retryUntil(ctx, serverBackoff, "Waiting to bootstrap the client certificate", func(ctx context.Context) error {
		err := probeServer(ctx, client.Discovery().RESTClient())
		if err == nil {
			certPEM, err = requestNodeCertificate(ctx, client, key, o.NodeName, name, bootstrapIssueTimeout)
		}
		return wrapError(o.BootstrapKubeconfig, boot.Host, err)
	})
	if err != nil {
		return err
	}
	if _, err := store.Update(certPEM, keyPEM); err != nil {
		return fmt.Errorf("storing the client certificate: %w", err)
	}
	if err := os.Remove(filepath.Join(o.CertDir, bootstrapKeyFile)); err != nil && !os.IsNotExist(err) {
		logger.V(2).Info("Failed cleaning up private key file", "err", err)
	}
	logger.Info("Client certificate bootstrapped", "path", store.CurrentPath())
	return writeNodeKubeconfig(o.KubeConfig, boot, store.CurrentPath())
}

// bootstrapKey is the key to request the certificate with: the current pair's key
// if the cert dir has one (so an expired certificate is replaced for the same
// key), else the pending key file, created if needed. The pending key survives a
// restart, so a CSR already sent for it is found again by its digest name.
func bootstrapKey(store certificate.FileStore, certDir string) (crypto.Signer, []byte, error) {
	var keyPEM []byte
	if cert, err := store.Current(); err == nil && cert.PrivateKey != nil {
		keyPEM, _ = keyutil.MarshalPrivateKeyToPEM(cert.PrivateKey)
	}
	if _, err := keyutil.ParsePrivateKeyPEM(keyPEM); len(keyPEM) == 0 || err != nil {
		if keyPEM, _, err = keyutil.LoadOrGenerateKeyFile(filepath.Join(certDir, bootstrapKeyFile)); err != nil {
			return nil, nil, err
		}
	}
	parsed, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid private key for certificate request: %w", err)
	}
	signer, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("private key does not implement crypto.Signer")
	}
	return signer, keyPEM, nil
}

// newClientCertStore opens the cert dir's kubelet-client-*.pem store; certFile and
// keyFile are the kubeconfig's own files, read when the dir has no pair yet.
func newClientCertStore(logger klog.Logger, certDir, certFile, keyFile string) (certificate.FileStore, error) {
	if certDir == "" {
		return nil, fmt.Errorf("no certificate directory (--cert-dir) to store the client certificate in")
	}
	store, err := certificate.NewFileStoreWithLogger(logger.V(2), clientPairPrefix, certDir, certDir, certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("unable to open the client certificate store in %s: %w", certDir, err)
	}
	return store, nil
}

// csrClientConfig is the config for sending CSRs with cfg's credentials: the
// configured content type and user agent, but client-go's default rate limit, as
// upstream.
func csrClientConfig(cfg *rest.Config, o Options) *rest.Config {
	c := rest.CopyConfig(cfg)
	setContentType(c, o.ContentType)
	c.UserAgent = o.UserAgent
	return c
}
