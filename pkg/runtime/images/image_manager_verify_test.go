package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	kc "k8s.io/kubelet/config/v1beta1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

const privateImage = "reg.io/team/app:1"

// verifyFixture is an image manager with pulled-image verification over a registry that
// accepts the users "good" and "good2" (password "pw"), and anonymous pulls when told.
type verifyFixture struct {
	root     string
	svc      *authCheckingService
	recorder *record.FakeRecorder
	pulls    *PullManager
	manager  ImageManager
}

func newVerifyFixture(t *testing.T, policy kc.ImagePullCredentialsVerificationPolicy, anonymousOK bool, present ...string) *verifyFixture {
	t.Helper()
	f := &verifyFixture{root: t.TempDir(), recorder: record.NewFakeRecorder(100)}
	fake := critest.NewFakeImageService()
	fake.SetFakeImages(present)
	f.svc = &authCheckingService{FakeImageService: fake, accept: func(a *runtimeapi.AuthConfig) bool {
		if a == nil {
			return anonymousOK
		}
		return (a.Username == "good" || a.Username == "good2") && a.Password == "pw"
	}}
	runtimeImages := NewRuntimeImages(f.svc)
	f.pulls, _ = newTestPullManager(t, f.root, mustPolicy(t, policy))
	clk := testclock.NewFakeClock(time.Now())
	f.manager = NewImageManager(f.recorder, runtimeImages, Options{
		Backoff: flowcontrol.NewFakeBackOff(ImageBackOffPeriod, MaxImageBackOff, clk), PullManager: f.pulls,
	})
	return f
}

func regSecret(namespace, name, user string) v1.Secret {
	auth := b64(user + ":pw")
	return v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(namespace + "-" + name + "-uid")},
		Type:       v1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{"reg.io":{"auth":"` + auth + `"}}}`)},
	}
}

func podIn(namespace, uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: namespace, UID: types.UID(uid)}}
}

func (f *verifyFixture) ensure(namespace, uid, image string, policy v1.PullPolicy, secrets ...v1.Secret) (string, string, error) {
	return f.manager.EnsureImageExists(context.Background(), containerRef, podIn(namespace, uid), image, secrets, nil, "", policy)
}

// attempts lists the pulls that reached the registry since the last call, by user.
func (f *verifyFixture) attempts() []string {
	f.svc.mu.Lock()
	defer f.svc.mu.Unlock()
	var out []string
	for _, a := range f.svc.attempts {
		if a == nil {
			out = append(out, "<anonymous>")
		} else {
			out = append(out, a.Username)
		}
	}
	f.svc.attempts = nil
	return out
}

func (f *verifyFixture) record(t *testing.T, ref string) *kc.ImagePulledRecord {
	t.Helper()
	r, ok := pulledRecordFile(t, f.root, ref)
	if !ok {
		t.Fatalf("no pulled record for %s under %s", ref, f.root)
	}
	return r
}

func checkEvents(t *testing.T, got []string, wantPrefixes ...string) {
	t.Helper()
	if len(got) != len(wantPrefixes) {
		t.Errorf("events %q, want %d: %q", got, len(wantPrefixes), wantPrefixes)
		return
	}
	for i, p := range wantPrefixes {
		if !strings.HasPrefix(got[i], p) {
			t.Errorf("event %d = %q, want prefix %q", i, got[i], p)
		}
	}
}

// credentialHash is upstream's hash of a basic-auth credential as a pull secret holds it.
func credentialHash(user, password string) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf(`{"username":%q,"password":%q}`, user, password)))
	return hex.EncodeToString(sum[:])
}

// A private image pulled for one pod is no way around the registry's credentials for
// another: under the default policy a pod without the secret must pull it itself (and
// fails), with pullPolicy Never it is told the image is not present, and pods with the
// secret (or the same credential, or their own valid one) use it.
func TestPulledImageIsNoWayAroundCredentials(t *testing.T) {
	f := newVerifyFixture(t, "", false)
	regcred := regSecret("ns1", "regcred", "good")
	pulling := `Normal Pulling Pulling image "reg.io/team/app:1"`
	pulled := `Normal Pulled Successfully pulled image "reg.io/team/app:1" in `
	accessible := `Normal Pulled Container image "reg.io/team/app:1" already present on machine and can be accessed by the pod`

	// Pod A pulls with its secret: the record names the secret.
	ref, msg, err := f.ensure("ns1", "a", privateImage, v1.PullIfNotPresent, regcred)
	if err != nil {
		t.Fatalf("pod A: %v: %s", err, msg)
	}
	if got := f.attempts(); !reflect.DeepEqual(got, []string{"good"}) {
		t.Errorf("pod A's pulls: %q", got)
	}
	checkEvents(t, drain(f.recorder), pulling, pulled)
	want := kc.ImagePullCredentials{KubernetesSecrets: []kc.ImagePullSecret{
		{UID: "ns1-regcred-uid", Namespace: "ns1", Name: "regcred", CredentialHash: credentialHash("good", "pw")},
	}}
	if got := f.record(t, ref).CredentialMapping; !reflect.DeepEqual(got, map[string]kc.ImagePullCredentials{"reg.io/team/app": want}) {
		t.Errorf("record of pod A's pull: %+v, want %+v", got, want)
	}

	// Pod B, another namespace, no secret: must pull, and the registry refuses it.
	_, msg, err = f.ensure("ns2", "b", privateImage, v1.PullIfNotPresent)
	if !errors.Is(err, ErrImagePull) {
		t.Fatalf("pod B: err = %v (%s), want ErrImagePull", err, msg)
	}
	if got := f.attempts(); !reflect.DeepEqual(got, []string{"<anonymous>"}) {
		t.Errorf("pod B's pulls: %q", got)
	}
	checkEvents(t, drain(f.recorder), pulling, `Warning Failed Failed to pull image "reg.io/team/app:1": unauthorized`)

	// Pod B with pullPolicy Never: the image is "not present", as if it were absent.
	_, msg, err = f.ensure("ns2", "b-never", privateImage, v1.PullNever)
	if !errors.Is(err, ErrImageNeverPull) || msg != `Container image "reg.io/team/app:1" is not present with pull policy of Never` {
		t.Fatalf("pod B, Never: %v, %q", err, msg)
	}
	if got := f.attempts(); len(got) != 0 {
		t.Errorf("pullPolicy Never pulled: %q", got)
	}
	checkEvents(t, drain(f.recorder), `Warning ErrImageNeverPull Container image "reg.io/team/app:1" is not present with pull policy of Never`)

	// Pod C, with pod A's secret: no pull; same with pullPolicy Never.
	for _, policy := range []v1.PullPolicy{v1.PullIfNotPresent, v1.PullNever} {
		if got, msg, err := f.ensure("ns1", "c-"+string(policy), privateImage, policy, regcred); err != nil || got != ref ||
			msg != `Container image "reg.io/team/app:1" already present on machine and can be accessed by the pod` {
			t.Fatalf("pod C (%s): %q, %q, %v", policy, got, msg, err)
		}
		checkEvents(t, drain(f.recorder), accessible)
	}
	// Pod D, another namespace, a copy of the same credential: no pull.
	if _, _, err := f.ensure("ns3", "d", privateImage, v1.PullIfNotPresent, regSecret("ns3", "copy", "good")); err != nil {
		t.Fatalf("pod D: %v", err)
	}
	// Pod E, a wrong credential: must pull, and fails.
	if _, _, err := f.ensure("ns3", "e", privateImage, v1.PullIfNotPresent, regSecret("ns3", "wrong", "bad")); !errors.Is(err, ErrImagePull) {
		t.Fatalf("pod E: %v, want ErrImagePull", err)
	}
	if got := f.attempts(); !reflect.DeepEqual(got, []string{"bad"}) {
		t.Errorf("pods C, D, E pulled: %q; want only E's attempt", got)
	}
	drain(f.recorder)

	// Pod F, its own valid credential: pulls again, and is then recorded beside A's.
	if _, _, err := f.ensure("ns4", "f", privateImage, v1.PullIfNotPresent, regSecret("ns4", "mine", "good2")); err != nil {
		t.Fatalf("pod F: %v", err)
	}
	if got := f.attempts(); !reflect.DeepEqual(got, []string{"good2"}) {
		t.Errorf("pod F's pulls: %q", got)
	}
	checkEvents(t, drain(f.recorder), pulling, pulled)
	if _, _, err := f.ensure("ns4", "f2", privateImage, v1.PullIfNotPresent, regSecret("ns4", "mine", "good2")); err != nil || len(f.attempts()) != 0 {
		t.Fatalf("pod F2: %v, or it pulled", err)
	}
	var coords []string
	for _, s := range f.record(t, ref).CredentialMapping["reg.io/team/app"].KubernetesSecrets {
		coords = append(coords, s.Namespace+"/"+s.Name)
	}
	if want := []string{"ns1/regcred", "ns3/copy", "ns4/mine"}; !reflect.DeepEqual(coords, want) {
		t.Errorf("secrets recorded %q, want %q", coords, want)
	}
}

// Preloaded images (on the node, never pulled by nodelet) follow the policy: the default
// lets every pod use them, AlwaysVerify makes pods pull them.
func TestPreloadedImagesFollowThePolicy(t *testing.T) {
	const image = "reg.io/preloaded:1"
	f := newVerifyFixture(t, "", false, image)
	if got, msg, err := f.ensure("ns1", "a", image, v1.PullIfNotPresent); err != nil || got != image {
		t.Fatalf("default policy: %q, %q, %v", got, msg, err)
	}
	if got := f.attempts(); len(got) != 0 {
		t.Errorf("a preloaded image was pulled under NeverVerifyPreloadedImages: %q", got)
	}
	checkEvents(t, drain(f.recorder), `Normal Pulled Container image "reg.io/preloaded:1" already present on machine and can be accessed by the pod`)

	f = newVerifyFixture(t, kc.AlwaysVerify, true, image)
	if _, _, err := f.ensure("ns1", "a", image, v1.PullIfNotPresent); err != nil {
		t.Fatal(err)
	}
	if got := f.attempts(); !reflect.DeepEqual(got, []string{"<anonymous>"}) {
		t.Errorf("AlwaysVerify: pulls %q, want one anonymous pull", got)
	}
	// Pulled anonymously: every pod of the node may use it now.
	if got := f.record(t, image).CredentialMapping["reg.io/preloaded"]; !got.NodePodsAccessible {
		t.Errorf("record of an anonymous pull: %+v", got)
	}
	if _, _, err := f.ensure("ns2", "b", image, v1.PullIfNotPresent); err != nil || len(f.attempts()) != 0 {
		t.Errorf("an anonymously pulled image was pulled again: %v", err)
	}

	// NeverVerify: the old behaviour.
	f = newVerifyFixture(t, kc.NeverVerify, false)
	if _, _, err := f.ensure("ns1", "a", privateImage, v1.PullIfNotPresent, regSecret("ns1", "regcred", "good")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.ensure("ns2", "b", privateImage, v1.PullIfNotPresent); err != nil {
		t.Errorf("NeverVerify: %v", err)
	}
}

// Intents frame every pull: written before it, removed after it whatever its outcome
// (also when the back-off stops it), so a restart only finds those of interrupted pulls.
func TestPullIntentsFrameEveryPull(t *testing.T) {
	f := newVerifyFixture(t, "", false)
	intent := intentFile(f.root, privateImage)
	for i := range 2 {
		_, _, err := f.ensure("ns2", "b", privateImage, v1.PullIfNotPresent)
		if want := []error{ErrImagePull, ErrImagePullBackOff}[i]; !errors.Is(err, want) {
			t.Fatalf("attempt %d: %v, want %v", i, err, want)
		}
		if exists(intent) {
			t.Fatalf("attempt %d left its intent", i)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(f.root, "image_manager", "pulled")); len(entries) != 0 {
		t.Errorf("failed pulls left records: %v", entries)
	}
}

// unreportingImages is an image service that does not say which credential pulled.
type unreportingImages struct {
	container.ImageService
	present map[string]bool
}

func (u *unreportingImages) GetImageRef(_ context.Context, spec container.ImageSpec) (string, error) {
	if u.present[spec.Image] {
		return spec.Image, nil
	}
	return "", nil
}

func (u *unreportingImages) PullImage(_ context.Context, spec container.ImageSpec, _ []v1.Secret, _ *runtimeapi.PodSandboxConfig) (string, error) {
	u.present[spec.Image] = true
	return spec.Image, nil
}

// When the image service cannot say which credential pulled, the record names none, and
// every pod must verify.
func TestUnknownPullCredentialsAreNotTrusted(t *testing.T) {
	root := t.TempDir()
	pulls, _ := newTestPullManager(t, root, mustPolicy(t, ""))
	images := &unreportingImages{present: map[string]bool{}}
	m := NewImageManager(record.NewFakeRecorder(10), images, Options{PullManager: pulls})
	pod := podIn("ns1", "a")
	if _, _, err := m.EnsureImageExists(context.Background(), nil, pod, privateImage, nil, nil, "", v1.PullIfNotPresent); err != nil {
		t.Fatal(err)
	}
	if r, ok := pulledRecordFile(t, root, privateImage); !ok || len(r.CredentialMapping) != 0 {
		t.Fatalf("record %+v, %v; want one without credentials", r, ok)
	}
	if _, _, err := m.EnsureImageExists(context.Background(), nil, podIn("ns2", "b"), privateImage, nil, nil, "", v1.PullNever); !errors.Is(err, ErrImageNeverPull) {
		t.Errorf("another pod used an image pulled with unknown credentials: %v", err)
	}
}

// fakeSecrets is a SecretGetter over a fixed set of secrets.
type fakeSecrets map[string]v1.Secret

func (f fakeSecrets) GetSecret(_ context.Context, namespace, name string) (*v1.Secret, error) {
	s, ok := f[namespace+"/"+name]
	if !ok {
		return nil, fmt.Errorf("secret %q not found", name)
	}
	return &s, nil
}

// With a SecretGetter, a call that passes no pull secrets uses the pod's
// spec.imagePullSecrets, read from the API server; those that cannot be read are named in
// upstream's FailedToRetrieveImagePullSecret event when the pull fails.
func TestPodPullSecretsAreResolved(t *testing.T) {
	f := newVerifyFixture(t, "", false)
	f.manager.(*imageManager).secrets = fakeSecrets{"ns1/regcred": regSecret("ns1", "regcred", "good")}
	withSecrets := func(uid string, names ...string) *v1.Pod {
		p := podIn("ns1", uid)
		for _, n := range names {
			p.Spec.ImagePullSecrets = append(p.Spec.ImagePullSecrets, v1.LocalObjectReference{Name: n})
		}
		return p
	}
	ensure := func(pod *v1.Pod) error {
		_, _, err := f.manager.EnsureImageExists(context.Background(), containerRef, pod, privateImage, nil, nil, "", v1.PullIfNotPresent)
		return err
	}
	if err := ensure(withSecrets("a", "", "missing", "regcred")); err != nil {
		t.Fatalf("pull with the resolved secret: %v", err)
	}
	if got := f.attempts(); !reflect.DeepEqual(got, []string{"good"}) {
		t.Errorf("pulls %q", got)
	}
	drain(f.recorder)
	if err := ensure(withSecrets("b", "regcred")); err != nil || len(f.attempts()) != 0 {
		t.Errorf("the resolved secret does not match the record: %v", err)
	}
	drain(f.recorder)
	if err := ensure(withSecrets("c", "missing")); !errors.Is(err, ErrImagePull) {
		t.Fatalf("pod without a readable secret: %v", err)
	}
	events := drain(f.recorder)
	want := "Warning FailedToRetrieveImagePullSecret Unable to retrieve some image pull secrets (missing); attempting to pull the image may not succeed."
	if !slices.Contains(events, want) {
		t.Errorf("events %q, want %q", events, want)
	}
}
