package kubeletserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestTLSParameters(t *testing.T) {
	o := Options{TLSMinVersion: "VersionTLS13", TLSCipherSuites: []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305"}}
	minV, ciphers, _, err := tlsParameters(o)
	if err != nil {
		t.Fatal(err)
	}
	if minV != tls.VersionTLS13 || !slices.Equal(ciphers, []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256}) {
		t.Errorf("got %x %x", minV, ciphers)
	}
	if minV, ciphers, _, _ := tlsParameters(Options{}); minV != tls.VersionTLS12 || ciphers != nil {
		t.Errorf("defaults: %x %v, want TLS 1.2 and Go's ciphers", minV, ciphers)
	}
	if _, _, _, err := tlsParameters(Options{TLSCipherSuites: []string{"TLS_NOPE"}}); err == nil || err.Error() != "Cipher suite TLS_NOPE not supported or doesn't exist" {
		t.Errorf("unknown cipher: %v", err)
	}
	if _, _, _, err := tlsParameters(Options{TLSMinVersion: "VersionTLS99"}); err == nil || err.Error() != `unknown tls version "VersionTLS99"` {
		t.Errorf("unknown version: %v", err)
	}
	dir := t.TempDir()
	if _, err := New(Options{TLSMinVersion: "SSLv3", AuthorizationMode: "AlwaysAllow", Anonymous: true, CertDir: dir}, Deps{Host: &fakeHost{}}); err == nil {
		t.Error("New accepted an unknown TLS version")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused configuration wrote to the cert dir: %v", entries)
	}
}

// handshake connects with the given client settings and reports the negotiated state.
func handshake(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	cfg.InsecureSkipVerify = true
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer conn.Close()
	return conn.ConnectionState(), nil
}

func TestHandshakeFollowsOptions(t *testing.T) {
	o := defaultOptions(t)
	o.TLSMinVersion = "VersionTLS12"
	o.TLSCipherSuites = []string{"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"}
	s := startServer(t, o, Deps{Client: (&reviews{}).client()})
	addr := s.Addr().String()
	if _, err := handshake(addr, &tls.Config{MaxVersion: tls.VersionTLS11}); err == nil {
		t.Error("a TLS 1.1 client was accepted")
	}
	st, err := handshake(addr, &tls.Config{MaxVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil || st.CipherSuite != tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 {
		t.Errorf("TLS 1.2: %v, cipher %s", err, tls.CipherSuiteName(st.CipherSuite))
	}
	// Without an AES-128-GCM suite Go's HTTP/2 refuses to serve: HTTP/1.1 only, still serving.
	if st.NegotiatedProtocol != "http/1.1" {
		t.Errorf("negotiated %q, want http/1.1", st.NegotiatedProtocol)
	}
	if r := do(t, client(), "GET", base(s)+"/healthz", ""); r.code != http.StatusUnauthorized {
		t.Errorf("request over HTTP/1.1: %d", r.code)
	}
	if _, err := handshake(addr, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}}); err == nil {
		t.Error("a cipher outside tlsCipherSuites was accepted")
	}

	o13 := defaultOptions(t)
	o13.TLSMinVersion = "VersionTLS13"
	s13 := startServer(t, o13, Deps{Client: (&reviews{}).client()})
	if _, err := handshake(s13.Addr().String(), &tls.Config{MaxVersion: tls.VersionTLS12}); err == nil {
		t.Error("tlsMinVersion VersionTLS13 accepted a TLS 1.2 client")
	}
	if st, err := handshake(s13.Addr().String(), &tls.Config{NextProtos: []string{"h2", "http/1.1"}}); err != nil || st.Version != tls.VersionTLS13 || st.NegotiatedProtocol != "h2" {
		t.Errorf("TLS 1.3: %v %x %q", err, st.Version, st.NegotiatedProtocol)
	}
}

func TestSelfSignedPairPersistedAndReused(t *testing.T) {
	o := defaultOptions(t)
	o.TLSCertFile, o.TLSPrivateKeyFile = "", ""
	o.Hostname, o.NodeIPs = "worker-1", []net.IP{net.ParseIP("10.0.0.7")}
	s := startServer(t, o, Deps{Client: (&reviews{}).client()})
	certFile, keyFile := filepath.Join(o.CertDir, "kubelet.crt"), filepath.Join(o.CertDir, "kubelet.key")
	first, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(keyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	st, err := handshake(s.Addr().String(), &tls.Config{})
	if err != nil {
		t.Fatal(err)
	}
	leaf := st.PeerCertificates[0]
	if !slices.Equal(leaf.DNSNames, []string{"worker-1"}) || len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("10.0.0.7")) {
		t.Errorf("served certificate names: %v %v", leaf.DNSNames, leaf.IPAddresses)
	}
	if block, _ := pem.Decode(first); !bytes.Equal(block.Bytes, leaf.Raw) {
		t.Error("the served certificate is not the one written to the cert dir")
	}
	// A restart reuses the pair.
	startServer(t, o, Deps{Client: (&reviews{}).client()})
	if again, _ := os.ReadFile(certFile); !bytes.Equal(first, again) {
		t.Error("a second start replaced the self-signed pair")
	}
}

func TestServingCertFilesReloaded(t *testing.T) {
	ca := newTestCA(t, "serving-ca")
	dir := t.TempDir()
	pair := func(cn string) ([]byte, []byte) {
		key := newKey(t)
		certPEM := ca.sign(t, &x509.Certificate{Subject: pkixName(cn)}, &key.PublicKey, x509.ExtKeyUsageServerAuth)
		der, _ := x509.MarshalECPrivateKey(key)
		return certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	}
	c1, k1 := pair("first")
	o := defaultOptions(t)
	o.TLSCertFile, o.TLSPrivateKeyFile = writeFile(t, dir, "tls.crt", c1), writeFile(t, dir, "tls.key", k1)
	s := startServer(t, o, Deps{Client: (&reviews{}).client()})
	served := func() string {
		st, err := handshake(s.Addr().String(), &tls.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return st.PeerCertificates[0].Subject.CommonName
	}
	if cn := served(); cn != "first" {
		t.Fatalf("served %q", cn)
	}
	// A half-written pair (new certificate, old key) is refused and the old pair stays.
	c2, k2 := pair("second")
	writeFile(t, dir, "tls.crt", c2)
	s.checkFiles()
	if cn := served(); cn != "first" {
		t.Fatalf("after a mismatched pair: served %q", cn)
	}
	writeFile(t, dir, "tls.key", k2)
	s.checkFiles()
	if cn := served(); cn != "second" {
		t.Fatalf("after the reload: served %q", cn)
	}
}

func TestServerTLSBootstrap(t *testing.T) {
	ca := newTestCA(t, "kubelet-serving-ca")
	c := fake.NewClientset()
	var n atomic.Int32
	// The fake API does not fill in generated names and UIDs; the real one does.
	c.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		csr := a.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		i := n.Add(1)
		csr.Name, csr.UID = fmt.Sprintf("%s%d", csr.GenerateName, i), types.UID(fmt.Sprint("uid-", i))
		return false, nil, nil
	})
	var addresses atomic.Pointer[[]v1.NodeAddress]
	addresses.Store(&[]v1.NodeAddress{})
	o := defaultOptions(t)
	o.TLSCertFile, o.TLSPrivateKeyFile = "", ""
	o.ServerTLSBootstrap = true
	s := startServer(t, o, Deps{Client: c, NodeAddresses: func() []v1.NodeAddress { return *addresses.Load() }})

	if _, err := handshake(s.Addr().String(), &tls.Config{}); err == nil {
		t.Fatal("handshake succeeded without a serving certificate")
	}
	if _, err := os.Stat(filepath.Join(o.CertDir, "kubelet.crt")); !os.IsNotExist(err) {
		t.Errorf("serverTLSBootstrap wrote a self-signed pair: %v", err)
	}
	// No IP address yet: nothing is requested.
	time.Sleep(1500 * time.Millisecond)
	if list, _ := c.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
		t.Fatalf("%d CSRs sent before the node had an address", len(list.Items))
	}
	addresses.Store(&[]v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.7"}, {Type: v1.NodeHostName, Address: "worker-1"}})
	csr := waitForCSR(t, c)
	if csr.Spec.SignerName != "kubernetes.io/kubelet-serving" ||
		!slices.Equal(csr.Spec.Usages, []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}) {
		t.Errorf("CSR signer %q usages %v", csr.Spec.SignerName, csr.Spec.Usages)
	}
	req := parseCSR(t, csr.Spec.Request)
	if req.Subject.CommonName != "system:node:"+testNode || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) ||
		!slices.Equal(req.DNSNames, []string{"worker-1"}) || len(req.IPAddresses) != 1 || req.IPAddresses[0].String() != "10.0.0.7" {
		t.Errorf("CSR subject %v names %v %v", req.Subject, req.DNSNames, req.IPAddresses)
	}
	// Until someone approves it, the server still has no certificate.
	if _, err := handshake(s.Addr().String(), &tls.Config{}); err == nil {
		t.Fatal("handshake succeeded before the CSR was approved")
	}
	issue(t, c, ca, csr, req)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := handshake(s.Addr().String(), &tls.Config{})
		if err == nil {
			if leaf := st.PeerCertificates[0]; leaf.Subject.CommonName != "system:node:"+testNode {
				t.Fatalf("served %v", leaf.Subject)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no serving certificate after approval: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(o.CertDir, "kubelet-server-current.pem")); err != nil {
		t.Errorf("issued certificate not stored: %v", err)
	}
}

func waitForCSR(t *testing.T, c *fake.Clientset) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		list, err := c.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
		if err == nil && len(list.Items) > 0 {
			return &list.Items[0]
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no CSR was sent")
	return nil
}

func parseCSR(t *testing.T, data []byte) *x509.CertificateRequest {
	t.Helper()
	block, _ := pem.Decode(data)
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// issue approves csr and signs it, as an approver and the signer would.
func issue(t *testing.T, c *fake.Clientset, ca *testCA, csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest) {
	t.Helper()
	certPEM := ca.sign(t, &x509.Certificate{Subject: req.Subject, DNSNames: req.DNSNames, IPAddresses: req.IPAddresses}, req.PublicKey, x509.ExtKeyUsageServerAuth)
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue})
	csr.Status.Certificate = certPEM
	if _, err := c.CertificatesV1().CertificateSigningRequests().UpdateStatus(context.Background(), csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestServingTemplateNames(t *testing.T) {
	tmpl := servingTemplate("n1", func() []v1.NodeAddress {
		return []v1.NodeAddress{
			{Type: v1.NodeHostName, Address: "host-b"}, {Type: v1.NodeInternalDNS, Address: "host-a.internal"},
			{Type: v1.NodeInternalIP, Address: "10.0.0.2"}, {Type: v1.NodeExternalIP, Address: "10.0.0.1"},
			{Type: v1.NodeInternalIP, Address: "10.0.0.2"}, {Type: v1.NodeHostName, Address: "10.0.0.3"},
			{Type: v1.NodeExternalIP, Address: "not-an-ip"},
		}
	})()
	var ips []string
	for _, ip := range tmpl.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slices.Equal(tmpl.DNSNames, []string{"host-a.internal", "host-b"}) || strings.Join(ips, ",") != "10.0.0.1,10.0.0.2,10.0.0.3" {
		t.Errorf("names %v ips %v", tmpl.DNSNames, ips)
	}
	dnsOnly := servingTemplate("n1", func() []v1.NodeAddress { return []v1.NodeAddress{{Type: v1.NodeHostName, Address: "h"}} })
	if dnsOnly() != nil {
		t.Error("a node with only a DNS name must wait for an IP (AllowDNSOnlyNodeCSR is off)")
	}
}
