package kubeclient

import (
	"context"
	"crypto"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/klog/v2"
)

// File names in the cert dir, as upstream's kubelet uses them: the store writes
// kubelet-client-<timestamp>.pem (certificate and key in one file) and points the
// kubelet-client-current.pem symlink at the newest.
const (
	clientPairPrefix = "kubelet-client"
	// bootstrapKeyFile keeps the key of a pending bootstrap CSR across restarts,
	// so a restarted node can pick up a CSR it already sent.
	bootstrapKeyFile = "kubelet-client.key.tmp"
)

// pemPath is the symlink to the newest pair, the file the node's kubeconfig names.
func pemPath(certDir string) string {
	return filepath.Join(certDir, clientPairPrefix+"-current.pem")
}

// How long to wait for a CSR to be approved and issued: upstream waits an hour for
// the first certificate and 15 minutes for a renewal.
const (
	bootstrapIssueTimeout = time.Hour
	renewIssueTimeout     = 15 * time.Minute
)

// nodeSubject is the identity the Node authorizer and the kubelet-client signer expect.
func nodeSubject(nodeName string) pkix.Name {
	return pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}}
}

// requestNodeCertificate sends a CSR for the node's client certificate signed with
// key, waits up to issueTimeout for it to be approved and issued, and returns the
// issued certificate chain as PEM. A non-empty name makes the request idempotent:
// a restarted bootstrap that sends the same key finds its earlier CSR.
func requestNodeCertificate(ctx context.Context, client kubernetes.Interface, key crypto.Signer, nodeName, name string, issueTimeout time.Duration) ([]byte, error) {
	subject := nodeSubject(nodeName)
	csrPEM, err := certutil.MakeCSR(key, &subject, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("unable to generate certificate request: %w", err)
	}
	usages := certificate.DefaultKubeletClientGetUsages(key)
	reqName, reqUID, err := csr.RequestCertificateWithContext(ctx, client, csrPEM, name,
		certificatesv1.KubeAPIServerClientKubeletSignerName, nil, usages, key)
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Waiting for client certificate to be issued", "csr", reqName)
	ctx, cancel := context.WithTimeout(ctx, issueTimeout)
	defer cancel()
	return csr.WaitForCertificate(ctx, client, reqName, reqUID)
}

// bootstrapCSRName derives upstream's "node-csr-<digest>" name from everything
// that makes two requests equivalent: public key, subject and usages. Each part is
// base64url-encoded and '|'-terminated ('|' is not in that alphabet) so that no
// two different inputs feed the hash the same bytes.
func bootstrapCSRName(key crypto.Signer, nodeName string) (string, error) {
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return "", err
	}
	subject := nodeSubject(nodeName)
	parts := [][]byte{pub, []byte(subject.CommonName)}
	for _, o := range subject.Organization {
		parts = append(parts, []byte(o))
	}
	for _, u := range certificate.DefaultKubeletClientGetUsages(key) {
		parts = append(parts, []byte(u))
	}
	h := sha512.New512_256()
	for _, p := range parts {
		h.Write([]byte(base64.RawURLEncoding.EncodeToString(p)))
		h.Write([]byte{'|'})
	}
	return "node-csr-" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)), nil
}
