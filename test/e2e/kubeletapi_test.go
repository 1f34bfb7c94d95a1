//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubectl runs the control plane's matching kubectl (v1.37.2) with the admin kubeconfig.
func kubectl(t *testing.T, stdin io.Reader, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(kubectlPath(), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+os.Getenv("KUBECONFIG"))
	cmd.Stdin = stdin
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func kubectlPath() string {
	cache := os.Getenv("NODELET_CACHE_DIR")
	if cache == "" {
		cache = "/var/cache/nodelet"
	}
	return filepath.Join(cache, "k8s-v1.37.2", "bin", "kubectl")
}

// TestKubeletAPIThroughKubectl: kubectl logs -f, exec (exit codes, stdin, a TTY through a
// pseudo-terminal), attach, port-forward and cp work unmodified through the API server.
func TestKubeletAPIThroughKubectl(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	c.createPod(t, c.testPod("tools", "sh", "-c", "i=0; trap 'exit 0' TERM; while true; do i=$((i+1)); echo tick $i; sleep 0.3; done"))
	web := c.testPod("web", "sh", "-c", "echo hello-from-port-forward > /tmp/index.html; exec httpd -f -p 8080 -h /tmp")
	c.createPod(t, web)
	eventually(t, 20*time.Second, "pods Ready", func() error {
		if err := c.podReady("tools"); err != nil {
			return err
		}
		return c.podReady("web")
	})
	ns := "--namespace=" + c.namespace

	t.Run("logs -f", func(t *testing.T) {
		cmd := exec.Command(kubectlPath(), ns, "logs", "-f", "tools")
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		seen := map[string]bool{}
		deadline := time.After(10 * time.Second)
		for len(seen) < 5 {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("logs -f ended after %d lines", len(seen))
				}
				seen[l] = true
			case <-deadline:
				t.Fatalf("logs -f gave %d lines in 10 s, want lines as they are written", len(seen))
			}
		}
	})

	t.Run("exec exit code and stdin", func(t *testing.T) {
		out, err := kubectl(t, nil, ns, "exec", "tools", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
		var exitErr *exec.ExitError
		if !errorsAs(err, &exitErr) || exitErr.ExitCode() != 3 || !strings.Contains(out, "out") || !strings.Contains(out, "err") {
			t.Errorf("exec: %v\n%s", err, out)
		}
		out, err = kubectl(t, strings.NewReader("line1\nline2\n"), ns, "exec", "-i", "tools", "--", "wc", "-l")
		if err != nil || strings.TrimSpace(out) != "2" {
			t.Errorf("exec -i with stdin closed: %q %v", out, err)
		}
	})

	t.Run("exec -it through a pty", func(t *testing.T) {
		cmd := exec.Command("script", "-qec", fmt.Sprintf("%s %s exec -it tools -- sh -c 'tty; stty size; exit 5'", kubectlPath(), ns), "/dev/null")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+os.Getenv("KUBECONFIG"), "COLUMNS=123", "LINES=45")
		out, err := cmd.CombinedOutput()
		var exitErr *exec.ExitError
		if !errorsAs(err, &exitErr) || exitErr.ExitCode() != 5 || !strings.Contains(string(out), "/dev/pts/") {
			t.Errorf("exec -it: %v\n%s", err, out)
		}
	})

	t.Run("attach", func(t *testing.T) {
		cmd := exec.Command(kubectlPath(), ns, "attach", "tools")
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Env = append(os.Environ(), "KUBECONFIG="+os.Getenv("KUBECONFIG"))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		eventually(t, 10*time.Second, "attached output", func() error {
			if !regexp.MustCompile(`tick \d+\n`).MatchString(out.String()) {
				return fmt.Errorf("output %q", out.String())
			}
			return nil
		})
	})

	t.Run("port-forward", func(t *testing.T) {
		cmd := exec.Command(kubectlPath(), ns, "port-forward", "pod/web", ":8080")
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Env = append(os.Environ(), "KUBECONFIG="+os.Getenv("KUBECONFIG"))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		var port string
		eventually(t, 10*time.Second, "port-forward listening", func() error {
			m := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+)`).FindStringSubmatch(out.String())
			if m == nil {
				return fmt.Errorf("output %q", out.String())
			}
			port = m[1]
			return nil
		})
		for i := 0; i < 2; i++ { // two requests: two streams over the one connection
			resp, err := http.Get("http://127.0.0.1:" + port + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "hello-from-port-forward\n" {
				t.Errorf("through port-forward: %q", body)
			}
		}
	})

	t.Run("cp both ways", func(t *testing.T) {
		dir := t.TempDir()
		data := make([]byte, 300<<10)
		_, _ = rand.Read(data)
		src, back := filepath.Join(dir, "src.bin"), filepath.Join(dir, "back.bin")
		if err := os.WriteFile(src, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := kubectl(t, nil, ns, "cp", src, "tools:/tmp/data.bin"); err != nil {
			t.Fatalf("cp to the pod: %v\n%s", err, out)
		}
		if out, err := kubectl(t, nil, ns, "cp", "tools:/tmp/data.bin", back); err != nil {
			t.Fatalf("cp from the pod: %v\n%s", err, out)
		}
		got, _ := os.ReadFile(back)
		if !bytes.Equal(got, data) {
			t.Errorf("cp round trip changed the file (%d bytes back, want %d)", len(got), len(data))
		}
	})

	t.Run("configz through the API server's proxy", func(t *testing.T) {
		out, err := kubectl(t, nil, "get", "--raw", "/api/v1/nodes/"+c.name+"/proxy/configz")
		if err != nil || !strings.Contains(out, `"kubeletconfig"`) || !strings.Contains(out, fmt.Sprintf(`"port":%d`, c.apiPort)) {
			t.Errorf("configz: %v\n%.300s", err, out)
		}
		out, err = kubectl(t, nil, "get", "--raw", "/api/v1/nodes/"+c.name+"/proxy/healthz/syncloop")
		if err != nil || strings.TrimSpace(out) != "ok" {
			t.Errorf("healthz/syncloop: %v %q", err, out)
		}
	})
}

// TestKubeletAPISecurity: nobody identified gets 401, an identified user without the
// right nodes/* permission gets 403 (and nothing about pods), anonymous access is off by
// default, the read-only port is closed unless set, and a client certificate from
// another CA is refused.
func TestKubeletAPISecurity(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	c.createPod(t, c.testPod("secret-pod"))
	eventually(t, 20*time.Second, "pod Ready", func() error { return c.podReady("secret-pod") })
	base := fmt.Sprintf("https://127.0.0.1:%d", c.apiPort)
	paths := []string{"/pods", "/containerLogs/" + c.namespace + "/secret-pod/main", "/exec/" + c.namespace + "/secret-pod/main?command=true&output=1"}

	noCreds := insecureClient(nil)
	for _, p := range paths {
		code, body := get(t, noCreds, base+p, "")
		if code != http.StatusUnauthorized || strings.Contains(body, "secret-pod") {
			t.Errorf("%s without credentials: %d %q, want 401 and nothing about the pod", p, code, body)
		}
	}

	ctx := context.Background()
	token := serviceAccountToken(t, c, "viewer")
	for _, p := range paths {
		code, body := get(t, noCreds, base+p, token)
		if code != http.StatusForbidden || strings.Contains(body, "secret-pod") {
			t.Errorf("%s with a token lacking nodes/proxy: %d %q, want 403", p, code, body)
		}
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: c.namespace + "-node-proxy"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/proxy", "nodes/pods"}, Verbs: []string{"get", "create"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: c.namespace + "-node-proxy"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "viewer", Namespace: c.namespace}}}
	if _, err := c.admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer c.admin.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{})
	if _, err := c.admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer c.admin.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
	// The kubelet caches refusals (cacheUnauthorizedTTL, 30 s by default).
	eventually(t, 45*time.Second, "token with nodes/proxy allowed", func() error {
		if code, body := get(t, noCreds, base+"/pods", token); code != http.StatusOK || !strings.Contains(body, "secret-pod") {
			return fmt.Errorf("%d %.200s", code, body)
		}
		return nil
	})

	// A client certificate with a trusted-looking name, signed by a CA the kubelet does not
	// trust.
	code, _ := get(t, insecureClient(foreignClientCert(t)), base+"/pods", "")
	if code != http.StatusUnauthorized {
		t.Errorf("client certificate from another CA: %d, want 401", code)
	}

	// No read-only port unless set: nothing answers plain HTTP on upstream's 10255.
	if resp, err := http.Get("http://127.0.0.1:10255/pods"); err == nil {
		resp.Body.Close()
		t.Errorf("read-only port answered %d although readOnlyPort is unset", resp.StatusCode)
	}
}

// serviceAccountToken creates a service account in the test namespace and returns a token
// for it.
func serviceAccountToken(t *testing.T, c *clusterNode, name string) string {
	t.Helper()
	ctx := context.Background()
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.namespace}}
	if _, err := c.admin.CoreV1().ServiceAccounts(c.namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := c.admin.CoreV1().ServiceAccounts(c.namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func insecureClient(cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the kubelet's self-signed serving cert
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

func get(t *testing.T, client *http.Client, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// foreignClientCert is a system:masters client certificate from a CA of its own.
func foreignClientCert(t *testing.T) *tls.Certificate {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func errorsAs(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*target = e
	}
	return ok
}

// TestKubectlTop: metrics-server (brought up by `make test-e2e`) scrapes the node's
// /metrics/resource, and `kubectl top node` and `kubectl top pod` show its figures.
func TestKubectlTop(t *testing.T) {
	if os.Getenv("METRICS_SERVER") == "" {
		t.Fatal("METRICS_SERVER is not set: run `make test-e2e` (it starts metrics-server)")
	}
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	c.createPod(t, c.testPod("busy", "sh", "-c", "trap 'exit 0' TERM; while true; do :; done"))
	eventually(t, 20*time.Second, "pod Ready", func() error { return c.podReady("busy") })
	// metrics-server scrapes every 15 s and needs two samples for a CPU rate.
	took := eventually(t, 120*time.Second, "kubectl top node", func() error {
		out, err := kubectl(t, nil, "top", "node", c.name, "--no-headers")
		if err != nil || !regexp.MustCompile(`^`+c.name+`\s+\d+m\s+\d+%\s+\d+Mi\s+\d+%`).MatchString(out) {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	t.Logf("kubectl top node answered after %v", took)
	eventually(t, 90*time.Second, "kubectl top pod", func() error {
		out, err := kubectl(t, nil, "top", "pod", "busy", "--namespace="+c.namespace, "--no-headers")
		m := regexp.MustCompile(`^busy\s+(\d+)m\s+\d+Mi`).FindStringSubmatch(out)
		if err != nil || m == nil || m[1] == "0" {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}
