package images

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

const sha = "sha256:e9ee0ffa9117588ad23ca6962c24bcb52e9848b90415f2f9616f73f73b09bf10"

func TestParseImageName(t *testing.T) {
	tests := []struct {
		image, repo, tag, digest string
		errSub                   string
	}{
		{image: "busybox", repo: "docker.io/library/busybox", tag: "latest"},
		{image: "busybox:1.36", repo: "docker.io/library/busybox", tag: "1.36"},
		{image: "library/busybox:1.36", repo: "docker.io/library/busybox", tag: "1.36"},
		{image: "docker.io/busybox", repo: "docker.io/library/busybox", tag: "latest"},
		{image: "index.docker.io/busybox", repo: "docker.io/library/busybox", tag: "latest"},
		{image: "index.docker.io/foo/bar", repo: "docker.io/foo/bar", tag: "latest"},
		{image: "foo/bar:v1", repo: "docker.io/foo/bar", tag: "v1"},
		{image: "registry.k8s.io/pause:3.10", repo: "registry.k8s.io/pause", tag: "3.10"},
		{image: "localhost/foo", repo: "localhost/foo", tag: "latest"},
		{image: "localhost:5000/a/b/c:t", repo: "localhost:5000/a/b/c", tag: "t"},
		{image: "127.0.0.1:5000/foo", repo: "127.0.0.1:5000/foo", tag: "latest"},
		{image: "[::1]:5000/foo:x", repo: "[::1]:5000/foo", tag: "x"},
		{image: "Example/foo", repo: "Example/foo", tag: "latest"},
		{image: "busybox@" + sha, repo: "docker.io/library/busybox", digest: sha},
		{image: "busybox:1.36@" + sha, repo: "docker.io/library/busybox", tag: "1.36", digest: sha},
		{image: "a.b/c__d-e.f:T_1.x-y", repo: "a.b/c__d-e.f", tag: "T_1.x-y"},
		{image: "Busybox", errSub: "invalid reference format: repository name (library/Busybox) must be lowercase"},
		{image: "example.com/Foo:1", errSub: "repository name (Foo) must be lowercase"},
		{image: "", errSub: "invalid reference format"},
		{image: "busybox:", errSub: "invalid reference format"},
		{image: "busybox:tag with space", errSub: "invalid reference format"},
		{image: "-foo", errSub: "invalid reference format"},
		{image: "foo//bar", errSub: "invalid reference format"},
		{image: "busybox:" + strings.Repeat("t", 129), errSub: "invalid reference format"},
		{image: strings.Repeat("a", 64), errSub: "cannot specify 64-byte hexadecimal strings"},
		{image: "example.com/" + strings.Repeat("a", 250), errSub: "must not be more than 255 characters"},
		{image: "busybox@sha256:abcd" + strings.Repeat("0", 30), errSub: "invalid checksum digest length"},
		{image: "busybox@sha256:" + strings.Repeat("A", 64), errSub: "invalid checksum digest format"},
		{image: "busybox@md5:" + strings.Repeat("0", 32), errSub: "unsupported digest algorithm"},
		{image: "busybox:1@Md5:" + strings.Repeat("0", 32), errSub: "invalid checksum digest format"},
		{image: "busybox@Md5:" + strings.Repeat("0", 32), errSub: "repository name (library/busybox@Md5) must be lowercase"},
	}
	for _, tc := range tests {
		repo, tag, digest, err := parseImageName(tc.image)
		if tc.errSub != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errSub) {
				t.Errorf("%q: err = %v, want one containing %q", tc.image, err, tc.errSub)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: unexpected error %v", tc.image, err)
			continue
		}
		if repo != tc.repo || tag != tc.tag || digest != tc.digest {
			t.Errorf("%q: got (%q, %q, %q), want (%q, %q, %q)", tc.image, repo, tag, digest, tc.repo, tc.tag, tc.digest)
		}
	}
}

func TestParseImageNameErrorText(t *testing.T) {
	_, _, _, err := parseImageName("Busybox")
	want := `couldn't parse image name "Busybox": invalid reference format: repository name (library/Busybox) must be lowercase`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %s", err, want)
	}
}

func TestApplyDefaultImageTag(t *testing.T) {
	tests := map[string]string{
		"busybox":                           "busybox:latest",
		"busybox:1.36":                      "busybox:1.36",
		"busybox:latest":                    "busybox:latest",
		"localhost:5000/foo":                "localhost:5000/foo:latest",
		"docker.io/library/busybox":         "docker.io/library/busybox:latest",
		"busybox@" + sha:                    "busybox@" + sha,
		"registry.k8s.io/pause:3.10@" + sha: "registry.k8s.io/pause:3.10@" + sha,
	}
	for in, want := range tests {
		got, err := applyDefaultImageTag(in)
		if err != nil || got != want {
			t.Errorf("applyDefaultImageTag(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := applyDefaultImageTag("UPPER"); err == nil {
		t.Error("applyDefaultImageTag accepted an invalid name")
	}
}

func TestDefaultPullPolicy(t *testing.T) {
	tests := map[string]v1.PullPolicy{
		"busybox":                 v1.PullAlways,
		"busybox:latest":          v1.PullAlways,
		"busybox:1.36":            v1.PullIfNotPresent,
		"busybox@" + sha:          v1.PullIfNotPresent,
		"busybox:latest@" + sha:   v1.PullAlways,
		"localhost:5000/foo":      v1.PullAlways,
		"localhost:5000/foo:5000": v1.PullIfNotPresent,
		"NOT VALID":               v1.PullIfNotPresent,
	}
	for image, want := range tests {
		if got := DefaultPullPolicy(image); got != want {
			t.Errorf("DefaultPullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}
