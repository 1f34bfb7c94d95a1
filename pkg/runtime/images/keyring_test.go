package images

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testclock "k8s.io/utils/clock/testing"
)

// users lists the usernames of creds, to compare lookups compactly.
func users(creds []TrackedAuthConfig) []string {
	var out []string
	for _, c := range creds {
		out = append(out, c.Username)
	}
	return out
}

func entry(user string) DockerConfigEntry {
	return DockerConfigEntry{Username: user, Password: user + "-pw"}
}

func TestBasicKeyringLookup(t *testing.T) {
	k := &BasicKeyring{}
	k.Add(DockerConfig{
		"quay.io":                     entry("quay"),
		"https://quay.io/org":         entry("quay-org"),
		"quay.io/org/team":            entry("quay-org-team"),
		"http://127.0.0.1:5000/v2/":   entry("local5000"),
		"*.example.com":               entry("glob"),
		"https://index.docker.io/v1/": entry("hub"),
		"registry-1.docker.io":        entry("registry-1"),
	})
	tests := []struct {
		repo string
		want []string
	}{
		{"quay.io/org/team/img", []string{"quay-org-team", "quay-org", "quay"}},
		{"quay.io/org/img", []string{"quay-org", "quay"}},
		{"quay.io/other/img", []string{"quay"}},
		{"127.0.0.1:5000/foo", []string{"local5000"}},
		{"127.0.0.1:5001/foo", nil},
		{"127.0.0.1/foo", nil},
		{"reg.example.com/foo", []string{"glob"}},
		{"example.com/foo", nil},
		{"a.reg.example.com/foo", nil},
		// Docker Hub images fall back to the index.docker.io credentials; like upstream,
		// registry-1.docker.io (the Hub's API host) is not treated as an alias.
		{"docker.io/library/busybox", []string{"hub"}},
		{"docker.io/someone/tool", []string{"hub"}},
		{"gcr.io/foo", nil},
	}
	for _, tc := range tests {
		creds, ok := k.Lookup(tc.repo)
		if got := users(creds); !reflect.DeepEqual(got, tc.want) || ok != (len(tc.want) > 0) {
			t.Errorf("Lookup(%q) = %v, %v; want %v", tc.repo, got, ok, tc.want)
		}
	}
}

func TestDockerHubFallbackOnlyWhenNothingMatches(t *testing.T) {
	k := &BasicKeyring{}
	k.Add(DockerConfig{"docker.io": entry("docker-io"), "index.docker.io": entry("hub")})
	creds, _ := k.Lookup("docker.io/library/busybox")
	if got := users(creds); !reflect.DeepEqual(got, []string{"docker-io"}) {
		t.Fatalf("got %v, want only the docker.io entry", got)
	}
}

func dockerConfigJSONSecret(name, body string) v1.Secret {
	return v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid")},
		Type:       v1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{v1.DockerConfigJsonKey: []byte(body)},
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestKeyringFromSecrets(t *testing.T) {
	unpadded := strings.TrimRight(b64("bob:pw2"), "=")
	secrets := []v1.Secret{
		{Type: v1.SecretTypeOpaque, Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{"reg.io":{"username":"opaque"}}}`)}},
		dockerConfigJSONSecret("a", `{"auths":{"reg.io":{"auth":"`+b64("alice:pw:with:colons")+`"},"other.io":{"username":"carol","password":"pw3"}}}`),
		{Type: v1.SecretTypeDockercfg, Data: map[string][]byte{v1.DockerConfigKey: []byte(`{"reg.io":{"auth":"` + unpadded + `","email":"b@x"}}`)}},
		dockerConfigJSONSecret("empty", ""),
	}
	node := &BasicKeyring{}
	node.Add(DockerConfig{"reg.io": entry("node")})
	k, err := KeyringFromSecrets(secrets, node)
	if err != nil {
		t.Fatal(err)
	}
	creds, ok := k.Lookup("reg.io/app")
	if !ok {
		t.Fatal("no credentials for reg.io")
	}
	want := []AuthConfig{
		{Username: "alice", Password: "pw:with:colons"},
		{Username: "bob", Password: "pw2", Email: "b@x"},
		{Username: "node", Password: "node-pw"},
	}
	var got []AuthConfig
	for _, c := range creds {
		got = append(got, c.AuthConfig)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// Each credential says where it came from: the secret's coordinates, or nothing for
	// the node's own.
	if s := creds[0].Source; s == nil || *s.Secret != (SecretCoordinates{UID: "a-uid", Namespace: "ns", Name: "a"}) {
		t.Errorf("alice's source = %+v, want secret ns/a", s)
	}
	if creds[2].Source != nil {
		t.Errorf("the node's credential has source %+v", creds[2].Source)
	}
	if creds, _ := k.Lookup("other.io/x"); !reflect.DeepEqual(users(creds), []string{"carol"}) {
		t.Errorf("other.io: got %v", users(creds))
	}
}

func TestKeyringFromSecretsWithoutDockerSecrets(t *testing.T) {
	node := &BasicKeyring{}
	k, err := KeyringFromSecrets([]v1.Secret{{Type: v1.SecretTypeOpaque}}, node)
	if err != nil || k != Keyring(node) {
		t.Fatalf("got %v, %v; want the fallback keyring itself", k, err)
	}
}

func TestKeyringFromSecretsErrors(t *testing.T) {
	for name, body := range map[string]string{
		"bad json":     `{"auths":`,
		"auth no sep":  `{"auths":{"reg.io":{"auth":"` + b64("nocolon") + `"}}}`,
		"auth not b64": `{"auths":{"reg.io":{"auth":"!!!"}}}`,
	} {
		if _, err := KeyringFromSecrets([]v1.Secret{dockerConfigJSONSecret(name, body)}, nil); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestDockerConfigEntryRoundTrip(t *testing.T) {
	in := DockerConfig{"reg.io": {Username: "u", Password: "p:q", Email: "e"}}
	data, err := json.Marshal(DockerConfigJSON{Auths: in})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), b64("u:p:q")) {
		t.Errorf("auth field missing from %s", data)
	}
	k, err := KeyringFromSecrets([]v1.Secret{dockerConfigJSONSecret("s", string(data))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if creds, _ := k.Lookup("reg.io/x"); len(creds) != 1 || creds[0].Password != "p:q" {
		t.Fatalf("got %+v", creds)
	}
}

func TestNodeKeyringReadsAndCachesFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(user string) {
		t.Helper()
		body := `{"auths":{"nodelet-keyring-test.invalid":{"auth":"` + b64(user+":pw") + `"}}}`
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	clk := testclock.NewFakeClock(time.Now())
	k := NewNodeKeyring(dir)
	k.clock = clk
	if _, ok := k.Lookup("nodelet-keyring-test.invalid/x"); ok {
		t.Fatal("credentials found before any file exists")
	}
	write("first")
	if _, ok := k.Lookup("nodelet-keyring-test.invalid/x"); ok {
		t.Fatal("file re-read before the cache expired")
	}
	clk.Step(nodeConfigLifetime + time.Second)
	if creds, _ := k.Lookup("nodelet-keyring-test.invalid/x"); !reflect.DeepEqual(users(creds), []string{"first"}) {
		t.Fatalf("got %v, want first", users(creds))
	}
	write("second")
	clk.Step(nodeConfigLifetime + time.Second)
	if creds, _ := k.Lookup("nodelet-keyring-test.invalid/x"); !reflect.DeepEqual(users(creds), []string{"second"}) {
		t.Fatalf("got %v, want second", users(creds))
	}
}

func TestNodeKeyringFallsBackToDockercfg(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".dockercfg"), []byte(`{"nodelet-keyring-test.invalid":{"username":"legacy","password":"pw"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	k := NewNodeKeyring(dir)
	if creds, _ := k.Lookup("nodelet-keyring-test.invalid/x"); !reflect.DeepEqual(users(creds), []string{"legacy"}) {
		t.Fatalf("got %v, want legacy", users(creds))
	}
}
