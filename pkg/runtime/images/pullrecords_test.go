package images

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	kc "k8s.io/kubelet/config/v1beta1"
)

// Files as upstream's kubelet v1.37 writes and reads them (its pullmanager/testdata):
// name → content. v1beta1 files as its encoder writes them end with a newline; upstream's
// hand-written v1beta1 test files do not, and must be read all the same.
var (
	upstreamIntentAlpha = fileFixture{"sha256-6da3dced7eccc7ad0189517c31ec2235b50f730449d738d91525721f7e027fd4",
		`{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1alpha1","image":"docker.io/testing/test-alpha:latest"}` + "\n"}
	upstreamIntentBeta = fileFixture{"sha256-ee81caca15454863449fb55a1d942904d56d5ed9f9b20a7cb3453944ea2c7e11",
		`{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"repo.repo/test/test:v1"}`}
	upstreamRecordSecret = fileFixture{"sha256-b3c0cc4278800b03a308ceb2611161430df571ca733122f0a40ac8b9792a9064",
		`{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"2024-10-21T12:26:40Z","imageRef":"testimageref","credentialMapping":{"docker.io/testing/test":{"kubernetesSecrets":[{"uid":"testsecretuid","namespace":"default","name":"pull-secret","credentialHash":"testsecrethash"}]}}}`}
	upstreamRecordAnonAlpha = fileFixture{"sha256-dd1dd8dc6a329b7e1c2e43951302b23a047cb20fd3e10090e4ce7e8396035405",
		`{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1","lastUpdatedTime":"2025-06-21T12:26:40Z","imageRef":"testimage-anonpull-alpha","credentialMapping":{"docker.io/testing/test":{"nodePodsAccessible":true}}}` + "\n"}
	upstreamRecordSAAlpha = fileFixture{"sha256-917e8b3439bf8a7a6f37ffd2d2ddfdfafac8a251bf214a0be39675742b420b1a",
		`{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1","lastUpdatedTime":"2024-10-21T12:26:40Z","imageRef":"testimageref-sa","credentialMapping":{"docker.io/testing/test":{"kubernetesServiceAccounts":[{"uid":"test-sa-uid","namespace":"default","name":"test-sa"}]}}}` + "\n"}
	upstreamRecordBroken = fileFixture{"sha256-e766e4624f9bc4d3847d6c5b470d9d5362cc8d0c250bd9572daf95278e044263",
		`{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1","lastUpdatedTime":"2024-10-21T12:26:40Z","imageRef":"testbrokenrecord":"credentialMapping":{}}`}
)

type fileFixture struct{ name, content string }

func writeFixtures(t *testing.T, dir string, files ...fileFixture) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestCacheFilenameIsUpstreams(t *testing.T) {
	for key, name := range map[string]string{
		"docker.io/testing/test-alpha:latest": upstreamIntentAlpha.name,
		"repo.repo/test/test:v1":              upstreamIntentBeta.name,
		"testimageref":                        upstreamRecordSecret.name,
		"testimage-anonpull-alpha":            upstreamRecordAnonAlpha.name,
	} {
		if got := cacheFilename(key); got != name {
			t.Errorf("cacheFilename(%q) = %s, want %s", key, got, name)
		}
	}
}

// Intents and records are written byte for byte as upstream writes them, in its
// directories, with its permissions.
func TestPullRecordFilesAreWrittenAsUpstream(t *testing.T) {
	root := t.TempDir()
	f, err := newFSPullRecords(klog.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"image_manager/pulling", "image_manager/pulled"} {
		if info, err := os.Stat(filepath.Join(root, dir)); err != nil || !info.IsDir() || info.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v, %v", dir, info, err)
		}
	}
	if err := f.WriteImagePullIntent("repo.repo/test/test:v1"); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "image_manager", "pulling", upstreamIntentBeta.name)
	if got := readFile(t, path); got != upstreamIntentBeta.content+"\n" {
		t.Errorf("intent file:\n%s\nwant\n%s", got, upstreamIntentBeta.content)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Errorf("intent mode %v, want 0600", info.Mode())
	}

	record := &kc.ImagePulledRecord{
		LastUpdatedTime: metav1.NewTime(time.Date(2024, 10, 21, 12, 26, 40, 0, time.UTC)),
		ImageRef:        "testimageref",
		CredentialMapping: map[string]kc.ImagePullCredentials{"docker.io/testing/test": {KubernetesSecrets: []kc.ImagePullSecret{
			{UID: "testsecretuid", Namespace: "default", Name: "pull-secret", CredentialHash: "testsecrethash"},
		}}},
	}
	if err := f.WriteImagePulledRecord(record); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "image_manager", "pulled", upstreamRecordSecret.name)); got != upstreamRecordSecret.content+"\n" {
		t.Errorf("record file:\n%s\nwant\n%s", got, upstreamRecordSecret.content)
	}
	// An anonymous pull: nodePodsAccessible; a record without credentials has no mapping.
	for ref, want := range map[string]string{
		"anon": `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"2024-10-21T12:26:40Z","imageRef":"anon","credentialMapping":{"reg.io/app":{"nodePodsAccessible":true}}}`,
		"none": `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"2024-10-21T12:26:40Z","imageRef":"none"}`,
	} {
		r := &kc.ImagePulledRecord{LastUpdatedTime: record.LastUpdatedTime, ImageRef: ref, CredentialMapping: map[string]kc.ImagePullCredentials{}}
		if ref == "anon" {
			r.CredentialMapping["reg.io/app"] = kc.ImagePullCredentials{NodePodsAccessible: true}
		}
		if err := f.WriteImagePulledRecord(r); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, filepath.Join(root, "image_manager", "pulled", cacheFilename(ref))); got != want+"\n" {
			t.Errorf("%s record:\n%s\nwant\n%s", ref, got, want)
		}
	}
	// No temporary file is left behind.
	entries, _ := os.ReadDir(filepath.Join(root, "image_manager", "pulled"))
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left", e.Name())
		}
	}

	if err := f.DeleteImagePullIntent("repo.repo/test/test:v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("intent file still there: %v", err)
	}
	if err := f.DeleteImagePulledRecord("testimageref"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := f.GetImagePulledRecord("testimageref"); ok {
		t.Error("record still there after delete")
	}
	if err := f.DeleteImagePulledRecord("never-written"); err != nil {
		t.Errorf("deleting a missing record: %v", err)
	}
}

// Upstream's files are read, v1alpha1 ones are rewritten as v1beta1 at start (upstream's
// recordsVersionMigration), and files that do not decode are reported, not trusted.
func TestPullRecordFilesFromUpstreamAreReadAndMigrated(t *testing.T) {
	root := t.TempDir()
	pulling := filepath.Join(root, "image_manager", "pulling")
	pulled := filepath.Join(root, "image_manager", "pulled")
	writeFixtures(t, pulling, upstreamIntentAlpha, upstreamIntentBeta, fileFixture{"README", "not a record"},
		fileFixture{upstreamIntentBeta.name + ".tmp", "half-written"})
	writeFixtures(t, pulled, upstreamRecordSecret, upstreamRecordAnonAlpha, upstreamRecordSAAlpha, upstreamRecordBroken)

	f, err := newFSPullRecords(klog.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	// Migrated: the same content under v1beta1, with the encoder's newline.
	for dir, fx := range map[string]fileFixture{pulling: upstreamIntentAlpha, pulled: upstreamRecordAnonAlpha} {
		want := strings.Replace(fx.content, "kubelet.config.k8s.io/v1alpha1", "kubelet.config.k8s.io/v1beta1", 1)
		if got := readFile(t, filepath.Join(dir, fx.name)); got != want {
			t.Errorf("%s after migration:\n%s\nwant\n%s", fx.name, got, want)
		}
	}
	// v1beta1 files are left as they are.
	if got := readFile(t, filepath.Join(pulled, upstreamRecordSecret.name)); got != upstreamRecordSecret.content {
		t.Errorf("a v1beta1 record was rewritten: %s", got)
	}

	intents, err := f.ListImagePullIntents()
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, i := range intents {
		images = append(images, i.Image)
	}
	if want := []string{"docker.io/testing/test-alpha:latest", "repo.repo/test/test:v1"}; !reflect.DeepEqual(images, want) {
		t.Errorf("intents %q, want %q (README and .tmp files ignored)", images, want)
	}
	for image, want := range map[string]bool{"repo.repo/test/test:v1": true, "docker.io/testing/test-alpha:latest": true, "repo.repo/test/test:v2": false} {
		if got, err := f.ImagePullIntentExists(image); err != nil || got != want {
			t.Errorf("ImagePullIntentExists(%q) = %v, %v; want %v", image, got, err, want)
		}
	}

	r, ok, err := f.GetImagePulledRecord("testimageref")
	if err != nil || !ok {
		t.Fatalf("GetImagePulledRecord = %v, %v", ok, err)
	}
	want := kc.ImagePullCredentials{KubernetesSecrets: []kc.ImagePullSecret{{UID: "testsecretuid", Namespace: "default", Name: "pull-secret", CredentialHash: "testsecrethash"}}}
	if got := r.CredentialMapping["docker.io/testing/test"]; !reflect.DeepEqual(got, want) || !r.LastUpdatedTime.Equal(&metav1.Time{Time: time.Date(2024, 10, 21, 12, 26, 40, 0, time.UTC)}) {
		t.Errorf("record %+v", r)
	}
	r, ok, err = f.GetImagePulledRecord("testimageref-sa")
	wantSA := []kc.ImagePullServiceAccount{{UID: "test-sa-uid", Namespace: "default", Name: "test-sa"}}
	if err != nil || !ok || !reflect.DeepEqual(r.CredentialMapping["docker.io/testing/test"].KubernetesServiceAccounts, wantSA) {
		t.Errorf("service account record = %+v, %v, %v", r, ok, err)
	}
	if _, ok, err := f.GetImagePulledRecord("testbrokenrecord"); !ok || err == nil {
		t.Errorf("broken record: exists %v, err %v; want exists with an error", ok, err)
	}
	records, err := f.ListImagePulledRecords()
	if err == nil || len(records) != 3 {
		t.Errorf("ListImagePulledRecords = %d records, err %v; want 3 and the broken file's error", len(records), err)
	}
}

// Strict decoding, as upstream: unknown fields, other kinds, and a file whose content
// names another key than its name are not records.
func TestPullRecordFilesAreDecodedStrictly(t *testing.T) {
	root := t.TempDir()
	f, err := newFSPullRecords(klog.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	pulled := filepath.Join(root, "image_manager", "pulled")
	writeFixtures(t, pulled,
		fileFixture{cacheFilename("unknown-field"), `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","imageRef":"unknown-field","lastUpdatedTime":null,"extra":1}`},
		fileFixture{cacheFilename("other-kind"), `{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"other-kind"}`},
		fileFixture{cacheFilename("mismatch"), `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","imageRef":"something-else","lastUpdatedTime":null}`},
	)
	for _, ref := range []string{"unknown-field", "other-kind"} {
		if _, ok, err := f.GetImagePulledRecord(ref); !ok || err == nil {
			t.Errorf("%s: exists %v, err %v; want an error", ref, ok, err)
		}
	}
	if r, ok, err := f.GetImagePulledRecord("mismatch"); ok || r != nil || err != nil {
		t.Errorf("mismatched record = %+v, %v, %v; want none", r, ok, err)
	}
	writeFixtures(t, filepath.Join(root, "image_manager", "pulling"),
		fileFixture{cacheFilename("img:1"), `{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"img:2"}`})
	if ok, err := f.ImagePullIntentExists("img:1"); ok || err != nil {
		t.Errorf("an intent naming another image counts: %v, %v", ok, err)
	}
}
