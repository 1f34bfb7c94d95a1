//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kc "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/test/registry"
)

// A private image is no way around its registry's credentials (KEP-2535, on by default
// with imagePullCredentialsVerificationPolicy NeverVerifyPreloadedImages): once pod A has
// pulled it with its pull secret, pod B in another namespace without the secret must pull
// it itself and fails as upstream's kubelet fails it; pod C with the secret runs it
// without a pull; and an image preloaded into containerd (busybox, imported by
// hack/runtime.sh) still runs for any pod. nodelet keeps the record of A's pull where
// upstream's kubelet does, in its format.
func TestClusterPulledImagesNeedCredentials(t *testing.T) {
	ctx := context.Background()
	const user, password = "nodelet", "pulled-s3cret"
	reg := startIsolatedAuthRegistry(t, user, password)
	tag := uniqueSuffix()
	// The image runs the pause binary (it waits for SIGTERM whatever its name); the
	// appended bytes give the image an ID of its own, so removing it touches nothing else.
	content := append(pauseBinary(t), []byte("\nnodelet-e2e pulled images "+tag+"\n")...)
	if _, err := reg.AddTestImage("nodelet-e2e/private", tag, string(content)); err != nil {
		t.Fatal(err)
	}
	image := reg.Host() + "/nodelet-e2e/private:" + tag

	images, err := cri.NewRemoteImageService(ctx, nodeletEndpoint(t), 5*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the node, so it runs after the node's cleanup removed the pods.
	t.Cleanup(func() {
		_ = images.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: image})
		_ = images.Close(ctx)
	})

	c := startClusterNode(t, clusterOptions{})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	other := c.otherNamespace(t, "nocred")

	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	secret, err := c.admin.CoreV1().Secrets(c.namespace).Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: c.namespace},
		Type:       v1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{v1.DockerConfigJsonKey: []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, reg.Host(), auth))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Pod A pulls the private image with its secret.
	c.createPod(t, c.privatePod("a", c.namespace, image, "regcred"))
	eventually(t, 60*time.Second, "pod A Ready", func() error { return c.podReady("a") })
	afterA := reg.Stats()
	if afterA.ManifestGets == 0 {
		t.Fatalf("registry %+v: pod A runs, but its manifest was never served", afterA)
	}
	c.checkPulledRecord(t, images, image, secret)

	// Pod B, another namespace, no secret, IfNotPresent: it must not start from the
	// node's copy; it pulls, and the registry refuses it.
	noCred := "nocred-" + c.name
	c.createPod(t, c.privatePod(noCred, other, image))
	var waiting *v1.ContainerStateWaiting
	eventually(t, 60*time.Second, "pod B refused the image", func() error {
		p, err := c.admin.CoreV1().Pods(other).Get(ctx, noCred, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Running != nil || s.State.Terminated != nil {
				t.Fatalf("pod B's container ran the private image without credentials: %+v", s.State)
			}
			if w := s.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
				waiting = w
				return nil
			}
		}
		return fmt.Errorf("phase %s, statuses %+v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	t.Logf("pod B: %s: %s", waiting.Reason, waiting.Message)
	if msg := strings.ToLower(waiting.Message); waiting.Reason == "ErrImagePull" && !strings.Contains(msg, "401") && !strings.Contains(msg, "unauthorized") && !strings.Contains(msg, "authoriz") {
		t.Errorf("pod B's pull failed for another reason than authorization: %s", waiting.Message)
	}
	if s := reg.Stats(); s.Unauthorized <= afterA.Unauthorized || s.ManifestGets != afterA.ManifestGets {
		t.Errorf("registry after pod B %+v (after A %+v): want an unauthorized request and no manifest served", s, afterA)
	}
	eventually(t, 30*time.Second, "pod B's Failed event", func() error {
		return c.eventFor(other, noCred, "Failed", fmt.Sprintf("Failed to pull image %q", image))
	})

	// Pod C, with the secret: runs the image without pulling it again.
	beforeC := reg.Stats()
	c.createPod(t, c.privatePod("c", c.namespace, image, "regcred"))
	eventually(t, 60*time.Second, "pod C Ready", func() error { return c.podReady("c") })
	if s := reg.Stats(); s.ManifestGets != beforeC.ManifestGets || s.WrongCredentials != beforeC.WrongCredentials {
		t.Errorf("registry %+v (before pod C %+v): pod C pulled again", s, beforeC)
	}
	eventually(t, 30*time.Second, "pod C's Pulled event", func() error {
		return c.eventFor(c.namespace, "c", "Pulled", fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", image))
	})
	if err := c.eventFor(c.namespace, "c", "Pulling", ""); err == nil {
		t.Error("pod C has a Pulling event")
	}

	// A preloaded image (imported into containerd, never pulled by nodelet) runs for a
	// pod without secrets, in the other namespace, under the default policy.
	preloaded := c.testPod("preloaded-" + c.name)
	preloaded.Namespace = other
	c.createPod(t, preloaded)
	eventually(t, 60*time.Second, "the preloaded-image pod Ready", func() error {
		p, err := c.admin.CoreV1().Pods(other).Get(ctx, preloaded.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == v1.PodReady && cond.Status == v1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("phase %s", p.Status.Phase)
	})
}

// privatePod is a pod of namespace running image's own command, with the named pull
// secrets, bound to this node.
func (c *clusterNode) privatePod(name, namespace, image string, pullSecrets ...string) *v1.Pod {
	pod := c.testPod(name)
	pod.Namespace = namespace
	pod.Spec.Containers[0].Image = image
	pod.Spec.Containers[0].Command = nil
	pod.Spec.Containers[0].ImagePullPolicy = v1.PullIfNotPresent
	for _, s := range pullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, v1.LocalObjectReference{Name: s})
	}
	return pod
}

// otherNamespace creates a second namespace (with its default service account) for the
// test, deleted when it ends. Pods there should be named "<x>-<node name>", which the
// node's cleanup recognizes.
func (c *clusterNode) otherNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ctx := context.Background()
	name := prefix + "-" + c.name
	if _, err := c.admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.admin.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name}}
	if _, err := c.admin.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

// eventFor is nil once the pod has an event with reason whose message starts with prefix.
func (c *clusterNode) eventFor(namespace, pod, reason, prefix string) error {
	list, err := c.admin.CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "reason=" + reason + ",involvedObject.name=" + pod,
	})
	if err != nil {
		return err
	}
	var seen []string
	for _, e := range list.Items {
		if strings.HasPrefix(e.Message, prefix) {
			return nil
		}
		seen = append(seen, e.Message)
	}
	return fmt.Errorf("no %s event %q for %s/%s among %q", reason, prefix, namespace, pod, seen)
}

// checkPulledRecord reads the record of the image's pull in the node's root directory,
// where upstream's kubelet keeps it: image_manager/pulled/sha256-<sha256 of the image
// ID>, a kubelet.config.k8s.io/v1beta1 ImagePulledRecord naming the pull secret.
func (c *clusterNode) checkPulledRecord(t *testing.T, images interface {
	ImageStatus(context.Context, *runtimeapi.ImageSpec, bool) (*runtimeapi.ImageStatusResponse, error)
}, image string, secret *v1.Secret) {
	t.Helper()
	st, err := images.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: image}, false)
	if err != nil || st.GetImage() == nil {
		t.Fatalf("image status of %s: %v, %v", image, st, err)
	}
	id := st.GetImage().GetId()
	file := filepath.Join(c.rootDir, "image_manager", "pulled", fmt.Sprintf("sha256-%x", sha256.Sum256([]byte(id))))
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the pulled record of %s (%s): %v", image, id, err)
	}
	var r kc.ImagePulledRecord
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	creds := r.CredentialMapping[image[:strings.LastIndex(image, ":")]] // keyed by the image without its tag
	if r.Kind != "ImagePulledRecord" || r.APIVersion != "kubelet.config.k8s.io/v1beta1" || r.ImageRef != id ||
		len(creds.KubernetesSecrets) != 1 || creds.NodePodsAccessible {
		t.Fatalf("pulled record %s:\n%s", file, data)
	}
	s := creds.KubernetesSecrets[0]
	if s.Namespace != secret.Namespace || s.Name != secret.Name || s.UID != string(secret.UID) || len(s.CredentialHash) != 64 {
		t.Errorf("the record names %+v, want secret %s/%s (%s) with a credential hash", s, secret.Namespace, secret.Name, secret.UID)
	}
	if entries, _ := os.ReadDir(filepath.Join(c.rootDir, "image_manager", "pulling")); len(entries) != 0 {
		t.Errorf("pull intents left after the pull: %v", entries)
	}
}

// isolatedStateDir is the isolated containerd's state directory (hack/runtime.sh's
// STATE_DIR for the rig cluster nodes run on).
func isolatedStateDir(t *testing.T) string {
	t.Helper()
	for _, kv := range isolatedRig {
		if v, ok := strings.CutPrefix(kv, "NODELET_STATE_DIR="); ok {
			return v
		}
	}
	t.Fatal("no NODELET_STATE_DIR in the isolated rig")
	return ""
}

// startIsolatedAuthRegistry is startAuthRegistry for the isolated containerd, whose
// registry config_path is its own STATE_DIR/certs.d.
func startIsolatedAuthRegistry(t *testing.T, user, password string) *registry.Registry {
	t.Helper()
	hostsDir := filepath.Join(isolatedStateDir(t), "certs.d")
	if _, err := os.Stat(hostsDir); err != nil {
		t.Skipf("containerd registry config_path: %v", err)
	}
	reg := registry.New(user, password)
	t.Cleanup(reg.Close)
	dir := filepath.Join(hostsDir, reg.Host())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", reg.URL(), reg.URL())
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
	return reg
}

// pauseBinary is /pause from the test images' pause archive (test/images/build, in the
// isolated rig's STATE_DIR/images).
func pauseBinary(t *testing.T) []byte {
	t.Helper()
	archive := filepath.Join(isolatedStateDir(t), "images", "pause.tar")
	files, err := tarFiles(archive)
	if err != nil {
		t.Fatalf("reading the pause image: %v", err)
	}
	blob := func(digest string) []byte {
		data, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
		if !ok {
			t.Fatalf("%s: blob %s missing", archive, digest)
		}
		return data
	}
	var index struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) == 0 {
		t.Fatalf("%s: index.json: %v", archive, err)
	}
	var manifest struct {
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil {
		t.Fatalf("%s: manifest: %v", archive, err)
	}
	for _, l := range manifest.Layers {
		zr, err := gzip.NewReader(bytes.NewReader(blob(l.Digest)))
		if err != nil {
			t.Fatalf("%s: layer %s: %v", archive, l.Digest, err)
		}
		layer, err := readTar(zr)
		if err != nil {
			t.Fatalf("%s: layer %s: %v", archive, l.Digest, err)
		}
		if bin, ok := layer["pause"]; ok {
			return bin
		}
	}
	t.Fatalf("%s: no /pause in its layers", archive)
	return nil
}

func tarFiles(archive string) (map[string][]byte, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readTar(f)
}

// readTar returns the regular files of a tar stream by cleaned, relative path.
func readTar(r io.Reader) (map[string][]byte, error) {
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[strings.TrimPrefix(path.Clean(h.Name), "/")] = data
	}
}
