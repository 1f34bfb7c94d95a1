package images

import (
	"strings"
	"testing"

	kc "k8s.io/kubelet/config/v1beta1"
)

// Each policy's verdict for an image the kubelet pulled and for a preloaded one.
func TestCredentialVerificationPolicies(t *testing.T) {
	allowlist := []string{"registry.example/team/*", "registry.example/exact/app", "docker.io/library/busybox"}
	tests := []struct {
		policy    kc.ImagePullCredentialsVerificationPolicy
		allowlist []string
		image     string
		// verify for (pulled by the kubelet, preloaded)
		pulled, preloaded bool
	}{
		{policy: kc.NeverVerify, image: "reg.io/app:1", pulled: false, preloaded: false},
		{policy: kc.NeverVerifyPreloadedImages, image: "reg.io/app:1", pulled: true, preloaded: false},
		{policy: "", image: "reg.io/app:1", pulled: true, preloaded: false}, // the default
		{policy: kc.AlwaysVerify, image: "reg.io/app:1", pulled: true, preloaded: true},
		// NeverVerifyAllowlistedImages: the allowlist alone decides, pulled or not.
		{policy: kc.NeverVerifyAllowlistedImages, allowlist: allowlist, image: "registry.example/team/app:1", pulled: false, preloaded: false},
		{policy: kc.NeverVerifyAllowlistedImages, allowlist: allowlist, image: "registry.example/team/sub/app@sha256:" + strings.Repeat("a", 64), pulled: false, preloaded: false},
		{policy: kc.NeverVerifyAllowlistedImages, allowlist: allowlist, image: "registry.example/exact/app:2", pulled: false, preloaded: false},
		{policy: kc.NeverVerifyAllowlistedImages, allowlist: allowlist, image: "registry.example/exact/app-other:2", pulled: true, preloaded: true},
		{policy: kc.NeverVerifyAllowlistedImages, allowlist: allowlist, image: "registry.example/teamx/app:1", pulled: true, preloaded: true},
		{policy: kc.NeverVerifyAllowlistedImages, allowlist: allowlist, image: "registry.example/other:1", pulled: true, preloaded: true},
		// Names are compared as written: "busybox" is not "docker.io/library/busybox".
		{policy: kc.NeverVerifyAllowlistedImages, allowlist: allowlist, image: "docker.io/library/busybox:1.36", pulled: false, preloaded: false},
		{policy: kc.NeverVerifyAllowlistedImages, allowlist: allowlist, image: "busybox:1.36", pulled: true, preloaded: true},
		{policy: kc.NeverVerifyAllowlistedImages, image: "reg.io/app:1", pulled: true, preloaded: true},
	}
	for _, tc := range tests {
		p, err := NewCredentialVerificationPolicy(tc.policy, tc.allowlist)
		if err != nil {
			t.Fatalf("%s %v: %v", tc.policy, tc.allowlist, err)
		}
		if got := p.RequireCredentialVerificationForImage(tc.image, true); got != tc.pulled {
			t.Errorf("%q %s, pulled by the kubelet: verify = %v, want %v", tc.policy, tc.image, got, tc.pulled)
		}
		if got := p.RequireCredentialVerificationForImage(tc.image, false); got != tc.preloaded {
			t.Errorf("%q %s, preloaded: verify = %v, want %v", tc.policy, tc.image, got, tc.preloaded)
		}
	}
}

// The configuration is refused as upstream's validation refuses it.
func TestCredentialVerificationPolicyErrors(t *testing.T) {
	tests := []struct {
		policy    kc.ImagePullCredentialsVerificationPolicy
		allowlist []string
		want      string
	}{
		{policy: "Sometimes", want: `option "Sometimes" specified for imagePullCredentialsVerificationPolicy`},
		{policy: kc.AlwaysVerify, allowlist: []string{"reg.io/app"}, want: "can't set `preloadedImagesVerificationAllowlist`"},
		{policy: "", allowlist: []string{"reg.io/app"}, want: "can't set `preloadedImagesVerificationAllowlist`"},
		{policy: kc.NeverVerifyAllowlistedImages, allowlist: []string{" reg.io/app"}, want: "leading/trailing spaces are not allowed"},
		{policy: kc.NeverVerifyAllowlistedImages, allowlist: []string{"reg.io/*/app"}, want: "only patterns ending with '/*' are allowed"},
		{policy: kc.NeverVerifyAllowlistedImages, allowlist: []string{"reg.io/app*"}, want: "only patterns ending with '/*' are allowed"},
		{policy: kc.NeverVerifyAllowlistedImages, allowlist: []string{"/*"}, want: "at least registry hostname is required"},
		{policy: kc.NeverVerifyAllowlistedImages, allowlist: []string{"reg.io/app:1"}, want: "neither tag nor digest is accepted"},
		{policy: kc.NeverVerifyAllowlistedImages, allowlist: []string{"Reg.io/App"}, want: "failed to parse as an image name"},
	}
	for _, tc := range tests {
		_, err := NewCredentialVerificationPolicy(tc.policy, tc.allowlist)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %q: err = %v, want %q", tc.policy, tc.allowlist, err, tc.want)
		}
	}
}

func TestTrimImageTagDigest(t *testing.T) {
	digest := "sha256:" + strings.Repeat("b", 64)
	for in, want := range map[string]string{
		"busybox":                          "busybox",
		"busybox:1.36":                     "busybox",
		"docker.io/library/busybox:1.36":   "docker.io/library/busybox",
		"localhost:5000/app":               "localhost:5000/app",
		"localhost:5000/app:v1":            "localhost:5000/app",
		"reg.io/team/app@" + digest:        "reg.io/team/app",
		"reg.io/team/app:v1@" + digest:     "reg.io/team/app",
		"127.0.0.1:5000/nodelet/private:1": "127.0.0.1:5000/nodelet/private",
	} {
		if got, err := trimImageTagDigest(in); err != nil || got != want {
			t.Errorf("trimImageTagDigest(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := trimImageTagDigest("reg.io/Upper/case"); err == nil {
		t.Error("an upper-case repository parsed")
	}
}
