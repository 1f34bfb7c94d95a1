package kubeclient

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
)

// certManager keeps the node's client certificate fresh: it renews it at a random
// point between 70% and 90% of its lifetime (as upstream, so nodes that joined
// together do not renew together), through the CSR API, and stores each new pair
// in the cert dir. Unlike upstream it never exits the process: a certificate that
// expires while the server is unreachable is renewed, with the bootstrap
// credentials if any, as soon as the server answers again.
type certManager struct {
	store    certificate.FileStore
	nodeName string
	// csrClient returns the client to send CSRs with: the node's own credentials
	// while it has a valid certificate, else the bootstrap credentials. It also
	// returns the kubeconfig and server those credentials come from, for errors.
	csrClient func(haveCert bool) (client kubernetes.Interface, kubeconfig, server string, err error)
	// onRotate runs after a new certificate is in use (closes old connections).
	onRotate func()
	// rotationPoint picks when in a lifetime to renew; replaceable in tests.
	rotationPoint func(lifetime time.Duration) time.Duration
	retry         backoff
	metrics       *certMetrics

	mu      sync.RWMutex
	cert    *tls.Certificate
	lastErr error
	stop    context.CancelFunc
	done    chan struct{}
}

// renewBackoff is upstream's rotation back-off: 2s doubling for five tries, then
// every 32 seconds.
var renewBackoff = backoff{initial: 2 * time.Second, max: 32 * time.Second, factor: 2, jitter: 0.1}

// jitteredRotationPoint renews uniformly within 70–90% of the lifetime.
func jitteredRotationPoint(lifetime time.Duration) time.Duration {
	return time.Duration(float64(lifetime) * (0.7 + 0.2*mathrand.Float64()))
}

// loadInitialCert picks the certificate to start with: the store's current pair
// (kubelet-client-current.pem, else the kubeconfig's files) while unexpired; else
// the kubeconfig's inline certificate, which is stored and then rotated at once
// (kubeadm hands a kubelet a high-powered certificate this way and expects it to
// be replaced). Returns nil when there is nothing yet: bootstrapping will follow.
func (m *certManager) loadInitialCert(logger klog.Logger, inlineCert, inlineKey []byte) (cert *tls.Certificate, rotateNow bool, err error) {
	current, err := m.store.Current()
	var noCert *certificate.NoCertKeyError
	switch {
	case err == nil && current.Leaf != nil && time.Now().Before(current.Leaf.NotAfter):
		return current, false, nil
	case err != nil && !errors.As(err, &noCert):
		return nil, false, err
	}
	if len(inlineCert) == 0 || len(inlineKey) == 0 {
		return nil, true, nil
	}
	// The store keeps the first PEM block of the key data; key data that also
	// holds the certificate (a pair file pasted inline) needs the key picked out.
	key, err := keyutil.ParsePrivateKeyPEM(inlineKey)
	if err != nil {
		return nil, false, fmt.Errorf("the kubeconfig's client key: %w", err)
	}
	if inlineKey, err = keyutil.MarshalPrivateKeyToPEM(key); err != nil {
		return nil, false, err
	}
	stored, err := m.store.Update(inlineCert, inlineKey)
	if err != nil {
		return nil, false, fmt.Errorf("storing the kubeconfig's client certificate: %w", err)
	}
	logger.Info("Using the kubeconfig's client certificate until it is rotated", "notAfter", stored.Leaf.NotAfter)
	return stored, true, nil
}

// Current is the certificate to present, or nil when there is none or it expired.
func (m *certManager) Current() *tls.Certificate {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.cert == nil || m.cert.Leaf == nil || time.Now().After(m.cert.Leaf.NotAfter) {
		return nil
	}
	return m.cert
}

// notAfter is the current certificate's expiry, zero without one.
func (m *certManager) notAfter() time.Time {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.cert == nil || m.cert.Leaf == nil {
		return time.Time{}
	}
	return m.cert.Leaf.NotAfter
}

// LastError is the latest renewal failure, nil once a renewal succeeded.
func (m *certManager) LastError() error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.lastErr
}

func (m *certManager) setResult(cert *tls.Certificate, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cert != nil {
		m.cert = cert
	}
	m.lastErr = err
}

// start runs the renewal loop until stopIt is called.
func (m *certManager) start(ctx context.Context, rotateNow bool) {
	ctx, m.stop = context.WithCancel(ctx)
	m.done = make(chan struct{})
	go func() {
		defer close(m.done)
		m.run(ctx, rotateNow)
	}()
}

func (m *certManager) stopIt() {
	if m.stop != nil {
		m.stop()
		<-m.done
	}
}

func (m *certManager) run(ctx context.Context, rotateNow bool) {
	logger := klog.FromContext(ctx)
	for ctx.Err() == nil {
		if !rotateNow {
			wait := m.untilRotation()
			if wait > 0 {
				logger.V(2).Info("Waiting for next client certificate rotation", "sleep", wait.Round(time.Second), "notAfter", m.notAfter())
			}
			if !sleep(ctx, wait) {
				return
			}
		}
		rotateNow = false
		m.renew(ctx)
	}
}

// untilRotation is how long to wait before renewing: no wait without a valid
// certificate or with one that is not for this node.
func (m *certManager) untilRotation() time.Duration {
	cert := m.Current()
	if cert == nil || !m.fitsNode(cert.Leaf) {
		return 0
	}
	lifetime := cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore)
	deadline := cert.Leaf.NotBefore.Add(m.rotationPoint(lifetime))
	return time.Until(deadline)
}

// fitsNode reports whether a certificate carries the node's identity; one that
// does not (a renamed node, kubeadm's admin-like certificate) is replaced at once.
func (m *certManager) fitsNode(leaf *x509.Certificate) bool {
	want := nodeSubject(m.nodeName)
	if leaf.Subject.CommonName != want.CommonName {
		return false
	}
	for _, o := range want.Organization {
		if !slices.Contains(leaf.Subject.Organization, o) {
			return false
		}
	}
	return true
}

// renew gets a new certificate, retrying with back-off until it succeeds or ctx
// ends. Every failure is one log line and counts in the renew-errors metric.
func (m *certManager) renew(ctx context.Context) {
	logger := klog.FromContext(ctx)
	delay := m.retry.initial
	for ctx.Err() == nil {
		err := m.renewOnce(ctx)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			return
		}
		m.setResult(nil, err)
		m.metrics.renewFailed()
		wait := m.retry.jittered(delay)
		logger.Error(nil, "Client certificate rotation failed", "err", Describe(err), "retryIn", wait.Round(time.Millisecond))
		if !sleep(ctx, wait) {
			return
		}
		delay = m.retry.next(delay)
	}
}

// renewOnce sends one CSR with a fresh key and, once it is issued, stores the
// pair and switches to it.
func (m *certManager) renewOnce(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	had := m.Current() != nil
	client, kubeconfig, server, err := m.csrClient(had)
	if err != nil {
		return err
	}
	key, keyPEM, err := newClientKey()
	if err != nil {
		return err
	}
	logger.Info("Requesting a new client certificate", "kubeconfig", kubeconfig, "node", m.nodeName)
	certPEM, err := requestNodeCertificate(ctx, client, key, m.nodeName, "", renewIssueTimeout)
	if err != nil {
		return wrapError(kubeconfig, server, err)
	}
	cert, err := m.store.Update(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("storing the new client certificate: %w", err)
	}
	m.setResult(cert, nil)
	msg := "Client certificate issued"
	if had {
		msg = "Client certificate rotated"
	}
	logger.Info(msg, "notAfter", cert.Leaf.NotAfter, "path", m.store.CurrentPath())
	if m.onRotate != nil {
		m.onRotate()
	}
	return nil
}

// newClientKey makes the key for a renewal: ECDSA P-256, as upstream, which
// implies the usages digital signature and client auth.
func newClientKey() (crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating a private key: %w", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return key, keyPEM, nil
}

// sleep waits d or until ctx ends; it reports whether to go on.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
