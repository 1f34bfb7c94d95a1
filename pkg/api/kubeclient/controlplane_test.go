package kubeclient

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
)

// These tests run against the shared test control plane (hack/controlplane.sh)
// only when asked: NODELET_KUBECLIENT_CP=1 go test -run ControlPlane ./pkg/api/kubeclient/
// They bootstrap real certificates (the controller manager approves and signs
// them) for throw-away node names; nothing else in the cluster is changed.

func controlPlaneBootstrap(t *testing.T) string {
	if os.Getenv("NODELET_KUBECLIENT_CP") != "1" {
		t.Skip("set NODELET_KUBECLIENT_CP=1 to run against the test control plane")
	}
	state := os.Getenv("NODELET_CP_STATE")
	if state == "" {
		state = "/var/lib/nodelet-cp"
	}
	path := filepath.Join(state, "bootstrap-kubeconfig")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no control plane: %v", err)
	}
	return path
}

func cpOptions(t *testing.T, bootstrap string) Options {
	dir := t.TempDir()
	return Options{
		KubeConfig: filepath.Join(dir, "kubelet.conf"), BootstrapKubeconfig: bootstrap,
		CertDir: filepath.Join(dir, "pki"), NodeName: fmt.Sprintf("kubeclient-it-%d", time.Now().UnixNano()%1e6),
		QPS: 50, Burst: 100, EventQPS: 50, EventBurst: 100,
		NodeStatusUpdateFrequency: 10 * time.Second, NodeLeaseDuration: 40 * time.Second,
	}
}

// whoAmI asks the server who the clients authenticate as.
func whoAmI(ctx context.Context, c *Clients) (authenticationv1.UserInfo, error) {
	review, err := c.Kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	return review.Status.UserInfo, nil
}

func checkNodeIdentity(t *testing.T, c *Clients, node string) {
	t.Helper()
	user, err := whoAmI(testContext(t, 10*time.Second), c)
	if err != nil {
		t.Fatalf("self subject review: %s", c.Describe(err))
	}
	if user.Username != "system:node:"+node {
		t.Errorf("authenticated as %q %v, want system:node:%s", user.Username, user.Groups, node)
	}
	t.Logf("server sees %s %v", user.Username, user.Groups)
}

func TestControlPlaneBootstrap(t *testing.T) {
	o := cpOptions(t, controlPlaneBootstrap(t))
	start := time.Now()
	c, err := Build(testContext(t, 2*time.Minute), o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	t.Logf("bootstrapped in %v", time.Since(start).Round(time.Millisecond))
	if err := c.WaitForServer(testContext(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	checkNodeIdentity(t, c, o.NodeName)
	checkCertDir(t, o.CertDir)
	certs, err := certutil.CertsFromFile(filepath.Join(o.CertDir, "kubelet-client-current.pem"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("issued: subject %v issuer %v valid %v..%v", certs[0].Subject, certs[0].Issuer, certs[0].NotBefore, certs[0].NotAfter)
}

func TestControlPlaneWrongCAAndToken(t *testing.T) {
	bootstrap := controlPlaneBootstrap(t)
	cfg, err := clientcmd.LoadFromFile(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, cluster := range cfg.Clusters {
		cluster.CertificateAuthority, cluster.CertificateAuthorityData = "", newTestCA(t, "other").pem
	}
	wrongCA := filepath.Join(dir, "wrong-ca.conf")
	if err := clientcmd.WriteToFile(*cfg, wrongCA); err != nil {
		t.Fatal(err)
	}
	o := cpOptions(t, wrongCA)
	_, err = Build(testContext(t, time.Minute), o)
	t.Logf("wrong CA: %s", Describe(err))
	if Classify(err) != ReasonUntrustedServer || !IsPermanent(err) {
		t.Errorf("wrong CA gave %v", err)
	}

	cfg, _ = clientcmd.LoadFromFile(bootstrap)
	for _, auth := range cfg.AuthInfos {
		auth.Token = "abcdef.0000000000000000"
	}
	badToken := filepath.Join(dir, "bad-token.conf")
	if err := clientcmd.WriteToFile(*cfg, badToken); err != nil {
		t.Fatal(err)
	}
	_, err = Build(testContext(t, time.Minute), cpOptions(t, badToken))
	t.Logf("bad token: %s", Describe(err))
	if Classify(err) != ReasonUnauthorized || !IsPermanent(err) {
		t.Errorf("bad token gave %v", err)
	}
}

// TestControlPlaneRotation needs a control plane started with a short
// NODELET_CP_SIGNING_DURATION (e.g. 10m; the signer backdates by 5m, so a 10m
// certificate renews 5.5–8.5 minutes after issue) and -timeout 20m; with
// long-lived certificates it only checks the background bootstrap.
func TestControlPlaneRotation(t *testing.T) {
	o := cpOptions(t, controlPlaneBootstrap(t))
	o.RotateCertificates = true
	c, err := Build(testContext(t, time.Minute), o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	defer c.Stop()
	if err := c.WaitForServer(testContext(t, 2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	checkNodeIdentity(t, c, o.NodeName)
	first, _ := c.ClientCertExpiry()
	certs, _ := certutil.CertsFromFile(filepath.Join(o.CertDir, "kubelet-client-current.pem"))
	lifetime := certs[0].NotAfter.Sub(certs[0].NotBefore)
	t.Logf("first certificate valid %v..%v (lifetime %v incl. the signer's backdating)", certs[0].NotBefore, certs[0].NotAfter, lifetime)
	if time.Until(first) > 15*time.Minute {
		t.Skipf("certificates live %v: start the control plane with a short NODELET_CP_SIGNING_DURATION to test rotation", time.Until(first).Round(time.Second))
	}
	// Wait past the first certificate's expiry: a request then only succeeds if
	// the transport presents the renewed certificate.
	deadline := first.Add(30 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(5 * time.Second)
	}
	second, _ := c.ClientCertExpiry()
	if !second.After(first) {
		t.Fatalf("certificate not renewed: expiry still %v", second)
	}
	t.Logf("renewed: new expiry %v; %d pairs in the cert dir", second, len(checkCertDir(t, o.CertDir)))
	checkNodeIdentity(t, c, o.NodeName)
}

// TestControlPlaneRenewalWithNodeCredentials exercises a renewal through the real
// CSR API even when certificates are long-lived: a kubeconfig with an inline
// certificate (kubeadm's hand-over) is rotated at once, with the node's own
// credentials, and the controller manager approves it as a self-node renewal.
func TestControlPlaneRenewalWithNodeCredentials(t *testing.T) {
	bootstrap := controlPlaneBootstrap(t)
	first := cpOptions(t, bootstrap)
	if _, err := Build(testContext(t, time.Minute), first); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	pair, err := os.ReadFile(filepath.Join(first.CertDir, "kubelet-client-current.pem"))
	if err != nil {
		t.Fatal(err)
	}
	firstSerial := currentSerial(t, first.CertDir)

	cfg, err := clientcmd.LoadFromFile(first.KubeConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range cfg.AuthInfos {
		auth.ClientCertificate, auth.ClientKey = "", ""
		auth.ClientCertificateData, auth.ClientKeyData = pair, pair
	}
	o := cpOptions(t, "")
	o.NodeName, o.RotateCertificates = first.NodeName, true
	if err := clientcmd.WriteToFile(*cfg, o.KubeConfig); err != nil {
		t.Fatal(err)
	}
	c, err := Build(testContext(t, time.Minute), o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	defer c.Stop()
	deadline := time.Now().Add(time.Minute)
	for currentSerial(t, o.CertDir) == firstSerial {
		if time.Now().After(deadline) {
			t.Fatal("no renewed certificate within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkNodeIdentity(t, c, o.NodeName)
	csrs, err := c.Kube.CertificatesV1().CertificateSigningRequests().List(testContext(t, 10*time.Second), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list CSRs as the node: %s", c.Describe(err))
	}
	for _, csr := range csrs.Items {
		if csr.Spec.Username == "system:node:"+o.NodeName {
			t.Logf("renewal CSR %s by %s, signer %s, usages %v, conditions %v", csr.Name, csr.Spec.Username,
				csr.Spec.SignerName, csr.Spec.Usages, csr.Status.Conditions[0].Reason)
			return
		}
	}
	t.Errorf("no CSR sent by system:node:%s", o.NodeName)
}
