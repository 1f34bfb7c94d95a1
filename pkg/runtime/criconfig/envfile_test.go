package criconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestParseEnvFileAsUpstream(t *testing.T) {
	file := "# a comment\n\n  DB_HOST='db.local'  # trailing comment\nMULTI='line one\nline two'\nEMPTY=''\nSPACED= 'ignored'\nURL='a=b#c'\n"
	for key, want := range map[string]string{
		"DB_HOST": "db.local", "MULTI": "line one\nline two", "EMPTY": "", "SPACED": "", "URL": "a=b#c", "MISSING": "",
	} {
		got, err := parseEnvFile(strings.NewReader(file), key)
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", key, got, err, want)
		}
	}
	for body, want := range map[string]string{
		"NOEQUALS\n":           "line 1: missing '='",
		"=x\n":                 "line 1: empty variable name",
		"A ='x'\n":             "line 1: whitespace before '=' is not allowed",
		"A=x\n":                "line 1: value must be enclosed in single quotes",
		"A='x' y\n":            "line 1: unexpected content after closing quote",
		"\nA='open\nstill\n":   "starting at line 2: unclosed single quote",
		"A='1'\nB='2\n3'\nC\n": "line 4: missing '='",
	} {
		_, err := parseEnvFile(strings.NewReader(body), "Z")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}

func TestSecureJoinStaysInTheVolume(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "dir"), 0o755))
	must(os.Symlink("/etc", filepath.Join(root, "abs")))
	must(os.Symlink("../../..", filepath.Join(root, "dir", "up")))
	must(os.Symlink("dir", filepath.Join(root, "rel")))
	for in, want := range map[string]string{
		"dir/env": "dir/env", "abs/passwd": "etc/passwd", "dir/up/x": "x", "rel/env": "dir/env", "../../x": "x",
	} {
		got, err := secureJoin(root, in)
		if err != nil || got != filepath.Join(root, want) {
			t.Errorf("secureJoin(%q) = %q, %v; want %q", in, got, err, filepath.Join(root, want))
		}
	}
	must(os.Symlink("loop", filepath.Join(root, "loop")))
	if _, err := secureJoin(root, "loop/x"); err == nil {
		t.Error("a symlink loop was followed forever")
	}
}

func TestFileKeyValue(t *testing.T) {
	podDir := t.TempDir()
	vol := filepath.Join(podDir, "volumes", "kubernetes.io~empty-dir", "config")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "app.env"), []byte("TOKEN='s3cret'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/os-release", filepath.Join(vol, "host.env")); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	ref := func(volume, path, key string, optional bool) *v1.FileKeySelector {
		return &v1.FileKeySelector{VolumeName: volume, Path: path, Key: key, Optional: ptr.To(optional)}
	}
	if v, skip, err := fileKeyValue(pod, ref("config", "app.env", "TOKEN", false), podDir); v != "s3cret" || skip || err != nil {
		t.Errorf("TOKEN = %q, %v, %v", v, skip, err)
	}
	if _, skip, err := fileKeyValue(pod, ref("config", "app.env", "OTHER", true), podDir); !skip || err != nil {
		t.Errorf("optional missing key: skip %v, %v", skip, err)
	}
	for _, tc := range []struct {
		ref  *v1.FileKeySelector
		want string
	}{
		{ref("config", "app.env", "OTHER", false), `environment variable key "OTHER" not found in file "` + filepath.Join(vol, "app.env") + `"`},
		{ref("config", "missing.env", "TOKEN", true), "couldn't parse env file"},
		{ref("config", "host.env", "ID", false), "couldn't parse env file"},
		{ref("other", "app.env", "TOKEN", false), `cannot find the volume "other" referenced by FileKeyRef`},
	} {
		if _, _, err := fileKeyValue(pod, tc.ref, podDir); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", *tc.ref, err, tc.want)
		}
	}
}
