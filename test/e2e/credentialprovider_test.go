//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
)

// credentialPlugin is an exec plugin (credentialprovider.kubelet.k8s.io/v1) that counts
// its runs in a file next to it, keeps the last request, and answers with the given
// credentials for host, cached per registry for an hour.
func credentialPlugin(dir, host, user, password string) string {
	return fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]s/runs 2>/dev/null || echo 0)
echo $((n + 1)) > %[1]s/runs
cat > %[1]s/last-request
cat <<EOF
{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1",
 "cacheKeyType":"Registry","cacheDuration":"1h",
 "auth":{"%[2]s":{"username":"%[3]s","password":"%[4]s"}}}
EOF
`, dir, host, user, password)
}

// TestClusterCredentialProviderPlugins: with --image-credential-provider-config and
// --image-credential-provider-bin-dir, pods without pull secrets pull private images with
// the credentials a plugin returns. The plugin gets upstream's request on stdin and runs
// once for two images of one registry (its answer is cached per registry). A plugin that
// fails leaves the pull without credentials: the pod's pull fails with the registry's
// refusal and is retried with back-off, and nodelet's log says what the plugin said.
func TestClusterCredentialProviderPlugins(t *testing.T) {
	ctx := context.Background()
	good := startIsolatedAuthRegistry(t, "plugin-user", "plugin-s3cret")
	bad := startIsolatedAuthRegistry(t, "other-user", "other-s3cret")
	tag := uniqueSuffix()
	var imgs []string
	for _, name := range []string{"first", "second"} {
		content := append(pauseBinary(t), []byte("\nnodelet-e2e credential plugin "+name+" "+tag+"\n")...)
		if _, err := good.AddTestImage("nodelet-e2e/"+name, tag, string(content)); err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, good.Host()+"/nodelet-e2e/"+name+":"+tag)
	}
	if _, err := bad.AddTestImage("nodelet-e2e/refused", tag, "refused "+tag); err != nil {
		t.Fatal(err)
	}
	refused := bad.Host() + "/nodelet-e2e/refused:" + tag
	images, err := cri.NewRemoteImageService(ctx, nodeletEndpoint(t), 5*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, img := range imgs {
			_ = images.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: img})
		}
		_ = images.Close(ctx)
	})

	bin, state := t.TempDir(), t.TempDir()
	writeExecutable(t, filepath.Join(bin, "registry-login"), credentialPlugin(state, good.Host(), "plugin-user", "plugin-s3cret"))
	writeExecutable(t, filepath.Join(bin, "broken-login"), "#!/bin/sh\necho 'no credentials for you' >&2\nexit 1\n")
	config := filepath.Join(t.TempDir(), "credential-providers.yaml")
	writeFileT(t, config, fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: registry-login
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: [%q]
  defaultCacheDuration: 10m
  args: [--verbose]
  env: [{name: PLUGIN_MODE, value: e2e}]
- name: broken-login
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: [%q]
  defaultCacheDuration: 10m
`, good.Host(), bad.Host()))

	c := startClusterNode(t, clusterOptions{args: []string{
		"--image-credential-provider-config=" + config, "--image-credential-provider-bin-dir=" + bin}})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })

	c.createPod(t, c.privatePod("first", c.namespace, imgs[0]))
	c.createPod(t, c.privatePod("second", c.namespace, imgs[1]))
	for _, p := range []string{"first", "second"} {
		eventually(t, 60*time.Second, p+" Ready", func() error { return c.podReady(p) })
	}
	if runs := readTrimmed(t, filepath.Join(state, "runs")); runs != "1" {
		t.Errorf("the plugin ran %s times for two images of one registry, want once (cached per registry)", runs)
	}
	req := readTrimmed(t, filepath.Join(state, "last-request"))
	for _, want := range []string{`"kind":"CredentialProviderRequest"`, `"apiVersion":"credentialprovider.kubelet.k8s.io/v1"`, `"image":"` + good.Host() + `/nodelet-e2e/`} {
		if !strings.Contains(req, want) {
			t.Errorf("the plugin's request %s lacks %s", req, want)
		}
	}
	if s := good.Stats(); s.ManifestGets < 2 || s.WrongCredentials != 0 {
		t.Errorf("registry: %+v, want both manifests served with the plugin's credentials", s)
	}

	c.createPod(t, c.privatePod("refused", c.namespace, refused))
	eventually(t, 60*time.Second, "the refused pull's event", func() error {
		return c.eventFor(c.namespace, "refused", "Failed", `Failed to pull image "`+refused+`"`)
	})
	eventually(t, 60*time.Second, "the refused pull backed off", func() error {
		return c.eventFor(c.namespace, "refused", "BackOff", `Back-off pulling image "`+refused+`"`)
	})
	p, err := c.getPod("refused")
	if err != nil {
		t.Fatal(err)
	}
	if w := p.Status.ContainerStatuses; len(w) != 1 || w[0].State.Waiting == nil ||
		(w[0].State.Waiting.Reason != "ErrImagePull" && w[0].State.Waiting.Reason != "ImagePullBackOff") {
		t.Errorf("refused pod's container: %+v, want waiting on ErrImagePull or ImagePullBackOff", w)
	}
	if lines := c.nodelet.out.String(); !strings.Contains(lines, "no credentials for you") {
		t.Errorf("nodelet's log does not carry the failing plugin's error output")
	}
	if p.Status.Phase != v1.PodPending {
		t.Errorf("refused pod phase %s, want Pending", p.Status.Phase)
	}
}

func writeExecutable(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFileT(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readTrimmed(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%v", err)
		return ""
	}
	return strings.TrimSpace(string(b))
}
