package kubeclient

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// testOptions bootstraps node-a against f with its token, into a fresh dir.
func testOptions(t *testing.T, f *fakeAPI) Options {
	dir := t.TempDir()
	return Options{
		KubeConfig:                filepath.Join(dir, "kubelet.conf"),
		BootstrapKubeconfig:       f.kubeconfigFile(t, filepath.Join(dir, "bootstrap-kubelet.conf"), f.serverCA.pem, f.token, nil, nil),
		CertDir:                   filepath.Join(dir, "pki"),
		NodeName:                  "node-a",
		QPS:                       50,
		Burst:                     100,
		EventQPS:                  50,
		EventBurst:                100,
		NodeStatusUpdateFrequency: 10 * time.Second,
		NodeLeaseDuration:         40 * time.Second,
	}
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// logLines captures one string per log call.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

func (l *logLines) matching(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// getOwnNode proves the clients authenticate as system:node:node-a.
func getOwnNode(t *testing.T, c *Clients) {
	t.Helper()
	if _, err := c.Kube.CoreV1().Nodes().Get(testContext(t, 10*time.Second), "node-a", metav1.GetOptions{}); err != nil {
		t.Fatalf("get own node: %s", c.Describe(err))
	}
}

var pairFileName = regexp.MustCompile(`^kubelet-client-\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}\.pem$`)

// checkCertDir checks upstream's layout: timestamped pairs, the current symlink
// pointing at one of them, no pending key left behind. It returns the pair files.
func checkCertDir(t *testing.T, certDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(certDir)
	if err != nil {
		t.Fatal(err)
	}
	var pairs []string
	for _, e := range entries {
		switch name := e.Name(); {
		case pairFileName.MatchString(name):
			pairs = append(pairs, name)
		case name == "kubelet-client-current.pem":
		default:
			t.Errorf("unexpected file %s in cert dir", name)
		}
	}
	target, err := os.Readlink(filepath.Join(certDir, "kubelet-client-current.pem"))
	if err != nil {
		t.Fatalf("kubelet-client-current.pem is not a symlink: %v", err)
	}
	if !slices.Contains(pairs, filepath.Base(target)) {
		t.Errorf("kubelet-client-current.pem -> %s, want one of %v", target, pairs)
	}
	return pairs
}

// checkNodeKubeconfig checks the kubeconfig written after bootstrap.
func checkNodeKubeconfig(t *testing.T, o Options, f *fakeAPI) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(o.KubeConfig)
	if err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(o.CertDir, "kubelet-client-current.pem")
	ctx := cfg.Contexts[cfg.CurrentContext]
	if cfg.CurrentContext != "default-context" || ctx == nil || ctx.Cluster != "default-cluster" || ctx.AuthInfo != "default-auth" {
		t.Fatalf("kubeconfig contexts = %+v (current %q)", cfg.Contexts, cfg.CurrentContext)
	}
	cluster, auth := cfg.Clusters["default-cluster"], cfg.AuthInfos["default-auth"]
	if cluster.Server != f.url() || string(cluster.CertificateAuthorityData) != string(f.serverCA.pem) {
		t.Errorf("cluster = server %q, CA %d bytes; want %q and the bootstrap CA", cluster.Server, len(cluster.CertificateAuthorityData), f.url())
	}
	if auth.ClientCertificate != current || auth.ClientKey != current || auth.Token != "" {
		t.Errorf("auth = cert %q key %q token %q; want both %q and no token", auth.ClientCertificate, auth.ClientKey, auth.Token, current)
	}
}

func TestBootstrapWritesCertAndKubeconfig(t *testing.T) {
	f := newFakeAPI(t)
	f.issueDelay = 300 * time.Millisecond // the client has to wait for approval
	o := testOptions(t, f)
	c, err := Build(testContext(t, 30*time.Second), o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	defer c.Stop()

	if pairs := checkCertDir(t, o.CertDir); len(pairs) != 1 {
		t.Errorf("pairs = %v, want one", pairs)
	}
	checkNodeKubeconfig(t, o, f)

	csrs := f.csrRecords()
	if len(csrs) != 1 {
		t.Fatalf("CSRs = %d, want 1", len(csrs))
	}
	got := csrs[0]
	wantUsages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	switch {
	case got.creator != "system:bootstrap:abcdef":
		t.Errorf("CSR sent by %q, want the bootstrap token's user", got.creator)
	case !strings.HasPrefix(got.csr.Name, "node-csr-"):
		t.Errorf("CSR name %q, want node-csr-<digest>", got.csr.Name)
	case got.subject.CommonName != "system:node:node-a" || !slices.Equal(got.subject.Organization, []string{"system:nodes"}):
		t.Errorf("CSR subject %v", got.subject)
	case got.csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName:
		t.Errorf("signer %q", got.csr.Spec.SignerName)
	case !slices.Equal(got.csr.Spec.Usages, wantUsages):
		t.Errorf("usages %v, want %v", got.csr.Spec.Usages, wantUsages)
	case got.csr.Spec.ExpirationSeconds != nil:
		t.Errorf("expirationSeconds %d, want unset", *got.csr.Spec.ExpirationSeconds)
	}

	getOwnNode(t, c)
	if err := c.WaitForServer(testContext(t, 10*time.Second)); err != nil {
		t.Errorf("WaitForServer: %v", err)
	}
	if exp, ok := c.ClientCertExpiry(); !ok || time.Until(exp) < 50*time.Minute {
		t.Errorf("ClientCertExpiry = %v, %v; want about an hour ahead", exp, ok)
	}

	// A second start finds the kubeconfig valid and sends no CSR.
	c2, err := Build(testContext(t, 10*time.Second), o)
	if err != nil {
		t.Fatalf("second Build: %v", err)
	}
	getOwnNode(t, c2)
	if n := len(f.csrRecords()); n != 1 {
		t.Errorf("second start sent a CSR (%d in all)", n)
	}
}

// writeCertKubeconfig writes o.KubeConfig with a node-a certificate of the
// cluster CA valid from notBefore to notAfter.
func writeCertKubeconfig(t *testing.T, f *fakeAPI, o Options, notBefore, notAfter time.Time) {
	certPEM, keyPEM := f.clusterCA.clientPair(t, "system:node:node-a", notBefore, notAfter)
	f.kubeconfigFile(t, o.KubeConfig, f.serverCA.pem, "", certPEM, keyPEM)
}

func TestValidKubeconfigSkipsBootstrap(t *testing.T) {
	f := newFakeAPI(t)
	o := testOptions(t, f)
	writeCertKubeconfig(t, f, o, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	c, err := Build(testContext(t, 10*time.Second), o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	getOwnNode(t, c)
	if n := len(f.csrRecords()); n != 0 {
		t.Errorf("sent %d CSRs with a valid kubeconfig", n)
	}
	if _, err := os.Stat(o.CertDir); !os.IsNotExist(err) {
		t.Errorf("cert dir created without bootstrapping: %v", err)
	}
}

func TestExpiredKubeconfigCertRebootstraps(t *testing.T) {
	f := newFakeAPI(t)
	o := testOptions(t, f)
	writeCertKubeconfig(t, f, o, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	c, err := Build(testContext(t, 30*time.Second), o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if n := len(f.csrRecords()); n != 1 {
		t.Fatalf("CSRs = %d, want 1", n)
	}
	checkCertDir(t, o.CertDir)
	checkNodeKubeconfig(t, o, f)
	getOwnNode(t, c)
}

// checkOneLineError checks that err is this package's *Error with reason, and
// that its message is one line naming the kubeconfig, the server and want.
func checkOneLineError(t *testing.T, err error, reason Reason, kubeconfig, server, want string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want *Error", err, err)
	}
	msg := Describe(err)
	t.Logf("message: %s", msg)
	if e.Reason != reason || !IsPermanent(err) {
		t.Errorf("reason %s permanent %v, want %s and permanent", e.Reason, IsPermanent(err), reason)
	}
	for _, part := range []string{kubeconfig, server, want} {
		if !strings.Contains(msg, part) {
			t.Errorf("message lacks %q", part)
		}
	}
	if strings.Contains(msg, "\n") || strings.Contains(err.Error(), "\n") {
		t.Errorf("message spans lines")
	}
}

func TestBootstrapWrongCA(t *testing.T) {
	f := newFakeAPI(t)
	o := testOptions(t, f)
	other := newTestCA(t, "some-other-ca")
	f.kubeconfigFile(t, o.BootstrapKubeconfig, other.pem, f.token, nil, nil)
	start := time.Now()
	_, err := Build(testContext(t, 30*time.Second), o)
	checkOneLineError(t, err, ReasonUntrustedServer, o.BootstrapKubeconfig, f.url(), "x509: certificate signed by unknown authority")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("wrong CA took %v to report, want at once", d)
	}
}

func TestBootstrapRejectedToken(t *testing.T) {
	f := newFakeAPI(t)
	o := testOptions(t, f)
	f.kubeconfigFile(t, o.BootstrapKubeconfig, f.serverCA.pem, "abcdef.wrongwrongwrong0", nil, nil)
	_, err := Build(testContext(t, 30*time.Second), o)
	checkOneLineError(t, err, ReasonUnauthorized, o.BootstrapKubeconfig, f.url(), "401 Unauthorized")
	if n := len(f.csrRecords()); n != 0 {
		t.Errorf("sent %d CSRs", n)
	}
}

func TestWaitForServerWrongCAAndRejectedCert(t *testing.T) {
	f := newFakeAPI(t)
	o := testOptions(t, f)
	o.BootstrapKubeconfig = ""

	certPEM, keyPEM := f.clusterCA.clientPair(t, "system:node:node-a", time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	f.kubeconfigFile(t, o.KubeConfig, newTestCA(t, "other").pem, "", certPEM, keyPEM)
	c, err := Build(testContext(t, 10*time.Second), o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	err = c.WaitForServer(testContext(t, 10*time.Second))
	checkOneLineError(t, err, ReasonUntrustedServer, o.KubeConfig, f.url(), "x509: certificate signed by unknown authority")

	// A certificate from a CA the server does not know is a 401, as kube-apiserver answers.
	foreignCert, foreignKey := newTestCA(t, "foreign").clientPair(t, "system:node:node-a", time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	f.kubeconfigFile(t, o.KubeConfig, f.serverCA.pem, "", foreignCert, foreignKey)
	if c, err = Build(testContext(t, 10*time.Second), o); err != nil {
		t.Fatalf("Build: %v", err)
	}
	err = c.WaitForServer(testContext(t, 10*time.Second))
	checkOneLineError(t, err, ReasonUnauthorized, o.KubeConfig, f.url(), "401 Unauthorized")
	// An API call's error gets the same description from Clients.Describe.
	_, err = c.Kube.CoreV1().Nodes().Get(testContext(t, 10*time.Second), "node-a", metav1.GetOptions{})
	if msg := c.Describe(err); !strings.Contains(msg, o.KubeConfig) || !strings.Contains(msg, "401 Unauthorized") {
		t.Errorf("Describe(API error) = %q", msg)
	}
}

// TestUnreachableServerIsRetried starts the server only after the first tries
// failed: bootstrap keeps retrying with one log line per back-off step.
func TestUnreachableServerIsRetried(t *testing.T) {
	f := prepareFakeAPI(t)
	addr := f.srv.Listener.Addr().String()
	f.srv.Listener.Close() // connection refused until the server starts
	o := testOptions(t, f)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("listen again on %s: %v", addr, err)
			return
		}
		f.start(ln)
	}()
	var logs logLines
	ctx := klog.NewContext(testContext(t, 30*time.Second), logs.logger())
	c, err := Build(ctx, o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	getOwnNode(t, c)
	retries := logs.matching("Waiting to bootstrap the client certificate")
	t.Logf("retry lines: %q", retries)
	if len(retries) < 1 || len(retries) > 3 {
		t.Errorf("logged %d retry lines in 1.5s of outage, want 1-3 (1s, 2s back-off): %q", len(retries), retries)
	}
	for _, line := range retries {
		if !strings.Contains(line, "API server unreachable") || !strings.Contains(line, o.BootstrapKubeconfig) || !strings.Contains(line, "retryIn") {
			t.Errorf("retry line lacks reason, kubeconfig or wait: %s", line)
		}
	}
}

func TestWaitForServerGivesUpWithContext(t *testing.T) {
	f := prepareFakeAPI(t) // never started
	f.srv.Listener.Close()
	o := testOptions(t, f)
	o.BootstrapKubeconfig = ""
	writeCertKubeconfig(t, f, o, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	c, err := Build(testContext(t, 10*time.Second), o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	var logs logLines
	ctx := klog.NewContext(testContext(t, 2500*time.Millisecond), logs.logger())
	err = c.WaitForServer(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || IsPermanent(err) {
		t.Errorf("WaitForServer = %v, want the deadline, not a permanent error", err)
	}
	if !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("error lacks the last failure: %v", err)
	}
	// Tries at 0s and 1s, each followed by one line; the next would be at 3s.
	if n := len(logs.matching("Waiting for the API server")); n < 1 || n > 2 {
		t.Errorf("logged %d lines in 2.5s, want 2 (after 1s and 2s)", n)
	}
}

func TestClientSettings(t *testing.T) {
	f := newFakeAPI(t)
	o := testOptions(t, f)
	o.BootstrapKubeconfig = ""
	writeCertKubeconfig(t, f, o, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	o.QPS, o.Burst = 7, 13
	o.EventQPS, o.EventBurst = 0, 21
	o.NodeStatusUpdateFrequency, o.NodeLeaseDuration = 10*time.Second, 4*time.Second
	c, err := Build(testContext(t, 10*time.Second), o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	const accept = "application/vnd.kubernetes.protobuf,application/json"
	k, e, h := c.Config, c.EventConfig, c.HeartbeatConfig
	if k.QPS != 7 || k.Burst != 13 || k.ContentType != contentTypeProtobuf || k.AcceptContentTypes != accept || k.Timeout != 0 {
		t.Errorf("kube config: qps %v burst %d content %q accept %q timeout %v", k.QPS, k.Burst, k.ContentType, k.AcceptContentTypes, k.Timeout)
	}
	if e.QPS != -1 || e.Burst != 21 || e.ContentType != contentTypeProtobuf {
		t.Errorf("event config: qps %v burst %d content %q; want unlimited (eventRecordQPS 0), 21", e.QPS, e.Burst, e.ContentType)
	}
	if h.QPS != -1 || h.Timeout != 4*time.Second || h.ContentType != contentTypeProtobuf {
		t.Errorf("heartbeat config: qps %v timeout %v; want unlimited, the lease duration 4s", h.QPS, h.Timeout)
	}
	if rl := c.Kube.CoreV1().RESTClient().GetRateLimiter(); rl == nil || rl.QPS() != 7 {
		t.Errorf("kube client rate limiter %v", rl)
	}
	if rl := c.Heartbeat.CoordinationV1().RESTClient().GetRateLimiter(); rl != nil {
		t.Errorf("heartbeat client is rate-limited at %v QPS", rl.QPS())
	}
	if rl := c.Events.CoreV1().RESTClient().GetRateLimiter(); rl != nil {
		t.Errorf("event client is rate-limited at %v QPS", rl.QPS())
	}

	getOwnNode(t, c)
	seen := f.seen("/api/v1/nodes/node-a")
	if len(seen) != 1 || seen[0].accept != accept || !strings.HasPrefix(seen[0].userAgent, "kubelet/v1.37.2 (") {
		t.Errorf("server saw %+v", seen)
	}

	// A heartbeat timeout shorter than the lease comes from nodeStatusUpdateFrequency.
	o.NodeStatusUpdateFrequency, o.ContentType, o.UserAgent = 3*time.Second, "application/json", "custom/1"
	if c, err = Build(testContext(t, 10*time.Second), o); err != nil {
		t.Fatal(err)
	}
	if c.HeartbeatConfig.Timeout != 3*time.Second || c.Config.AcceptContentTypes != "" || c.Config.ContentType != "application/json" || c.Config.UserAgent != "custom/1" {
		t.Errorf("heartbeat timeout %v, accept %q content %q ua %q", c.HeartbeatConfig.Timeout, c.Config.AcceptContentTypes, c.Config.ContentType, c.Config.UserAgent)
	}
}

func TestCSRsAreSentAsProtobuf(t *testing.T) {
	f := newFakeAPI(t)
	if _, err := Build(testContext(t, 30*time.Second), testOptions(t, f)); err != nil {
		t.Fatal(err)
	}
	posts := 0
	for _, r := range f.seen("/apis/certificates.k8s.io/v1/certificatesigningrequests") {
		if r.method == "POST" {
			posts++
			if r.contentType != contentTypeProtobuf {
				t.Errorf("CSR sent as %q, want protobuf", r.contentType)
			}
		}
	}
	if posts != 1 {
		t.Errorf("%d CSR POSTs, want 1", posts)
	}
}
