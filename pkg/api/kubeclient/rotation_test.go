package kubeclient

import (
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
)

func TestRotationPointIsSeventyToNinetyPercent(t *testing.T) {
	const lifetime = 1000 * time.Hour
	lo, hi := lifetime, time.Duration(0)
	for range 10000 {
		p := jitteredRotationPoint(lifetime)
		lo, hi = min(lo, p), max(hi, p)
	}
	if lo < 700*time.Hour || hi > 900*time.Hour {
		t.Errorf("rotation points span %v..%v, want within 700h..900h", lo, hi)
	}
	if lo > 710*time.Hour || hi < 890*time.Hour {
		t.Errorf("rotation points span only %v..%v, want the whole 70-90%% range", lo, hi)
	}
}

// lastNodeSerial is the client certificate serial of the last GET of node-a.
func lastNodeSerial(t *testing.T, f *fakeAPI) string {
	t.Helper()
	seen := f.seen("/api/v1/nodes/node-a")
	if len(seen) == 0 {
		t.Fatal("no node request seen")
	}
	return seen[len(seen)-1].clientSerial
}

func currentSerial(t *testing.T, certDir string) string {
	t.Helper()
	// The store swaps the link while a renewal (every ~2 s with these 3 s certificates)
	// lands: a read in that instant finds no file, the next one the new certificate.
	var err error
	for deadline := time.Now().Add(time.Second); ; time.Sleep(20 * time.Millisecond) {
		var certs []*x509.Certificate
		if certs, err = certutil.CertsFromFile(filepath.Join(certDir, "kubelet-client-current.pem")); err == nil {
			return certs[0].SerialNumber.String()
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
}

// waitForCSRs waits until the fake server has received n CSRs.
func waitForCSRs(t *testing.T, f *fakeAPI, n int, within time.Duration) []csrRecord {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if recs := f.csrRecords(); len(recs) >= n {
			return recs
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%d CSRs after %v, want %d", len(f.csrRecords()), within, n)
	return nil
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// TestRotationBootstrapsThenRenews: with rotation on, the first certificate comes
// from the bootstrap credentials in the background, the next one is requested
// with the node's own at 70–90% of the first one's lifetime, and the clients
// switch to it without being rebuilt.
func TestRotationBootstrapsThenRenews(t *testing.T) {
	f := newFakeAPI(t)
	f.lifetime = 3 * time.Second
	o := testOptions(t, f)
	o.RotateCertificates = true
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	c, err := Build(testContext(t, 10*time.Second), o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	defer c.Stop()
	checkNodeKubeconfig(t, o, f) // written before any certificate exists, as upstream
	if err := c.WaitForServer(testContext(t, 10*time.Second)); err != nil {
		t.Fatalf("WaitForServer: %v", err)
	}
	getOwnNode(t, c)
	first := lastNodeSerial(t, f)
	if first != currentSerial(t, o.CertDir) {
		t.Errorf("client used serial %s, the cert dir holds %s", first, currentSerial(t, o.CertDir))
	}
	if ttl, ok := gaugeValue(t, reg, "kubelet_certificate_manager_client_ttl_seconds"); !ok || ttl < 0 || ttl > 3 {
		t.Errorf("ttl gauge = %v (registered %v), want 0..3", ttl, ok)
	}

	recs := waitForCSRs(t, f, 2, 5*time.Second)
	boot, renewal := recs[0], recs[1]
	if boot.creator != "system:bootstrap:abcdef" || renewal.creator != "system:node:node-a" {
		t.Errorf("CSRs sent by %q then %q, want the bootstrap token then the node", boot.creator, renewal.creator)
	}
	if !strings.HasPrefix(renewal.csr.Name, "csr-") || renewal.subject.CommonName != "system:node:node-a" {
		t.Errorf("renewal CSR %q for %q", renewal.csr.Name, renewal.subject.CommonName)
	}
	firstCert, _ := certutil.ParseCertsPEM(f.lookup(boot.csr.Name).Status.Certificate)
	lifetime := firstCert[0].NotAfter.Sub(firstCert[0].NotBefore)
	at := renewal.created.Sub(firstCert[0].NotBefore)
	if at < lifetime*7/10 || at > lifetime*9/10+time.Second {
		t.Errorf("renewed %v into a %v lifetime, want 70-90%%", at, lifetime)
	}

	// The next request handshakes again, with the new certificate, once it is issued and
	// stored (polled: on a loaded machine that takes more than a moment).
	var second string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		getOwnNode(t, c)
		if second = lastNodeSerial(t, f); second != first || time.Now().After(deadline) {
			break
		}
	}
	if second == first || second != currentSerial(t, o.CertDir) {
		t.Errorf("after rotation the client used serial %s (first %s, cert dir %s)", second, first, currentSerial(t, o.CertDir))
	}
	checkCertDir(t, o.CertDir)
	checkNodeKubeconfig(t, o, f)

	c.Stop()
	n := len(f.csrRecords())
	time.Sleep(3 * time.Second)
	if m := len(f.csrRecords()); m != n {
		t.Errorf("%d CSRs sent after Stop", m-n)
	}
}

// TestRotationReplacesKubeconfigCert: a kubeconfig with an inline certificate
// (as kubeadm writes) is used at first, then replaced at once.
func TestRotationReplacesKubeconfigCert(t *testing.T) {
	f := newFakeAPI(t)
	o := testOptions(t, f)
	o.BootstrapKubeconfig = ""
	o.RotateCertificates = true
	// The key data is a whole pair file (certificate, then key), which works in a
	// kubeconfig and must work for the store too.
	certPEM, keyPEM := f.clusterCA.clientPair(t, "system:node:node-a", time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	f.kubeconfigFile(t, o.KubeConfig, f.serverCA.pem, "", certPEM, append(append([]byte{}, certPEM...), keyPEM...))
	c, err := Build(testContext(t, 10*time.Second), o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	defer c.Stop()
	recs := waitForCSRs(t, f, 1, 10*time.Second)
	if recs[0].creator != "system:node:node-a" {
		t.Errorf("CSR sent by %q, want the kubeconfig's node identity", recs[0].creator)
	}
	time.Sleep(200 * time.Millisecond)
	getOwnNode(t, c)
	issued, _ := certutil.ParseCertsPEM(f.lookup(recs[0].csr.Name).Status.Certificate)
	if got := lastNodeSerial(t, f); got != issued[0].SerialNumber.String() || got != currentSerial(t, o.CertDir) {
		t.Errorf("client uses serial %s, want the issued %s", got, issued[0].SerialNumber)
	}
}

func TestRotationBootstrapWrongCA(t *testing.T) {
	f := newFakeAPI(t)
	o := testOptions(t, f)
	o.RotateCertificates = true
	f.kubeconfigFile(t, o.BootstrapKubeconfig, newTestCA(t, "other").pem, f.token, nil, nil)
	c, err := Build(testContext(t, 10*time.Second), o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	defer c.Stop()
	err = c.WaitForServer(testContext(t, 10*time.Second))
	checkOneLineError(t, err, ReasonUntrustedServer, o.BootstrapKubeconfig, f.url(), "x509: certificate signed by unknown authority")
	if _, ok := c.ClientCertExpiry(); ok {
		t.Error("ClientCertExpiry reports a certificate")
	}
}

// An API call made before the first certificate is anonymous, and one made after
// it uses the certificate: the anonymous connection must not be reused.
func TestRotationFirstCertReplacesAnonymousConnection(t *testing.T) {
	f := newFakeAPI(t)
	f.issueDelay = 500 * time.Millisecond
	o := testOptions(t, f)
	o.RotateCertificates = true
	c, err := Build(testContext(t, 10*time.Second), o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if _, err := c.Kube.CoreV1().Nodes().Get(testContext(t, 5*time.Second), "node-a", metav1.GetOptions{}); err == nil {
		t.Fatal("got the node before any certificate was issued")
	}
	if err := c.WaitForServer(testContext(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	getOwnNode(t, c)
}
