package images

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"
	kc "k8s.io/kubelet/config/v1beta1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

var recordTime = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func mustPolicy(t *testing.T, policy kc.ImagePullCredentialsVerificationPolicy, allowlist ...string) CredentialVerificationPolicy {
	t.Helper()
	p, err := NewCredentialVerificationPolicy(policy, allowlist)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// listedImages is an image service that only lists images (for the start-up pass over
// intents left behind).
type listedImages struct {
	container.ImageService
	images []container.Image
}

func (l listedImages) ListImages(context.Context) ([]container.Image, error) { return l.images, nil }

func newTestPullManager(t *testing.T, root string, policy CredentialVerificationPolicy, images ...container.Image) (*PullManager, *testclock.FakeClock) {
	t.Helper()
	clk := testclock.NewFakeClock(recordTime)
	m, err := NewPullManager(context.Background(), PullManagerOptions{
		RootDir: root, Policy: policy, Images: listedImages{images: images}, MaxPods: 110, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, clk
}

// podCreds returns fixed pod credentials and counts the calls.
type podCreds struct {
	secrets []kc.ImagePullSecret
	sa      *kc.ImagePullServiceAccount
	err     error
	calls   int
}

func (p *podCreds) get() ([]kc.ImagePullSecret, *kc.ImagePullServiceAccount, error) {
	p.calls++
	return p.secrets, p.sa, p.err
}

var (
	secretA      = kc.ImagePullSecret{UID: "uid-a", Namespace: "ns1", Name: "regcred", CredentialHash: "hash-good"}
	secretSameNS = kc.ImagePullSecret{UID: "uid-b", Namespace: "ns1", Name: "other", CredentialHash: "hash-other"}
	saA          = kc.ImagePullServiceAccount{UID: "sa-uid", Namespace: "ns1", Name: "builder"}
)

// recordPull runs an intent and a successful pull through the manager, as the image
// manager does.
func recordPull(t *testing.T, m *PullManager, image, ref string, creds *kc.ImagePullCredentials) {
	t.Helper()
	if err := m.RecordPullIntent(image); err != nil {
		t.Fatal(err)
	}
	m.RecordImagePulled(context.Background(), image, ref, creds)
}

func pulledRecordFile(t *testing.T, root, ref string) (*kc.ImagePulledRecord, bool) {
	t.Helper()
	f, err := newFSPullRecords(klog.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	r, ok, err := f.GetImagePulledRecord(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r, ok
}

// MustAttemptImagePull's verdict for each kind of record and pod credentials, under the
// default policy (NeverVerifyPreloadedImages) and the others.
func TestMustAttemptImagePullDecisions(t *testing.T) {
	const image, ref = "reg.io/team/app:1", "sha256:app"
	secretCreds := &kc.ImagePullCredentials{KubernetesSecrets: []kc.ImagePullSecret{secretA}}
	tests := []struct {
		name   string
		policy kc.ImagePullCredentialsVerificationPolicy
		// record, when set, is how the image was pulled (under recordImage, default image).
		record      *kc.ImagePullCredentials
		recordImage string
		pod         podCreds
		image       string // default image
		wantPull    bool
		wantErr     bool
		wantAsked   bool
	}{
		{name: "preloaded, default policy", pod: podCreds{}, wantPull: false},
		{name: "preloaded, AlwaysVerify", policy: kc.AlwaysVerify, wantPull: true},
		{name: "pulled with a secret, NeverVerify", policy: kc.NeverVerify, record: secretCreds, wantPull: false},
		{name: "pulled with a secret, the pod has it", record: secretCreds, pod: podCreds{secrets: []kc.ImagePullSecret{secretA}}, wantPull: false, wantAsked: true},
		{name: "pulled with a secret, the pod has none", record: secretCreds, wantPull: true, wantAsked: true},
		{name: "pulled with a secret, same namespace, another secret", record: secretCreds, pod: podCreds{secrets: []kc.ImagePullSecret{secretSameNS}}, wantPull: true, wantAsked: true},
		{name: "pulled with a secret, the same credential in another secret", record: secretCreds,
			pod: podCreds{secrets: []kc.ImagePullSecret{{UID: "uid-c", Namespace: "ns2", Name: "copy", CredentialHash: "hash-good"}}}, wantPull: false, wantAsked: true},
		{name: "pulled with a secret, the secret rotated", record: secretCreds,
			pod: podCreds{secrets: []kc.ImagePullSecret{{UID: "uid-a", Namespace: "ns1", Name: "regcred", CredentialHash: "hash-new"}}}, wantPull: false, wantAsked: true},
		{name: "pulled with a secret, same name, recreated (new UID and credential)", record: secretCreds,
			pod: podCreds{secrets: []kc.ImagePullSecret{{UID: "uid-z", Namespace: "ns1", Name: "regcred", CredentialHash: "hash-new"}}}, wantPull: true, wantAsked: true},
		{name: "a record with an empty hash matches no hash", record: &kc.ImagePullCredentials{KubernetesSecrets: []kc.ImagePullSecret{{UID: "u", Namespace: "n", Name: "s"}}},
			pod: podCreds{secrets: []kc.ImagePullSecret{{UID: "x", Namespace: "y", Name: "z"}}}, wantPull: true, wantAsked: true},
		{name: "pulled anonymously", record: &kc.ImagePullCredentials{NodePodsAccessible: true}, wantPull: false},
		{name: "pulled anonymously, AlwaysVerify", policy: kc.AlwaysVerify, record: &kc.ImagePullCredentials{NodePodsAccessible: true}, wantPull: false},
		{name: "pulled with unknown credentials", record: &kc.ImagePullCredentials{}, wantPull: true},
		{name: "pulled under another name", record: &kc.ImagePullCredentials{NodePodsAccessible: true}, recordImage: "reg.io/team/alias:1", wantPull: true},
		{name: "another tag of the same name", record: &kc.ImagePullCredentials{NodePodsAccessible: true}, image: "reg.io/team/app:2", wantPull: false},
		{name: "pulled with a service account, the pod runs as it", record: &kc.ImagePullCredentials{KubernetesServiceAccounts: []kc.ImagePullServiceAccount{saA}},
			pod: podCreds{sa: &saA}, wantPull: false, wantAsked: true},
		{name: "pulled with a service account, another one", record: &kc.ImagePullCredentials{KubernetesServiceAccounts: []kc.ImagePullServiceAccount{saA}},
			pod: podCreds{sa: &kc.ImagePullServiceAccount{UID: "sa-uid2", Namespace: "ns1", Name: "builder"}}, wantPull: true, wantAsked: true},
		{name: "the pod's secrets do not parse", record: secretCreds, pod: podCreds{err: errors.New("bad secret")}, wantPull: true, wantErr: true, wantAsked: true},
		{name: "allowlisted", policy: kc.NeverVerifyAllowlistedImages, record: secretCreds, wantPull: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var allowlist []string
			if tc.policy == kc.NeverVerifyAllowlistedImages {
				allowlist = []string{"reg.io/team/*"}
			}
			m, _ := newTestPullManager(t, t.TempDir(), mustPolicy(t, tc.policy, allowlist...))
			if tc.record != nil {
				recordImage := tc.recordImage
				if recordImage == "" {
					recordImage = image
				}
				recordPull(t, m, recordImage, ref, tc.record)
			}
			img := tc.image
			if img == "" {
				img = image
			}
			pod := tc.pod
			pull, err := m.MustAttemptImagePull(context.Background(), img, ref, pod.get)
			if pull != tc.wantPull || (err != nil) != tc.wantErr {
				t.Errorf("MustAttemptImagePull = %v, %v; want %v, error %v", pull, err, tc.wantPull, tc.wantErr)
			}
			if asked := pod.calls > 0; asked != tc.wantAsked {
				t.Errorf("pod credentials asked: %v, want %v", asked, tc.wantAsked)
			}
		})
	}
}

// A pod whose secret holds a credential that pulled the image (matched by hash), or whose
// pulling secret was rotated (matched by coordinates), is written into the record, so that
// the match holds on its own next time and survives restarts.
func TestMatchedSecretsAreAddedToTheRecord(t *testing.T) {
	root := t.TempDir()
	const image, ref = "reg.io/team/app:1", "sha256:app"
	m, clk := newTestPullManager(t, root, mustPolicy(t, ""))
	recordPull(t, m, image, ref, &kc.ImagePullCredentials{KubernetesSecrets: []kc.ImagePullSecret{secretA}})
	clk.Step(time.Hour)
	copyOfA := kc.ImagePullSecret{UID: "uid-c", Namespace: "ns2", Name: "copy", CredentialHash: "hash-good"}
	rotatedA := kc.ImagePullSecret{UID: "uid-a", Namespace: "ns1", Name: "regcred", CredentialHash: "hash-rotated"}
	for _, s := range []kc.ImagePullSecret{copyOfA, rotatedA} {
		pod := podCreds{secrets: []kc.ImagePullSecret{s}}
		if pull, err := m.MustAttemptImagePull(context.Background(), image, ref, pod.get); pull || err != nil {
			t.Fatalf("%+v: pull %v, %v", s, pull, err)
		}
	}
	r, ok := pulledRecordFile(t, root, ref)
	if !ok {
		t.Fatal("no record")
	}
	want := []kc.ImagePullSecret{rotatedA, copyOfA} // sorted by namespace, name, UID
	if got := r.CredentialMapping["reg.io/team/app"].KubernetesSecrets; !reflect.DeepEqual(got, want) {
		t.Errorf("secrets in the record %+v, want %+v", got, want)
	}
	if !r.LastUpdatedTime.Time.Equal(recordTime.Add(time.Hour)) {
		t.Errorf("lastUpdatedTime %v, want the merge's", r.LastUpdatedTime)
	}
	// A node-wide pull absorbs the secrets.
	recordPull(t, m, image, ref, &kc.ImagePullCredentials{NodePodsAccessible: true})
	if r, _ := pulledRecordFile(t, root, ref); !reflect.DeepEqual(r.CredentialMapping["reg.io/team/app"], kc.ImagePullCredentials{NodePodsAccessible: true}) {
		t.Errorf("after an anonymous pull: %+v", r.CredentialMapping)
	}
}

func intentFile(root, image string) string {
	return filepath.Join(root, "image_manager", "pulling", cacheFilename(image))
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Pull intents are counted: the file stays while any pull of the image runs, and while it
// does the image counts as pulled by the kubelet (so it is verified).
func TestPullIntentsAreCounted(t *testing.T) {
	root := t.TempDir()
	const image, ref = "reg.io/team/app:1", "sha256:app"
	m, _ := newTestPullManager(t, root, mustPolicy(t, ""))
	for range 2 {
		if err := m.RecordPullIntent(image); err != nil {
			t.Fatal(err)
		}
	}
	if !exists(intentFile(root, image)) {
		t.Fatal("no intent file during the pull")
	}
	// Meanwhile the image (say, preloaded under the same ID) is verified.
	if pull, _ := m.MustAttemptImagePull(context.Background(), image, ref, (&podCreds{}).get); !pull {
		t.Error("an image being pulled by the kubelet was taken for a preloaded one")
	}
	m.RecordImagePullFailed(context.Background(), image)
	if !exists(intentFile(root, image)) {
		t.Fatal("intent removed while another pull runs")
	}
	m.RecordImagePulled(context.Background(), image, ref, &kc.ImagePullCredentials{KubernetesSecrets: []kc.ImagePullSecret{secretA}})
	if exists(intentFile(root, image)) {
		t.Error("intent file left after the last pull ended")
	}
	if _, ok := pulledRecordFile(t, root, ref); !ok {
		t.Error("no pulled record")
	}
}

// After a restart, an intent left behind by an interrupted pull becomes, for an image the
// runtime has under that name, a record without credentials (every pod verifies) and
// goes; an intent for an image the runtime does not have stays and keeps the image
// counted as pulled by the kubelet. Records written before the restart are kept.
func TestIntentsLeftByAnInterruptedRunAreTurnedIntoRecords(t *testing.T) {
	root := t.TempDir()
	before, _ := newTestPullManager(t, root, mustPolicy(t, ""))
	recordPull(t, before, "reg.io/done:1", "sha256:done", &kc.ImagePullCredentials{KubernetesSecrets: []kc.ImagePullSecret{secretA}})
	for _, image := range []string{"reg.io/app:1", "reg.io/gone:1"} {
		if err := before.RecordPullIntent(image); err != nil {
			t.Fatal(err)
		}
	}
	// nodelet dies; the runtime finished one of the pulls.
	after, _ := newTestPullManager(t, root, mustPolicy(t, ""),
		container.Image{ID: "sha256:app", RepoTags: []string{"reg.io/app:1"}, RepoDigests: []string{"reg.io/app@sha256:" + strings.Repeat("1", 64)}},
		container.Image{ID: "sha256:unrelated", RepoTags: []string{"reg.io/unrelated:1"}},
	)
	r, ok := pulledRecordFile(t, root, "sha256:app")
	if !ok || len(r.CredentialMapping) != 0 {
		t.Fatalf("record of the interrupted pull: %+v, %v; want one without credentials", r, ok)
	}
	if exists(intentFile(root, "reg.io/app:1")) {
		t.Error("the intent of an image the runtime has is still there")
	}
	if !exists(intentFile(root, "reg.io/gone:1")) {
		t.Error("the intent of an image the runtime lacks was removed")
	}
	ctx := context.Background()
	pod := podCreds{secrets: []kc.ImagePullSecret{secretA}}
	if pull, _ := after.MustAttemptImagePull(ctx, "reg.io/app:1", "sha256:app", pod.get); !pull {
		t.Error("an image of an interrupted pull is usable without verification")
	}
	if pull, _ := after.MustAttemptImagePull(ctx, "reg.io/gone:1", "sha256:whatever", pod.get); !pull {
		t.Error("an image with an intent left is taken for a preloaded one")
	}
	if pull, _ := after.MustAttemptImagePull(ctx, "reg.io/done:1", "sha256:done", pod.get); pull {
		t.Error("the record written before the restart was lost")
	}
	if pull, _ := after.MustAttemptImagePull(ctx, "reg.io/unrelated:1", "sha256:unrelated", (&podCreds{}).get); pull {
		t.Error("a preloaded image must be verified")
	}
}

// PruneUnknownRecords deletes the records of images no longer on the node that were last
// updated before the collection started.
func TestPruneUnknownRecords(t *testing.T) {
	root := t.TempDir()
	m, clk := newTestPullManager(t, root, mustPolicy(t, ""))
	anon := &kc.ImagePullCredentials{NodePodsAccessible: true}
	recordPull(t, m, "reg.io/kept:1", "sha256:kept", anon)
	recordPull(t, m, "reg.io/removed:1", "sha256:removed", anon)
	clk.Step(time.Minute)
	gcStart := clk.Now()
	clk.Step(time.Second)
	// Pulled while the collection ran: not in its listing, but newer than its start.
	recordPull(t, m, "reg.io/new:1", "sha256:new", anon)

	m.PruneUnknownRecords(context.Background(), []string{"sha256:kept", "sha256:other"}, gcStart)
	for ref, want := range map[string]bool{"sha256:kept": true, "sha256:removed": false, "sha256:new": true} {
		if _, ok := pulledRecordFile(t, root, ref); ok != want {
			t.Errorf("record of %s on disk: %v, want %v", ref, ok, want)
		}
	}
	// The removed image, preloaded again later, counts as preloaded.
	if pull, _ := m.MustAttemptImagePull(context.Background(), "reg.io/removed:1", "sha256:removed", (&podCreds{}).get); pull {
		t.Error("the pruned record is still in memory")
	}
}

// countingRecords counts the reads that reach the files.
type countingRecords struct {
	pullRecordsAccessor
	mu          sync.Mutex
	gets, exist int
}

func (c *countingRecords) GetImagePulledRecord(ref string) (*kc.ImagePulledRecord, bool, error) {
	c.mu.Lock()
	c.gets++
	c.mu.Unlock()
	return c.pullRecordsAccessor.GetImagePulledRecord(ref)
}

func (c *countingRecords) ImagePullIntentExists(image string) (bool, error) {
	c.mu.Lock()
	c.exist++
	c.mu.Unlock()
	return c.pullRecordsAccessor.ImagePullIntentExists(image)
}

// The records are served from memory: while the cache holds every record a miss is an
// answer, and once it has had to evict one, misses are read from the files again.
func TestPullRecordsCache(t *testing.T) {
	root := t.TempDir()
	fsRecords, err := newFSPullRecords(klog.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"sha256:a", "sha256:b"} {
		if err := fsRecords.WriteImagePulledRecord(&kc.ImagePulledRecord{ImageRef: ref}); err != nil {
			t.Fatal(err)
		}
	}
	counting := &countingRecords{pullRecordsAccessor: fsRecords}
	c := newCachedPullRecords(klog.Background(), counting, 10, 10, 1)
	for _, ref := range []string{"sha256:a", "sha256:b", "sha256:unknown"} {
		if _, _, err := c.GetImagePulledRecord(ref); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _ := c.ImagePullIntentExists("reg.io/x:1"); ok || counting.gets != 0 || counting.exist != 0 {
		t.Errorf("an authoritative cache read the files: %d gets, %d intent checks", counting.gets, counting.exist)
	}
	// Written through: the file and the memory.
	if err := c.WriteImagePulledRecord(&kc.ImagePulledRecord{ImageRef: "sha256:c"}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := c.GetImagePulledRecord("sha256:c"); !ok || counting.gets != 0 {
		t.Error("a written record is not served from memory")
	}
	if _, ok, _ := fsRecords.GetImagePulledRecord("sha256:c"); !ok {
		t.Error("a written record is not on disk")
	}
	if err := c.DeleteImagePulledRecord("sha256:c"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := c.GetImagePulledRecord("sha256:c"); ok {
		t.Error("a deleted record is still served")
	}

	// Too small for the records: not authoritative, misses go to the files.
	small := newCachedPullRecords(klog.Background(), counting, 1, 1, 1)
	counting.gets = 0
	if _, ok, _ := small.GetImagePulledRecord("sha256:unknown"); ok || counting.gets != 1 {
		t.Errorf("a partial cache answered a miss itself (%d file reads)", counting.gets)
	}
	if _, ok, _ := small.GetImagePulledRecord("sha256:a"); !ok {
		t.Error("a record missing from a partial cache is not read from the files")
	}
}
