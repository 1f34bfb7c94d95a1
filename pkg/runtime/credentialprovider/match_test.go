package credentialprovider

import (
	"context"
	"reflect"
	"testing"
)

// TestURLsMatch has upstream's URLsMatchStr cases (keyring_test.go) and a few more.
func TestURLsMatch(t *testing.T) {
	tests := []struct {
		glob, target string
		want         bool
	}{
		{"*.kubernetes.io", "prefix.kubernetes.io", true},
		{"prefix.*.io", "prefix.kubernetes.io", true},
		{"prefix.kubernetes.*", "prefix.kubernetes.io", true},
		{"*-good.kubernetes.io", "prefix-good.kubernetes.io", true},
		{"*.kubernetes.io/blah", "prefix.kubernetes.io/blah", true},
		{"prefix.*.io/foo", "prefix.kubernetes.io/foo/bar", true},
		{"*.kubernetes.io:1111/blah", "prefix.kubernetes.io:1111/blah", true},
		{"prefix.*.io:1111/foo", "prefix.kubernetes.io:1111/foo/bar", true},
		{"kubernetes.io:8080", "kubernetes.io/image", false},
		{"kubernetes.io", "kubernetes.io:8080/image", false},
		{"kubernetes.io:8080", "kubernetes.io:8081/image", false},
		{"kubernetes.io/path", "kubernetes.io/other/image", false},
		{"127.0.0.1:5000", "127.0.0.1:5000/foo", true},
		{"127.0.0.*:5000", "127.0.0.9:5000/foo", true},
		{"docker.io", "docker.io/library/busybox", true},
		{"index.docker.io", "docker.io/library/busybox", false},
		{"*.kubernetes.io", "kubernetes.io", false},
		{"*.*.kubernetes.io", "prefix.kubernetes.io", false},
		{"*.*.kubernetes.io", "kubernetes.io", false},
		{"*kubernetes.io", "a.kubernetes.io", false},
		{"*kubernetes.io", "kubernetes.io", true},
		{"*.*.*.kubernetes.io", "a.b.c.kubernetes.io", true},
		{"kubernetes.io", "kubernetes.com", false},
		{"k*.io", "quay.io", false},
		{"*.kubernetes.io:1234/blah", "prefix.kubernetes.io:1111/blah", false},
		{"prefix.*.io/foo", "prefix.kubernetes.io:1111/foo/bar", false},
		// More: ECR-style globs, ports both ways, path prefixes being string prefixes.
		{"*.dkr.ecr.*.amazonaws.com", "123456789012.dkr.ecr.us-east-1.amazonaws.com/app", true},
		{"*.dkr.ecr.*.amazonaws.com", "123456789012.dkr.ecr.us-east-1.amazonaws.com.cn/app", false},
		{"registry.io", "registry.io:5000/app", false},
		{"registry.io:5000", "registry.io/app", false},
		{"registry.io/team", "registry.io/teammate/app", true},
		{"registry.io/team/", "registry.io/teammate/app", false},
		{"*.io", "docker.io/library/busybox", true},
		{"[", "a/b", false},
	}
	for _, tc := range tests {
		if got, _ := URLsMatch(tc.glob, tc.target); got != tc.want {
			t.Errorf("URLsMatch(%q, %q) = %t, want %t", tc.glob, tc.target, got, tc.want)
		}
	}
}

func TestRegistryKey(t *testing.T) {
	tests := map[string]string{
		"registry.io":                  "registry.io",
		"https://registry.io":          "registry.io",
		"http://registry.io:5000/":     "registry.io:5000",
		"https://index.docker.io/v1/":  "index.docker.io",
		"registry.io/v2/team":          "registry.io/team",
		"*.example.com/path":           "*.example.com/path",
		"registry.io/v1":               "registry.io/v1",
		"https://registry.io/team/app": "registry.io/team/app",
	}
	for in, want := range tests {
		if got, err := RegistryKey(in); err != nil || got != want {
			t.Errorf("RegistryKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := RegistryKey("%zz"); err == nil {
		t.Error("RegistryKey(%zz): no error")
	}
}

// TestKeyringOrder: most specific key first; under one key, credentials in provider
// order; non-matching keys left out; the Docker Hub fallback; invalid entries skipped.
func TestKeyringOrder(t *testing.T) {
	sa := &ServiceAccountRef{UID: "u", Namespace: "n", Name: "s"}
	var kr keyring
	var invalid []string
	logInvalid := func(entry string, _ error) { invalid = append(invalid, entry) }
	kr.add(authMap{
		"quay.io":                    {Username: "p1-host"},
		"https://quay.io/org/":       {Username: "p1-org"},
		"*.quay.io":                  {Username: "p1-sub"},
		"other.io":                   {Username: "p1-other"},
		"%zz":                        {Username: "bad"},
		"https://index.docker.io/v1": {Username: "hub"},
	}, nil, logInvalid)
	kr.add(authMap{"quay.io": {Username: "p2-host"}}, sa, logInvalid)

	got := kr.lookup("quay.io/org/app")
	want := []Credential{
		{Registry: "quay.io/org/", Username: "p1-org"},
		{Registry: "quay.io", Username: "p1-host"},
		{Registry: "quay.io", Username: "p2-host", ServiceAccount: sa},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lookup:\n got %+v\nwant %+v", got, want)
	}
	if !reflect.DeepEqual(invalid, []string{"%zz"}) {
		t.Errorf("invalid entries = %v", invalid)
	}
	// "https://index.docker.io/v1" keeps its path (/v1 is not /v1/), so Docker Hub images
	// match nothing and there is no index.docker.io key to fall back on.
	if got := kr.lookup("docker.io/library/busybox"); got != nil {
		t.Errorf("docker hub: %+v", got)
	}
	kr.add(authMap{"https://index.docker.io/v1/": {Username: "hub"}}, nil, logInvalid)
	if got := kr.lookup("docker.io/library/busybox"); len(got) != 1 || got[0].Username != "hub" {
		t.Errorf("docker hub fallback: %+v", got)
	}
	if got := kr.lookup("registry.example.com/app"); got != nil {
		t.Errorf("unmatched: %+v", got)
	}
}

// TestCredentialsAcrossProviders: providers whose matchImages do not match are not run,
// and the credentials of those that are are merged by registry key.
func TestCredentialsAcrossProviders(t *testing.T) {
	f := newFixture(t)
	f.plugin("fixed", `#!/bin/sh
cat >/dev/null
echo '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","auth":{"registry.example.com":{"username":"fixed","password":"x"}}}'
`)
	f.plugin("never", "#!/bin/sh\necho run >> \"$STATE/never\"\nexit 1\n")
	p := f.load(recorderConfig + `- name: fixed
  matchImages: ["registry.example.com"]
  defaultCacheDuration: 1m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
- name: never
  matchImages: ["other.io"]
  defaultCacheDuration: 1m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  env: [{name: STATE, value: "@STATE@"}]
`)
	f.respond(v1Response("Image", "", map[string][2]string{
		"registry.example.com/team": {"recorder-team", "y"},
		"registry.example.com":      {"recorder", "z"},
	}))
	got := p.Credentials(context.Background(), "registry.example.com/team/app", nil)
	var users []string
	for _, c := range got {
		users = append(users, c.Username)
	}
	if want := []string{"recorder-team", "recorder", "fixed"}; !reflect.DeepEqual(users, want) {
		t.Errorf("users = %v, want %v", users, want)
	}
	if f.readState("never") != "" {
		t.Error("a provider that does not match the image was run")
	}
	if got := p.Credentials(context.Background(), "quay.io/app", nil); got != nil || f.calls() != 1 {
		t.Errorf("unmatched image: %+v, %d runs", got, f.calls())
	}
}

func TestNilPlugins(t *testing.T) {
	var p *Plugins
	if got := p.Credentials(context.Background(), "registry.example.com/app", nil); got != nil {
		t.Errorf("credentials = %+v", got)
	}
	if got := p.Collectors(); got != nil {
		t.Errorf("collectors = %v", got)
	}
}
