//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// A kubeadm-shaped control plane: what `kubeadm init` (v1.37) leaves on a control-plane
// node for its kubelet, i.e. a PKI, the static pod manifests of etcd and kube-apiserver
// as kubeadm generates them (cmd/kubeadm/app/phases/etcd/local.go and
// phases/controlplane/manifests.go) and an admin kubeconfig, written under a directory of
// the test's instead of /etc/kubernetes and /var/lib/etcd. The pods run
// registry.k8s.io/etcd and registry.k8s.io/kube-apiserver images built locally from
// upstream's binaries (importControlPlaneImages).
//
// Where it departs from `kubeadm init` with default settings, it does what a
// ClusterConfiguration could ask for:
//   - every port is a free loopback port of the helper's choosing (never 6443, 2379, 2380
//     or 2381: the project's shared control plane and other tests use those), the
//     advertise address is 127.0.0.1 and kube-apiserver binds to it only
//     (apiServer.extraArgs bind-address);
//   - etcd listens for clients on 127.0.0.1 once (etcd.local.extraArgs
//     listen-client-urls: kubeadm's default lists the loopback and the advertise address,
//     the same address here, and etcd cannot bind one address twice);
//   - kube-apiserver runs with --endpoint-reconciler-type=none (apiServer.extraArgs): with a
//     loopback advertise address the default reconciler refuses to start;
//   - keys are ECDSA P-256 (encryptionAlgorithm: ECDSA-P256) because they are quick to make;
//   - etcd's image tag is the release of the binary (etcd.local.imageTag 3.7.3-0) rather than
//     kubeadm v1.37's default 3.7.0-0;
//   - the kubeconfig is kubeadm's super-admin.conf (group system:masters): admin.conf's group
//     kubeadm:cluster-admins is bound by RBAC objects that kubeadm init creates later.
//
// No kube-controller-manager or kube-scheduler: etcd and the API server are what a
// kubelet switch could break.

// kubeadmControlPlane is one kubeadm-shaped control plane written to disk.
type kubeadmControlPlane struct {
	dir         string // everything lives under it
	nodeName    string
	manifestDir string // etcd.yaml, kube-apiserver.yaml: the kubelet's staticPodPath
	pkiDir      string // kubeadm's certificatesDir (/etc/kubernetes/pki)
	etcdDataDir string // kubeadm's etcd.local.dataDir (/var/lib/etcd)
	kubeconfig  string // admin kubeconfig (client certificate, group system:masters)
	apiURL      string // https://127.0.0.1:<apiserver port>

	apiserverPort, etcdClientPort, etcdPeerPort, etcdMetricsPort int
	// images are the two images the manifests run.
	etcdImage, apiserverImage string

	client *http.Client // the admin's identity, trusting only the cluster CA
}

// Names, paths and values kubeadm v1.37 uses.
const (
	kubeadmPriority          = int32(2000001000) // system-node-critical
	kubeadmServiceSubnet     = "10.96.0.0/12"
	kubeadmDNSDomain         = "cluster.local"
	kubeadmProbePort         = "probe-port"
	kubeadmHealthCheckPeriod = 10
	// ControlPlaneComponentHealthCheck's default, 4m, covered by startup probe periods.
	kubeadmHealthCheckTimeout = 4 * time.Minute
)

// reservedControlPlanePorts are the ports the project's shared control plane uses.
var reservedControlPlanePorts = []int{6443, 2379, 2380, 2381}

// writeKubeadmControlPlane writes, under dir, what kubeadm would put on the control-plane
// node nodeName: pki/ (CA, apiserver serving and client certificates, front proxy, etcd
// CA and certificates, service-account keys), manifests/etcd.yaml and
// manifests/kube-apiserver.yaml, an empty etcd/ data directory and admin.conf.
// Everything is written once: the same files serve every kubelet started on them.
func writeKubeadmControlPlane(t *testing.T, dir, nodeName string) *kubeadmControlPlane {
	t.Helper()
	k8sVersion, etcdVersion := controlPlaneVersions(t)
	ports := kubeadmFreePorts(t, 4)
	cp := &kubeadmControlPlane{
		dir:             dir,
		nodeName:        nodeName,
		manifestDir:     filepath.Join(dir, "manifests"),
		pkiDir:          filepath.Join(dir, "pki"),
		etcdDataDir:     filepath.Join(dir, "etcd"),
		kubeconfig:      filepath.Join(dir, "admin.conf"),
		apiserverPort:   ports[0],
		etcdClientPort:  ports[1],
		etcdPeerPort:    ports[2],
		etcdMetricsPort: ports[3],
		etcdImage:       "registry.k8s.io/etcd:" + strings.TrimPrefix(etcdVersion, "v") + "-0",
		apiserverImage:  "registry.k8s.io/kube-apiserver:" + k8sVersion,
	}
	cp.apiURL = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(cp.apiserverPort))
	// As kubeadm: the manifest directory 0700, the etcd data directory 0700 (etcd
	// warns about anything wider).
	for _, d := range []string{cp.manifestDir, cp.etcdDataDir, filepath.Join(cp.pkiDir, "etcd")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	admin := cp.writePKI(t)
	cp.writeKubeconfig(t, admin)
	cp.writeManifest(t, "etcd", cp.etcdPod())
	cp.writeManifest(t, "kube-apiserver", cp.apiserverPod())
	return cp
}

// controlPlaneVersions are the releases hack/controlplane.sh builds, from the pins in
// hack/tools/{k8s,etcd}/go.mod (the images are tagged with them).
func controlPlaneVersions(t *testing.T) (k8s, etcd string) {
	t.Helper()
	return goModRequire(t, "hack/tools/k8s/go.mod", "k8s.io/kubernetes"),
		goModRequire(t, "hack/tools/etcd/go.mod", "go.etcd.io/etcd/server/v3")
}

// goModRequire reads the version a go.mod of the repository requires of module.
func goModRequire(t *testing.T, goMod, module string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(), goMod))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(f) >= 2 && f[0] == module {
			return f[1]
		}
	}
	t.Fatalf("%s does not require %s", goMod, module)
	return ""
}

// kubeadmFreePorts returns n distinct free loopback ports, none of them the shared
// control plane's.
func kubeadmFreePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for len(ports) < n {
		p := freePort(t)
		if !slices.Contains(ports, p) && !slices.Contains(reservedControlPlanePorts, p) {
			ports = append(ports, p)
		}
	}
	return ports
}

// ---------------------------------------------------------------- PKI

// certKey is a certificate and its private key.
type certKey struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// certSpec is what differs between kubeadm's certificates.
type certSpec struct {
	cn     string
	orgs   []string
	usages []x509.ExtKeyUsage
	dns    []string
	ips    []net.IP
}

// writePKI writes kubeadm's certificates and keys under pkiDir (names from
// cmd/kubeadm/app/constants) and returns the admin's client certificate.
func (cp *kubeadmControlPlane) writePKI(t *testing.T) *certKey {
	t.Helper()
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	loopback := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	serviceIP := net.ParseIP("10.96.0.1") // the first address of the service subnet

	ca := cp.writeCA(t, "ca", "kubernetes")
	cp.writeSigned(t, ca, "apiserver", certSpec{cn: "kube-apiserver", usages: server,
		dns: []string{cp.nodeName, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + kubeadmDNSDomain},
		ips: []net.IP{serviceIP, net.ParseIP("127.0.0.1")}})
	cp.writeSigned(t, ca, "apiserver-kubelet-client", certSpec{cn: "kube-apiserver-kubelet-client", orgs: []string{"kubeadm:cluster-admins"}, usages: client})
	frontProxyCA := cp.writeCA(t, "front-proxy-ca", "front-proxy-ca")
	cp.writeSigned(t, frontProxyCA, "front-proxy-client", certSpec{cn: "front-proxy-client", usages: client})

	etcdCA := cp.writeCA(t, "etcd/ca", "etcd-ca")
	etcdNames := []string{cp.nodeName, "localhost"}
	cp.writeSigned(t, etcdCA, "etcd/server", certSpec{cn: cp.nodeName, usages: both, dns: etcdNames, ips: loopback})
	cp.writeSigned(t, etcdCA, "etcd/peer", certSpec{cn: cp.nodeName, usages: both, dns: etcdNames, ips: loopback})
	cp.writeSigned(t, etcdCA, "etcd/healthcheck-client", certSpec{cn: "kube-etcd-healthcheck-client", usages: client})
	cp.writeSigned(t, etcdCA, "apiserver-etcd-client", certSpec{cn: "kube-apiserver-etcd-client", usages: client})

	sa := newKey(t)
	der, err := x509.MarshalPKIXPublicKey(sa.Public())
	if err != nil {
		t.Fatal(err)
	}
	writePEMFile(t, filepath.Join(cp.pkiDir, "sa.key"), keyPEM(t, sa), 0o600)
	writePEMFile(t, filepath.Join(cp.pkiDir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644)

	return issue(t, ca, certSpec{cn: "kubernetes-super-admin", orgs: []string{"system:masters"}, usages: client})
}

func (cp *kubeadmControlPlane) writeCA(t *testing.T, base, cn string) *certKey {
	t.Helper()
	key := newKey(t)
	tmpl := certTemplate(cn, nil, 10*365*24*time.Hour)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	ca := &certKey{key: key}
	if ca.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	cp.writeCertKey(t, base, ca)
	return ca
}

func (cp *kubeadmControlPlane) writeSigned(t *testing.T, ca *certKey, base string, spec certSpec) {
	t.Helper()
	cp.writeCertKey(t, base, issue(t, ca, spec))
}

// issue signs a leaf certificate valid for a year, as kubeadm's.
func issue(t *testing.T, ca *certKey, spec certSpec) *certKey {
	t.Helper()
	key := newKey(t)
	tmpl := certTemplate(spec.cn, spec.orgs, 365*24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	tmpl.ExtKeyUsage, tmpl.DNSNames, tmpl.IPAddresses = spec.usages, spec.dns, spec.ips
	tmpl.AuthorityKeyId = ca.cert.SubjectKeyId
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &certKey{key: key}
	if leaf.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	return leaf
}

func certTemplate(cn string, orgs []string, validity time.Duration) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now().Add(-5 * time.Minute) // tolerate a little clock skew, as kubeadm
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now,
		NotAfter:     now.Add(validity),
	}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func keyPEM(t *testing.T, key crypto.Signer) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// writeCertKey writes <base>.crt and <base>.key (0600, as kubeadm).
func (cp *kubeadmControlPlane) writeCertKey(t *testing.T, base string, ck *certKey) {
	t.Helper()
	writePEMFile(t, filepath.Join(cp.pkiDir, base+".crt"), certPEM(ck.cert), 0o644)
	writePEMFile(t, filepath.Join(cp.pkiDir, base+".key"), keyPEM(t, ck.key), 0o600)
}

func writePEMFile(t *testing.T, name string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(name, data, mode); err != nil {
		t.Fatal(err)
	}
}

// writeKubeconfig writes the admin kubeconfig and keeps an HTTP client with the same
// identity for readyz.
func (cp *kubeadmControlPlane) writeKubeconfig(t *testing.T, admin *certKey) {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(cp.pkiDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	user := "kubernetes-super-admin"
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: %s
    server: %s
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: %s
  name: %s@kubernetes
current-context: %s@kubernetes
preferences: {}
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
`, b64(caPEM), cp.apiURL, user, user, user, user, b64(certPEM(admin.cert)), b64(keyPEM(t, admin.key)))
	writePEMFile(t, cp.kubeconfig, []byte(kubeconfig), 0o600)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert := tls.Certificate{Certificate: [][]byte{admin.cert.Raw}, PrivateKey: admin.key}
	cp.client = &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
			// A fresh connection per request: a probe must see a restarted server.
			DisableKeepAlives: true,
		},
	}
}

// ---------------------------------------------------------------- manifests

// kubeadmArg is one --name=value flag of a component's command.
type kubeadmArg struct{ name, value string }

// kubeadmCommand renders a command line as kubeadm's ArgumentsToCommand does: the
// default flags sorted by name, without those the extra flags replace, then the extra
// flags in their order.
func kubeadmCommand(binary string, defaults, extra []kubeadmArg) []string {
	defaults = slices.Clone(defaults)
	slices.SortStableFunc(defaults, func(a, b kubeadmArg) int { return strings.Compare(a.name, b.name) })
	cmd := []string{binary}
	for _, a := range defaults {
		if !slices.ContainsFunc(extra, func(e kubeadmArg) bool { return e.name == a.name }) {
			cmd = append(cmd, "--"+a.name+"="+a.value)
		}
	}
	for _, a := range extra {
		cmd = append(cmd, "--"+a.name+"="+a.value)
	}
	return cmd
}

func (cp *kubeadmControlPlane) pki(name string) string { return filepath.Join(cp.pkiDir, name) }

func loopbackURL(scheme string, port int) string {
	return scheme + "://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// etcdPod is kubeadm's GetEtcdPodSpec for a single-member local etcd.
func (cp *kubeadmControlPlane) etcdPod() *v1.Pod {
	clientURL := loopbackURL("https", cp.etcdClientPort)
	peerURL := loopbackURL("https", cp.etcdPeerPort)
	cmd := kubeadmCommand("etcd", []kubeadmArg{
		{"name", cp.nodeName},
		{"listen-client-urls", loopbackURL("https", cp.etcdClientPort) + "," + clientURL},
		{"advertise-client-urls", clientURL},
		{"listen-peer-urls", peerURL},
		{"initial-advertise-peer-urls", peerURL},
		{"data-dir", cp.etcdDataDir},
		{"cert-file", cp.pki("etcd/server.crt")},
		{"key-file", cp.pki("etcd/server.key")},
		{"trusted-ca-file", cp.pki("etcd/ca.crt")},
		{"client-cert-auth", "true"},
		{"peer-cert-file", cp.pki("etcd/peer.crt")},
		{"peer-key-file", cp.pki("etcd/peer.key")},
		{"peer-trusted-ca-file", cp.pki("etcd/ca.crt")},
		{"peer-client-cert-auth", "true"},
		{"snapshot-count", "10000"},
		{"listen-metrics-urls", loopbackURL("http", cp.etcdMetricsPort)},
		{"feature-gates", "InitialCorruptCheck=true"},
		{"watch-progress-notify-interval", "5s"},
		{"initial-cluster", cp.nodeName + "=" + peerURL},
	}, []kubeadmArg{{"listen-client-urls", clientURL}})
	certsDir := cp.pki("etcd")
	c := v1.Container{
		Name:            "etcd",
		Image:           cp.etcdImage,
		ImagePullPolicy: v1.PullIfNotPresent,
		Command:         cmd,
		VolumeMounts: []v1.VolumeMount{
			{Name: "etcd-data", MountPath: cp.etcdDataDir},
			{Name: "etcd-certs", MountPath: certsDir},
		},
		Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse("100m"),
			v1.ResourceMemory: resource.MustParse("100Mi"),
		}},
		// etcd's /livez and /readyz on its metrics port (kubeadm issue 3039).
		LivenessProbe:  kubeadmLivenessProbe("/livez", v1.URISchemeHTTP),
		ReadinessProbe: kubeadmReadinessProbe("/readyz", v1.URISchemeHTTP),
		StartupProbe:   kubeadmStartupProbe("/readyz", v1.URISchemeHTTP),
		Ports:          []v1.ContainerPort{{Name: kubeadmProbePort, ContainerPort: int32(cp.etcdMetricsPort), Protocol: v1.ProtocolTCP}},
	}
	volumes := []v1.Volume{
		hostPathVolume("etcd-certs", certsDir, v1.HostPathDirectoryOrCreate),
		hostPathVolume("etcd-data", cp.etcdDataDir, v1.HostPathDirectoryOrCreate),
	}
	return kubeadmComponentPod(c, volumes, map[string]string{"kubeadm.kubernetes.io/etcd.advertise-client-urls": clientURL})
}

// apiserverPod is kubeadm's kube-apiserver static pod with a local etcd.
func (cp *kubeadmControlPlane) apiserverPod() *v1.Pod {
	cmd := kubeadmCommand("kube-apiserver", []kubeadmArg{
		{"advertise-address", "127.0.0.1"},
		{"enable-admission-plugins", "NodeRestriction"},
		{"service-cluster-ip-range", kubeadmServiceSubnet},
		{"service-account-key-file", cp.pki("sa.pub")},
		{"service-account-signing-key-file", cp.pki("sa.key")},
		{"service-account-issuer", "https://kubernetes.default.svc." + kubeadmDNSDomain},
		{"client-ca-file", cp.pki("ca.crt")},
		{"tls-cert-file", cp.pki("apiserver.crt")},
		{"tls-private-key-file", cp.pki("apiserver.key")},
		{"kubelet-client-certificate", cp.pki("apiserver-kubelet-client.crt")},
		{"kubelet-client-key", cp.pki("apiserver-kubelet-client.key")},
		{"enable-bootstrap-token-auth", "true"},
		{"secure-port", strconv.Itoa(cp.apiserverPort)},
		{"allow-privileged", "true"},
		{"kubelet-preferred-address-types", "InternalIP,ExternalIP,Hostname"},
		{"requestheader-username-headers", "X-Remote-User"},
		{"requestheader-group-headers", "X-Remote-Group"},
		{"requestheader-extra-headers-prefix", "X-Remote-Extra-"},
		{"requestheader-client-ca-file", cp.pki("front-proxy-ca.crt")},
		{"requestheader-allowed-names", "front-proxy-client"},
		{"proxy-client-cert-file", cp.pki("front-proxy-client.crt")},
		{"proxy-client-key-file", cp.pki("front-proxy-client.key")},
		{"etcd-servers", loopbackURL("https", cp.etcdClientPort)},
		{"etcd-cafile", cp.pki("etcd/ca.crt")},
		{"etcd-certfile", cp.pki("apiserver-etcd-client.crt")},
		{"etcd-keyfile", cp.pki("apiserver-etcd-client.key")},
		{"authorization-mode", "Node,RBAC"},
	}, []kubeadmArg{{"bind-address", "127.0.0.1"}, {"endpoint-reconciler-type", "none"}})

	// k8s-certs and ca-certs, plus the CA directories /etc/ssl/certs may link into when
	// they exist on the host (kubeadm's caCertsExtraVolumePaths).
	volumes := []v1.Volume{
		hostPathVolume("ca-certs", "/etc/ssl/certs", v1.HostPathDirectoryOrCreate),
		hostPathVolume("k8s-certs", cp.pkiDir, v1.HostPathDirectoryOrCreate),
	}
	for _, p := range []string{"/etc/pki/ca-trust", "/etc/pki/tls/certs", "/etc/ca-certificates", "/usr/share/ca-certificates", "/usr/local/share/ca-certificates"} {
		if _, err := os.Stat(p); err == nil {
			volumes = append(volumes, hostPathVolume(strings.ReplaceAll(p, "/", "-")[1:], p, v1.HostPathDirectoryOrCreate))
		}
	}
	slices.SortFunc(volumes, func(a, b v1.Volume) int { return strings.Compare(a.Name, b.Name) })
	var mounts []v1.VolumeMount
	for _, v := range volumes {
		mounts = append(mounts, v1.VolumeMount{Name: v.Name, MountPath: v.HostPath.Path, ReadOnly: true})
	}
	c := v1.Container{
		Name:            "kube-apiserver",
		Image:           cp.apiserverImage,
		ImagePullPolicy: v1.PullIfNotPresent,
		Command:         cmd,
		VolumeMounts:    mounts,
		LivenessProbe:   kubeadmLivenessProbe("/livez", v1.URISchemeHTTPS),
		ReadinessProbe:  kubeadmReadinessProbe("/readyz", v1.URISchemeHTTPS),
		StartupProbe:    kubeadmStartupProbe("/livez", v1.URISchemeHTTPS),
		Resources:       v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")}},
		Ports:           []v1.ContainerPort{{Name: kubeadmProbePort, ContainerPort: int32(cp.apiserverPort), Protocol: v1.ProtocolTCP}},
	}
	endpoint := net.JoinHostPort("127.0.0.1", strconv.Itoa(cp.apiserverPort))
	return kubeadmComponentPod(c, volumes, map[string]string{"kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint": endpoint})
}

// kubeadmComponentPod is kubeadm's staticpod.ComponentPod: kube-system, host network,
// system-node-critical, seccomp RuntimeDefault, labels component and tier.
func kubeadmComponentPod(c v1.Container, volumes []v1.Volume, annotations map[string]string) *v1.Pod {
	priority := kubeadmPriority
	return &v1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        c.Name,
			Namespace:   metav1.NamespaceSystem,
			Labels:      map[string]string{"component": c.Name, "tier": "control-plane"},
			Annotations: annotations,
		},
		Spec: v1.PodSpec{
			Containers:        []v1.Container{c},
			Priority:          &priority,
			PriorityClassName: "system-node-critical",
			HostNetwork:       true,
			Volumes:           volumes,
			SecurityContext:   &v1.PodSecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}},
		},
	}
}

func hostPathVolume(name, path string, typ v1.HostPathType) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: path, Type: &typ}}}
}

// kubeadm's probes: an HTTP GET on the named probe port of 127.0.0.1.
func kubeadmProbe(path string, scheme v1.URIScheme, initialDelay, failureThreshold, period int32) *v1.Probe {
	return &v1.Probe{
		ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{
			Host: "127.0.0.1", Path: path, Port: intstr.FromString(kubeadmProbePort), Scheme: scheme,
		}},
		InitialDelaySeconds: initialDelay,
		TimeoutSeconds:      15,
		FailureThreshold:    failureThreshold,
		PeriodSeconds:       period,
	}
}

func kubeadmLivenessProbe(path string, scheme v1.URIScheme) *v1.Probe {
	return kubeadmProbe(path, scheme, 10, 8, 10)
}

func kubeadmReadinessProbe(path string, scheme v1.URIScheme) *v1.Probe {
	return kubeadmProbe(path, scheme, 0, 3, 1)
}

func kubeadmStartupProbe(path string, scheme v1.URIScheme) *v1.Probe {
	failures := int32(math.Ceil(kubeadmHealthCheckTimeout.Seconds() / kubeadmHealthCheckPeriod))
	return kubeadmProbe(path, scheme, kubeadmHealthCheckPeriod, failures, kubeadmHealthCheckPeriod)
}

// writeManifest writes <name>.yaml as kubeadm's WriteStaticPodToDisk does (YAML of the
// pod, mode 0600), through a temporary dot-file so a kubelet never reads half of it.
func (cp *kubeadmControlPlane) writeManifest(t *testing.T, name string, pod *v1.Pod) {
	t.Helper()
	data, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(cp.manifestDir, "."+name+".yaml.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(cp.manifestDir, name+".yaml")); err != nil {
		t.Fatal(err)
	}
}

// ---------------------------------------------------------------- probing

// readyz asks kube-apiserver's /readyz as the admin; nil when it answers 200.
func (cp *kubeadmControlPlane) readyz(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cp.apiURL+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := cp.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// waitReady polls readyz until it succeeds and returns how long that took; it fails the
// test after d with the last error.
func (cp *kubeadmControlPlane) waitReady(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := cp.readyz(ctx)
		cancel()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("kube-apiserver %s not ready after %v: %v", cp.apiURL, d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// availability is the record of a readyz poller (watchAvailability).
type availability struct {
	checks   int
	failures []string // "<time since start>: <error>" of each failed check
	longest  time.Duration
}

// watchAvailability polls readyz every interval until the returned stop is called, which
// returns what it saw: the number of checks, the failed ones, and the longest time the
// API server was not ready (from the first failure of a run to the next success). For
// "the API server answered throughout" assertions.
func (cp *kubeadmControlPlane) watchAvailability(interval time.Duration) (stop func() availability) {
	var (
		mu     sync.Mutex
		a      availability
		done   = make(chan struct{})
		exited = make(chan struct{})
	)
	start := time.Now()
	go func() {
		defer close(exited)
		var downSince time.Time
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), interval+time.Second)
			err := cp.readyz(ctx)
			cancel()
			now := time.Now()
			mu.Lock()
			a.checks++
			switch {
			case err != nil:
				a.failures = append(a.failures, fmt.Sprintf("%v: %v", now.Sub(start).Round(time.Millisecond), err))
				if downSince.IsZero() {
					downSince = now
				}
			case !downSince.IsZero():
				a.longest = max(a.longest, now.Sub(downSince))
				downSince = time.Time{}
			}
			mu.Unlock()
			select {
			case <-done:
				if !downSince.IsZero() {
					mu.Lock()
					a.longest = max(a.longest, time.Since(downSince))
					mu.Unlock()
				}
				return
			case <-tick.C:
			}
		}
	}()
	return func() availability {
		close(done)
		<-exited
		mu.Lock()
		defer mu.Unlock()
		return a
	}
}

// ---------------------------------------------------------------- images

// importControlPlaneImages builds (when missing or stale) and imports the etcd and
// kube-apiserver images into the rig rigEnv names (e.g. isolatedRig), through
// `hack/runtime.sh import-controlplane-images`, and returns their references. It fails
// the test when upstream's binaries are not built (hack/controlplane.sh build).
func importControlPlaneImages(t *testing.T, rigEnv []string) []string {
	t.Helper()
	start := time.Now()
	cmd := exec.Command(filepath.Join(repoRoot(), "hack", "runtime.sh"), "import-controlplane-images")
	cmd.Env = append(os.Environ(), rigEnv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/runtime.sh import-controlplane-images: %v\n%s", err, stderr.String())
	}
	refs := strings.Fields(string(out))
	if len(refs) == 0 {
		t.Fatal("hack/runtime.sh import-controlplane-images printed no image")
	}
	t.Logf("control-plane images %v ready in %v", refs, time.Since(start).Round(time.Millisecond))
	return refs
}
