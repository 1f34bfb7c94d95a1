package registry

import (
	"archive/tar"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

func get(t *testing.T, url, user, password string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", MediaTypeManifest)
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

func TestServesTestImageBehindBasicAuth(t *testing.T) {
	r := New("user", "secret")
	defer r.Close()
	digest, err := r.AddTestImage("team/app", "v1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, r.URL()+"/v2/", "", ""); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("anonymous /v2/: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if resp, _ := get(t, r.URL()+"/v2/", "user", "wrong"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d", resp.StatusCode)
	}
	resp, body := get(t, r.URL()+"/v2/team/app/manifests/v1", "user", "secret")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != digest || digestOf(body) != digest {
		t.Fatalf("manifest by tag: %d %q", resp.StatusCode, resp.Header.Get("Docker-Content-Digest"))
	}
	if resp, _ := get(t, r.URL()+"/v2/team/app/manifests/"+digest, "user", "secret"); resp.StatusCode != http.StatusOK {
		t.Fatalf("manifest by digest: %d", resp.StatusCode)
	}
	var m struct {
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := json.Unmarshal(body, &m); err != nil || len(m.Layers) != 1 {
		t.Fatalf("manifest %s: %v", body, err)
	}
	if resp, blob := get(t, r.URL()+"/v2/team/app/blobs/"+m.Layers[0].Digest, "user", "secret"); resp.StatusCode != http.StatusOK || digestOf(blob) != m.Layers[0].Digest {
		t.Fatalf("layer: %d", resp.StatusCode)
	}
	if resp, _ := get(t, r.URL()+"/v2/team/app/manifests/v2", "user", "secret"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown tag: %d", resp.StatusCode)
	}
	if s := r.Stats(); s.Unauthorized != 2 || s.WrongCredentials != 1 || s.ManifestGets != 2 {
		t.Errorf("stats %+v", s)
	}
	other, _ := r.AddTestImage("team/app", "v2", "other content")
	if other == digest {
		t.Error("different content gave the same image")
	}
}

func TestServesOCIArchive(t *testing.T) {
	manifest := []byte(`{"schemaVersion":2}`)
	index, _ := json.Marshal(map[string]any{"manifests": []any{map[string]string{"mediaType": MediaTypeManifest, "digest": digestOf(manifest)}}})
	archive := filepath.Join(t.TempDir(), "img.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for name, data := range map[string][]byte{"index.json": index, "blobs/sha256/" + digestOf(manifest)[len("sha256:"):]: manifest} {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg})
		_, _ = tw.Write(data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	r := New("", "")
	defer r.Close()
	digest, err := r.AddOCIArchive(archive, "lib/img", "1")
	if err != nil || digest != digestOf(manifest) {
		t.Fatalf("AddOCIArchive = %q, %v", digest, err)
	}
	resp, body := get(t, r.URL()+"/v2/lib/img/manifests/1", "", "")
	if resp.StatusCode != http.StatusOK || string(body) != string(manifest) || resp.Header.Get("Content-Type") != MediaTypeManifest {
		t.Fatalf("manifest: %d %s %q", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
}
