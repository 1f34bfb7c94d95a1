package kubeletserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	kc "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/config"
)

const testNode = "node-a"

// fakeHost is a Host whose calls are counted.
type fakeHost struct {
	mu          sync.Mutex
	pods        []*v1.Pod
	running     []*v1.Pod
	syncLoopErr error
	podsCalls   int
}

func (h *fakeHost) PodsWithStatus() []*v1.Pod {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.podsCalls++
	return h.pods
}

func (h *fakeHost) RunningPods(context.Context) ([]*v1.Pod, error) { return h.running, nil }
func (h *fakeHost) SyncLoopHealthy() error                         { return h.syncLoopErr }

func (h *fakeHost) calls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.podsCalls
}

// testCA signs client and serving certificates for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// sign issues a certificate for tmpl's subject and names, with the given usages.
func (ca *testCA) sign(t *testing.T, tmpl *x509.Certificate, pub any, usages ...x509.ExtKeyUsage) []byte {
	t.Helper()
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	if tmpl.NotBefore.IsZero() {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = usages
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// clientCert is a client certificate for cn/orgs.
func (ca *testCA) clientCert(t *testing.T, cn string, orgs ...string) tls.Certificate {
	t.Helper()
	key := newKey(t)
	certPEM := ca.sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: cn, Organization: orgs}}, &key.PublicKey, x509.ExtKeyUsageClientAuth)
	keyDER, _ := x509.MarshalECPrivateKey(key)
	pair, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// defaultOptions are the options a defaulted configuration gives, on a free local port,
// serving one self-signed pair made once for all tests (RSA keys are slow to make).
func defaultOptions(t *testing.T) Options {
	t.Helper()
	cfg := &kc.KubeletConfiguration{}
	config.SetDefaults(cfg)
	o := OptionsFromConfig(cfg, testNode, "node-a.example", nil, t.TempDir())
	o.Address, o.Port = "127.0.0.1", 0
	sharedPair.Do(func() {
		dir, err := os.MkdirTemp("", "kubeletserver-test")
		if err == nil {
			sharedCert, sharedKey, err = ensureSelfSigned(dir, "node-a.example", nil)
		}
		if err != nil {
			panic(err)
		}
	})
	o.TLSCertFile, o.TLSPrivateKeyFile = sharedCert, sharedKey
	return o
}

var (
	sharedPair            sync.Once
	sharedCert, sharedKey string
)

// reviews is a fake API server answering TokenReviews and SubjectAccessReviews.
type reviews struct {
	mu sync.Mutex
	// tokens maps a valid token to its user.
	tokens map[string]authenticationv1.UserInfo
	// allow decides a SubjectAccessReview.
	allow        func(spec authorizationv1.SubjectAccessReviewSpec) bool
	tokenReviews int
	sars         []authorizationv1.SubjectAccessReviewSpec
}

func (rv *reviews) client() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		rv.mu.Lock()
		defer rv.mu.Unlock()
		rv.tokenReviews++
		u, ok := rv.tokens[tr.Spec.Token]
		out := tr.DeepCopy()
		out.Status = authenticationv1.TokenReviewStatus{Authenticated: ok, User: u}
		return true, out, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		rv.mu.Lock()
		defer rv.mu.Unlock()
		rv.sars = append(rv.sars, sar.Spec)
		out := sar.DeepCopy()
		out.Status.Allowed = rv.allow != nil && rv.allow(sar.Spec)
		return true, out, nil
	})
	return c
}

func (rv *reviews) counts() (tokenReviews, sars int) {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return rv.tokenReviews, len(rv.sars)
}

func (rv *reviews) lastSAR() authorizationv1.SubjectAccessReviewSpec {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return rv.sars[len(rv.sars)-1]
}

// startServer builds and starts a server, stopped at the end of the test.
func startServer(t *testing.T, o Options, d Deps) *Server {
	t.Helper()
	if d.Host == nil {
		d.Host = &fakeHost{}
	}
	s, err := New(o, d)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// client is an HTTPS client that does not verify the server (as the API server does
// not). Given a certificate, it presents it whatever CAs the server names (as curl and
// OpenSSL clients do; Go's default would send none the server did not ask for).
func client(certs ...tls.Certificate) *http.Client {
	cfg := &tls.Config{InsecureSkipVerify: true}
	if len(certs) > 0 {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
}

type response struct {
	code int
	body string
	hdr  http.Header
}

// do sends one request; token, when set, goes in the Authorization header.
func do(t *testing.T, c *http.Client, method, url, token string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, body: string(body), hdr: resp.Header}
}

func base(s *Server) string { return "https://" + s.Addr().String() }

// authnForTest and authzForTest are the server's authenticator and SAR authorizer.
func (s *Server) authnForTest() *authenticator { return s.authn }
func (s *Server) authzForTest() *sarAuthorizer { return s.authz.(*sarAuthorizer) }

// checkFiles looks at the watched files now rather than at the next interval.
func (s *Server) checkFiles() {
	for _, w := range s.watchers {
		w.check()
	}
}

func pkixName(cn string) pkix.Name { return pkix.Name{CommonName: cn} }
