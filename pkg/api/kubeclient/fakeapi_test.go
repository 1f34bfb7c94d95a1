package kubeclient

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/keyutil"
)

// testCA is a certificate authority for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

var serial = struct {
	sync.Mutex
	n int64
}{n: 100}

// sign issues a certificate for pub valid from notBefore to notAfter.
func (ca *testCA) sign(t testing.TB, subject pkix.Name, pub any, notBefore, notAfter time.Time, usage x509.ExtKeyUsage, ips ...net.IP) []byte {
	serial.Lock()
	serial.n++
	n := serial.n
	serial.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(n),
		Subject:      subject,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// clientPair makes a client certificate and key signed by ca, as PEM.
func (ca *testCA) clientPair(t *testing.T, cn string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	subject := pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}
	return ca.sign(t, subject, &key.PublicKey, notBefore, notAfter, x509.ExtKeyUsageClientAuth), keyPEM
}

// csrRecord is one CSR the fake API server received and who sent it.
type csrRecord struct {
	csr     *certificatesv1.CertificateSigningRequest
	creator string
	subject pkix.Name
	created time.Time
}

// fakeAPI is a TLS API server that authenticates like kube-apiserver (bootstrap
// token, client certificates of its cluster CA, anonymous) and serves /readyz,
// the CSR API (create, get, list, watch; every CSR is approved and issued after
// issueDelay) and GET /api/v1/nodes/<name> for that node's own identity.
type fakeAPI struct {
	t          *testing.T
	srv        *httptest.Server
	serverCA   *testCA // signs the serving certificate; the kubeconfigs' CA
	clusterCA  *testCA // verifies client certificates and signs CSRs
	token      string
	lifetime   time.Duration // of issued certificates
	issueDelay time.Duration
	deny       bool // deny CSRs instead of issuing them

	mu       sync.Mutex
	rv       int
	csrs     map[string]*csrRecord
	order    []string
	requests []seenRequest
}

// seenRequest is what the server saw of one request.
type seenRequest struct {
	method, path, user, contentType, accept, userAgent string
	clientSerial                                       string
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := prepareFakeAPI(t)
	f.start(nil)
	return f
}

// prepareFakeAPI makes the server without starting it; start serves it on ln
// (a fresh port when nil).
func prepareFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{
		t: t, serverCA: newTestCA(t, "server-ca"), clusterCA: newTestCA(t, "cluster-ca"),
		token: "abcdef.0123456789abcdef", lifetime: time.Hour, csrs: map[string]*csrRecord{},
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	servingPEM := f.serverCA.sign(t, pkix.Name{CommonName: "kube-apiserver"}, &key.PublicKey,
		time.Now().Add(-time.Hour), time.Now().Add(time.Hour), x509.ExtKeyUsageServerAuth, net.ParseIP("127.0.0.1"))
	keyPEM, _ := keyutil.MarshalPrivateKeyToPEM(key)
	serving, err := tls.X509KeyPair(servingPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.srv.EnableHTTP2 = true
	f.srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientAuth: tls.RequestClientCert}
	return f
}

func (f *fakeAPI) start(ln net.Listener) {
	if ln != nil {
		f.srv.Listener.Close()
		f.srv.Listener = ln
	}
	f.srv.StartTLS()
	f.t.Cleanup(f.srv.Close)
}

func (f *fakeAPI) url() string { return "https://" + f.srv.Listener.Addr().String() }

// authenticate returns the user a request authenticates as, or "" for a
// credential the server rejects.
func (f *fakeAPI) authenticate(r *http.Request) (user, serial string) {
	if auth := r.Header.Get("Authorization"); auth != "" {
		if auth == "Bearer "+f.token {
			return "system:bootstrap:abcdef", ""
		}
		return "", ""
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return "system:anonymous", ""
	}
	leaf := r.TLS.PeerCertificates[0]
	roots := x509.NewCertPool()
	roots.AddCert(f.clusterCA.cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return "", ""
	}
	return leaf.Subject.CommonName, leaf.SerialNumber.String()
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	user, serial := f.authenticate(r)
	f.mu.Lock()
	f.requests = append(f.requests, seenRequest{
		method: r.Method, path: r.URL.Path, user: user, contentType: r.Header.Get("Content-Type"),
		accept: r.Header.Get("Accept"), userAgent: r.UserAgent(), clientSerial: serial,
	})
	f.mu.Unlock()
	const csrPath = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
	switch {
	case user == "":
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
	case r.URL.Path == "/readyz":
		_, _ = io.WriteString(w, "ok")
	case user == "system:anonymous":
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "forbidden: anonymous")
	case r.URL.Path == csrPath && r.Method == http.MethodPost:
		f.createCSR(w, r, user)
	case r.URL.Path == csrPath && r.URL.Query().Get("watch") == "true":
		f.watchCSR(w, r)
	case r.URL.Path == csrPath:
		f.listCSR(w, r)
	case strings.HasPrefix(r.URL.Path, csrPath+"/"):
		f.getCSR(w, strings.TrimPrefix(r.URL.Path, csrPath+"/"))
	case strings.HasPrefix(r.URL.Path, "/api/v1/nodes/"):
		f.getNode(w, user, strings.TrimPrefix(r.URL.Path, "/api/v1/nodes/"))
	default:
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "not found")
	}
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	writeJSON(w, code, &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg,
	})
}

func writeJSON(w http.ResponseWriter, code int, obj any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(obj)
}

func (f *fakeAPI) createCSR(w http.ResponseWriter, r *http.Request, user string) {
	body, _ := io.ReadAll(r.Body)
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return
	}
	req := obj.(*certificatesv1.CertificateSigningRequest)
	block, _ := pem.Decode(req.Spec.Request)
	parsed, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil || parsed.CheckSignature() != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "bad CSR")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.Name == "" {
		req.Name = fmt.Sprintf("%s%d", req.GenerateName, len(f.order))
	}
	if _, exists := f.csrs[req.Name]; exists {
		writeStatus(w, http.StatusConflict, metav1.StatusReasonAlreadyExists, "already exists")
		return
	}
	f.rv++
	req.UID = types.UID(fmt.Sprintf("uid-%d", f.rv))
	req.ResourceVersion = fmt.Sprint(f.rv)
	req.TypeMeta = metav1.TypeMeta{Kind: "CertificateSigningRequest", APIVersion: "certificates.k8s.io/v1"}
	f.csrs[req.Name] = &csrRecord{csr: req, creator: user, subject: parsed.Subject, created: time.Now()}
	f.order = append(f.order, req.Name)
	name := req.Name
	time.AfterFunc(f.issueDelay, func() { f.issue(name, parsed) })
	writeJSON(w, http.StatusCreated, req)
}

// issue approves and signs a CSR, the way the controller manager would.
func (f *fakeAPI) issue(name string, parsed *x509.CertificateRequest) {
	now := time.Now()
	certPEM := f.clusterCA.sign(f.t, parsed.Subject, parsed.PublicKey, now, now.Add(f.lifetime), x509.ExtKeyUsageClientAuth)
	f.mu.Lock()
	defer f.mu.Unlock()
	csr := f.csrs[name].csr.DeepCopy()
	f.rv++
	csr.ResourceVersion = fmt.Sprint(f.rv)
	if f.deny {
		csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{
			Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: "NotMyNode", Message: "denied by test",
		}}
	} else {
		csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "AutoApproved",
		}}
		csr.Status.Certificate = certPEM
	}
	f.csrs[name].csr = csr
}

func (f *fakeAPI) lookup(name string) *certificatesv1.CertificateSigningRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rec, ok := f.csrs[name]; ok {
		return rec.csr
	}
	return nil
}

func (f *fakeAPI) getCSR(w http.ResponseWriter, name string) {
	if csr := f.lookup(name); csr != nil {
		writeJSON(w, http.StatusOK, csr)
		return
	}
	writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "not found")
}

func selectedName(r *http.Request) string {
	return strings.TrimPrefix(r.URL.Query().Get("fieldSelector"), "metadata.name=")
}

func (f *fakeAPI) listCSR(w http.ResponseWriter, r *http.Request) {
	list := &certificatesv1.CertificateSigningRequestList{
		TypeMeta: metav1.TypeMeta{Kind: "CertificateSigningRequestList", APIVersion: "certificates.k8s.io/v1"},
	}
	if csr := f.lookup(selectedName(r)); csr != nil {
		list.Items = append(list.Items, *csr)
	}
	f.mu.Lock()
	list.ResourceVersion = fmt.Sprint(f.rv)
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, list)
}

// watchCSR streams the selected CSR's changes; for a watch-list request the
// initial state ends with the bookmark client-go waits for.
func (f *fakeAPI) watchCSR(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	enc := json.NewEncoder(w)
	name, sent := selectedName(r), ""
	initial := r.URL.Query().Get("sendInitialEvents") == "true"
	for {
		if csr := f.lookup(name); csr != nil && csr.ResourceVersion != sent {
			kind := "MODIFIED"
			if sent == "" {
				kind = "ADDED"
			}
			_ = enc.Encode(map[string]any{"type": kind, "object": csr})
			sent = csr.ResourceVersion
		}
		if initial {
			initial = false
			f.mu.Lock()
			rv := fmt.Sprint(f.rv)
			f.mu.Unlock()
			_ = enc.Encode(map[string]any{"type": "BOOKMARK", "object": &certificatesv1.CertificateSigningRequest{
				TypeMeta: metav1.TypeMeta{Kind: "CertificateSigningRequest", APIVersion: "certificates.k8s.io/v1"},
				ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv,
					Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}},
			}})
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (f *fakeAPI) getNode(w http.ResponseWriter, user, name string) {
	if user != "system:node:"+name {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, user+" cannot get node "+name)
		return
	}
	writeJSON(w, http.StatusOK, &corev1.Node{
		TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: name},
	})
}

// csrRecords returns the CSRs received, in order.
func (f *fakeAPI) csrRecords() []csrRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []csrRecord
	for _, n := range f.order {
		out = append(out, *f.csrs[n])
	}
	return out
}

// seen returns the requests received for path.
func (f *fakeAPI) seen(path string) []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []seenRequest
	for _, r := range f.requests {
		if r.path == path {
			out = append(out, r)
		}
	}
	return out
}

// kubeconfigFile writes a kubeconfig for the fake server with the given CA and
// credentials (a token, or client certificate and key data) and returns its path.
func (f *fakeAPI) kubeconfigFile(t *testing.T, path string, caPEM []byte, token string, certPEM, keyPEM []byte) string {
	t.Helper()
	cfg := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"c": {Server: f.url(), CertificateAuthorityData: caPEM}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"u": {
			Token: token, ClientCertificateData: certPEM, ClientKeyData: keyPEM,
		}},
		Contexts:       map[string]*clientcmdapi.Context{"ctx": {Cluster: "c", AuthInfo: "u"}},
		CurrentContext: "ctx",
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
