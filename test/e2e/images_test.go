//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/images"
	"github.com/nodelet/nodelet/test/registry"
)

// countingImages counts the pulls that reach the runtime.
type countingImages struct {
	*images.RuntimeImages
	pulls atomic.Int32
}

func (c *countingImages) PullImage(ctx context.Context, image container.ImageSpec, secrets []v1.Secret, sc *runtimeapi.PodSandboxConfig) (string, error) {
	c.pulls.Add(1)
	return c.RuntimeImages.PullImage(ctx, image, secrets, sc)
}

type imagesFixture struct {
	runtime  *images.RuntimeImages
	counting *countingImages
	recorder *record.FakeRecorder
	manager  images.ImageManager
}

func newImagesFixture(t *testing.T) *imagesFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc, err := cri.NewRemoteImageService(ctx, endpoint(t), 5*time.Second, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	f := &imagesFixture{runtime: images.NewRuntimeImages(svc), recorder: record.NewFakeRecorder(100)}
	f.counting = &countingImages{RuntimeImages: f.runtime}
	f.manager = images.NewImageManager(f.recorder, f.counting, images.Options{SerializeImagePulls: true})
	return f
}

var imagesRef = &v1.ObjectReference{Kind: "Pod", Namespace: "nodelet-e2e-images", Name: "images", FieldPath: "spec.containers{c}"}

// ensure runs EnsureImageExists for a fresh pod UID unless uid is given.
func (f *imagesFixture) ensure(t *testing.T, uid, image string, policy v1.PullPolicy, secrets ...v1.Secret) (string, string, error) {
	t.Helper()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "images", Namespace: "nodelet-e2e-images", UID: types.UID(uid)}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return f.manager.EnsureImageExists(ctx, imagesRef, pod, image, secrets, nil, "", policy)
}

func (f *imagesFixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func uniqueSuffix() string { return fmt.Sprintf("%d", time.Now().UnixNano()) }

func TestImagesPresentWithIfNotPresentIsNotPulled(t *testing.T) {
	f := newImagesFixture(t)
	ref, msg, err := f.ensure(t, "uid-present", "busybox:1.36", v1.PullIfNotPresent)
	if err != nil {
		t.Fatalf("%v: %s", err, msg)
	}
	if !strings.HasPrefix(ref, "sha256:") {
		t.Errorf("imageRef %q, want the image ID", ref)
	}
	if n := f.counting.pulls.Load(); n != 0 {
		t.Errorf("%d pulls of a present image", n)
	}
	want := []string{`Normal Pulled Container image "busybox:1.36" already present on machine`}
	if got := f.events(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events %q, want %q", got, want)
	}
	// The runtime service itself agrees on the ID, for the short and the full name.
	full, err := f.runtime.GetImageRef(context.Background(), container.ImageSpec{Image: "docker.io/library/busybox:1.36"})
	if err != nil || full != ref {
		t.Errorf("GetImageRef(full name) = %q, %v; want %q", full, err, ref)
	}
}

func TestImagesAbsentWithNeverIsNotPulled(t *testing.T) {
	f := newImagesFixture(t)
	image := "docker.io/nodelet-e2e/absent:" + uniqueSuffix()
	_, msg, err := f.ensure(t, "uid-never", image, v1.PullNever)
	if !errors.Is(err, images.ErrImageNeverPull) {
		t.Fatalf("err = %v (%s), want ErrImageNeverPull", err, msg)
	}
	if want := fmt.Sprintf("Container image %q is not present with pull policy of Never", image); msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	if n := f.counting.pulls.Load(); n != 0 {
		t.Errorf("%d pulls with policy Never", n)
	}
}

func TestImagesFailedPullBacksOff(t *testing.T) {
	f := newImagesFixture(t)
	image := "docker.io/nodelet-e2e/absent:" + uniqueSuffix()
	start := time.Now()
	_, msg, err := f.ensure(t, "uid-backoff", image, v1.PullIfNotPresent)
	elapsed := time.Since(start)
	if !errors.Is(err, images.ErrImagePull) {
		t.Fatalf("err = %v (%s), want ErrImagePull", err, msg)
	}
	t.Logf("pull failed after %v: %s", elapsed.Round(time.Millisecond), msg)
	if elapsed > 10*time.Second {
		t.Errorf("pull took %v to fail, want it quick (no network)", elapsed)
	}
	_, msg, err = f.ensure(t, "uid-backoff", image, v1.PullIfNotPresent)
	if !errors.Is(err, images.ErrImagePullBackOff) {
		t.Fatalf("second attempt: err = %v, want ErrImagePullBackOff", err)
	}
	if prefix := fmt.Sprintf("Back-off pulling image %q: ErrImagePull: ", image); !strings.HasPrefix(msg, prefix) {
		t.Errorf("back-off message %q, want prefix %q", msg, prefix)
	}
	if n := f.counting.pulls.Load(); n != 1 {
		t.Errorf("%d pulls, want 1 (the second attempt must back off)", n)
	}
	events := f.events()
	if len(events) != 3 || !strings.HasPrefix(events[0], "Normal Pulling ") || !strings.HasPrefix(events[1], "Warning Failed ") || !strings.HasPrefix(events[2], "Normal BackOff ") {
		t.Errorf("events %q, want Pulling, Failed, BackOff", events)
	}
}

// registryHostsDir is containerd's registry config_path (hack/runtime.sh's STATE_DIR/certs.d).
func registryHostsDir() string {
	state := os.Getenv("NODELET_STATE_DIR")
	if state == "" {
		state = "/var/lib/nodelet-dev"
	}
	return filepath.Join(state, "certs.d")
}

// startAuthRegistry starts a basic-auth registry on loopback and tells containerd, through
// a hosts.toml it re-reads on every pull, to reach it over plain HTTP.
func startAuthRegistry(t *testing.T, user, password string) *registry.Registry {
	t.Helper()
	if _, err := os.Stat(registryHostsDir()); err != nil {
		t.Skipf("containerd registry config_path: %v", err)
	}
	reg := registry.New(user, password)
	t.Cleanup(reg.Close)
	dir := filepath.Join(registryHostsDir(), reg.Host())
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

func dockerConfigSecret(name, host, user, password string) v1.Secret {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	return v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "nodelet-e2e-images"},
		Type:       v1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{v1.DockerConfigJsonKey: []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, host, auth))},
	}
}

func TestImagesAuthenticatedPullFromLocalRegistry(t *testing.T) {
	reg := startAuthRegistry(t, "nodelet", "s3cret")
	tag := uniqueSuffix()
	// Unique content gives a unique image ID, so removing it touches no other image.
	if _, err := reg.AddTestImage("nodelet-e2e/auth", tag, "nodelet e2e "+tag); err != nil {
		t.Fatal(err)
	}
	image := reg.Host() + "/nodelet-e2e/auth:" + tag
	f := newImagesFixture(t)
	t.Cleanup(func() { _ = f.runtime.RemoveImage(context.Background(), container.ImageSpec{Image: image}) })

	_, msg, err := f.ensure(t, "uid-anonymous", image, v1.PullIfNotPresent)
	if !errors.Is(err, images.ErrImagePull) {
		t.Fatalf("anonymous pull: err = %v (%s), want ErrImagePull", err, msg)
	}
	t.Logf("anonymous pull refused: %s", msg)
	if reg.Stats().Unauthorized == 0 {
		t.Error("the registry saw no unauthorized request")
	}
	if s := reg.Stats(); s.ManifestGets != 0 || s.WrongCredentials != 0 {
		t.Fatalf("anonymous pull: %+v, want no manifest served and no credentials sent", s)
	}

	// A stale secret first, then the right one: both match the registry, in secret order.
	secrets := []v1.Secret{
		dockerConfigSecret("stale", reg.Host(), "nodelet", "old-password"),
		dockerConfigSecret("current", reg.Host(), "nodelet", "s3cret"),
	}
	ref, msg, err := f.ensure(t, "uid-auth", image, v1.PullIfNotPresent, secrets...)
	if err != nil {
		t.Fatalf("pull with secrets: %v: %s", err, msg)
	}
	if !strings.HasPrefix(ref, "sha256:") {
		t.Errorf("imageRef %q", ref)
	}
	if s := reg.Stats(); s.WrongCredentials == 0 || s.ManifestGets == 0 {
		t.Errorf("registry %+v: want the stale credential refused, then the manifest served", s)
	}
	events := f.events()
	if last := events[len(events)-1]; !strings.HasPrefix(last, fmt.Sprintf("Normal Pulled Successfully pulled image %q in ", image)) {
		t.Errorf("last event %q", last)
	}
	t.Logf("%s", events[len(events)-1])

	if got, err := f.runtime.GetImageRef(context.Background(), container.ImageSpec{Image: image}); err != nil || got != ref {
		t.Errorf("GetImageRef after pull = %q, %v; want %q", got, err, ref)
	}
	// Now present: IfNotPresent needs neither registry nor credentials.
	pulls := f.counting.pulls.Load()
	if got, _, err := f.ensure(t, "uid-other", image, v1.PullIfNotPresent); err != nil || got != ref || f.counting.pulls.Load() != pulls {
		t.Errorf("present image: %q, %v, pulls %d→%d", got, err, pulls, f.counting.pulls.Load())
	}
}
