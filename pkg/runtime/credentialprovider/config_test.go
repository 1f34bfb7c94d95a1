package credentialprovider

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	"k8s.io/utils/ptr"
)

func TestReadConfigVersions(t *testing.T) {
	minutes := func(m int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(m) * time.Minute} }
	tests := map[string][]kubeletconfigv1.CredentialProvider{
		"v1.yaml": {{
			Name:                 "ecr-credential-provider",
			MatchImages:          []string{"*.dkr.ecr.*.amazonaws.com", "*.dkr.ecr.*.amazonaws.com.cn"},
			DefaultCacheDuration: minutes(12 * 60),
			APIVersion:           "credentialprovider.kubelet.k8s.io/v1",
			Args:                 []string{"get-credentials"},
			Env:                  []kubeletconfigv1.ExecEnvVar{{Name: "AWS_PROFILE", Value: "node"}},
			TokenAttributes: &kubeletconfigv1.ServiceAccountTokenAttributes{
				ServiceAccountTokenAudience:          "sts.amazonaws.com",
				CacheType:                            kubeletconfigv1.ServiceAccountServiceAccountTokenCacheType,
				RequireServiceAccount:                ptr.To(true),
				RequiredServiceAccountAnnotationKeys: []string{"eks.amazonaws.com/role-arn"},
				OptionalServiceAccountAnnotationKeys: []string{"example.com/optional"},
			},
		}},
		"v1beta1.json": {{
			Name:                 "acr-credential-provider",
			MatchImages:          []string{"*.azurecr.io"},
			DefaultCacheDuration: minutes(10),
			APIVersion:           "credentialprovider.kubelet.k8s.io/v1beta1",
			Args:                 []string{"/etc/azure.json"},
			Env:                  []kubeletconfigv1.ExecEnvVar{{Name: "A", Value: "b"}},
		}},
		"v1alpha1.yaml": {{
			Name:                 "gcp-credential-provider",
			MatchImages:          []string{"gcr.io", "*.pkg.dev"},
			DefaultCacheDuration: minutes(1),
			APIVersion:           "credentialprovider.kubelet.k8s.io/v1alpha1",
		}},
	}
	for file, want := range tests {
		t.Run(file, func(t *testing.T) {
			got, _, err := readConfig(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("providers:\n got %+v\nwant %+v", got, want)
			}
			if errs := validateProviders(got, true); len(errs) > 0 {
				t.Errorf("testdata does not validate: %v", errs.ToAggregate())
			}
		})
	}
}

// TestReadConfigDirectory: *.json, *.yaml and *.yml files, in name order; other files
// and directories are skipped; the hash covers each file's length and content.
func TestReadConfigDirectory(t *testing.T) {
	dir := filepath.Join("testdata", "configdir")
	providers, hash, err := readConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range providers {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, ","); got != "first,second,third" {
		t.Errorf("providers = %s, want first,second,third", got)
	}
	want := sha256.New()
	for _, name := range []string{"10-first.yaml", "20-second.json", "30-third.yml"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(data)))
		want.Write(n[:])
		want.Write(data)
	}
	if wantHash := fmt.Sprintf("sha256:%x", want.Sum(nil)); hash != wantHash {
		t.Errorf("hash = %s, want %s", hash, wantHash)
	}
}

func TestReadConfigErrors(t *testing.T) {
	const provider = `
- name: %s
  matchImages: ["example.com"]
  defaultCacheDuration: 1m
  apiVersion: credentialprovider.kubelet.k8s.io/v1`
	v1 := "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:"
	tests := []struct {
		name  string
		files map[string]string // in a directory when more than one, or named *.yaml
		path  string            // instead of files
		want  string
	}{
		{name: "empty path", path: "-", want: "credential provider config path is empty"},
		{name: "missing", path: "/nonexistent/config.yaml", want: `unable to access path "/nonexistent/config.yaml": stat /nonexistent/config.yaml: no such file or directory`},
		{name: "directory without configs", files: map[string]string{"a.txt": "x", "b.conf": "y"}, want: "no configuration files found in directory"},
		{name: "wrong kind", files: map[string]string{"c.yaml": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"},
			want: `failed to decode "KubeletConfiguration" (wrong Kind)`},
		{name: "unregistered kind", files: map[string]string{"c.yaml": "apiVersion: kubelet.config.k8s.io/v1\nkind: WrongKind\n"},
			want: `no kind "WrongKind" is registered for version "kubelet.config.k8s.io/v1"`},
		{name: "unknown group", files: map[string]string{"c.yaml": "apiVersion: foobar/v1alpha1\nkind: CredentialProviderConfig\n"},
			want: `no kind "CredentialProviderConfig" is registered for version "foobar/v1alpha1"`},
		{name: "other group", files: map[string]string{"c.yaml": "apiVersion: credentialprovider.kubelet.k8s.io/v1\nkind: CredentialProviderRequest\n"},
			want: `failed to decode "CredentialProviderRequest" (wrong Kind)`},
		{name: "unknown field", files: map[string]string{"c.yaml": v1 + fmt.Sprintf(provider, "a") + "\n  unknownField: x\n"},
			want: `strict decoding error: unknown field "providers[0].unknownField"`},
		{name: "tokenAttributes in v1beta1", files: map[string]string{"c.yaml": strings.Replace(v1, "/v1", "/v1beta1", 1) + fmt.Sprintf(provider, "a") + "\n  tokenAttributes: {}\n"},
			want: `strict decoding error: unknown field "providers[0].tokenAttributes"`},
		{name: "duplicate in one file", files: map[string]string{"c.yaml": v1 + fmt.Sprintf(provider, "dup") + fmt.Sprintf(provider, "dup")},
			want: `duplicate provider name "dup" found in configuration file(s)`},
		{name: "duplicate across files", files: map[string]string{"a.yaml": v1 + fmt.Sprintf(provider, "dup"), "b.yml": v1 + fmt.Sprintf(provider, "dup")},
			want: `duplicate provider name "dup" found in configuration file(s)`},
		{name: "a bad file beats a duplicate", files: map[string]string{"a.yaml": v1 + fmt.Sprintf(provider, "dup") + fmt.Sprintf(provider, "dup"), "b.json": "{"},
			want: "error decoding config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "-" {
				path = ""
			}
			if tc.files != nil {
				path = writeConfigFiles(t, tc.files)
			}
			_, _, err := readConfig(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// writeConfigFiles writes one file and returns its path, or several into a directory and
// returns the directory.
func writeConfigFiles(t *testing.T, files map[string]string) string {
	dir := t.TempDir()
	var last string
	for name, content := range files {
		last = filepath.Join(dir, name)
		if err := os.WriteFile(last, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(files) == 1 && strings.HasSuffix(last, ".yaml") {
		return last
	}
	return dir
}

// TestValidateProviders checks upstream's messages (its config_test.go).
func TestValidateProviders(t *testing.T) {
	valid := func(mutate func(p *kubeletconfigv1.CredentialProvider)) []kubeletconfigv1.CredentialProvider {
		p := kubeletconfigv1.CredentialProvider{
			Name:                 "foobar",
			MatchImages:          []string{"foobar.registry.io"},
			DefaultCacheDuration: &metav1.Duration{Duration: time.Minute},
			APIVersion:           "credentialprovider.kubelet.k8s.io/v1",
		}
		if mutate != nil {
			mutate(&p)
		}
		return []kubeletconfigv1.CredentialProvider{p}
	}
	tokens := func(mutate func(ta *kubeletconfigv1.ServiceAccountTokenAttributes)) []kubeletconfigv1.CredentialProvider {
		return valid(func(p *kubeletconfigv1.CredentialProvider) {
			p.TokenAttributes = &kubeletconfigv1.ServiceAccountTokenAttributes{
				ServiceAccountTokenAudience: "audience",
				CacheType:                   kubeletconfigv1.ServiceAccountServiceAccountTokenCacheType,
				RequireServiceAccount:       ptr.To(true),
			}
			if mutate != nil {
				mutate(p.TokenAttributes)
			}
		})
	}
	const nameRule = `name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`
	tests := []struct {
		name      string
		providers []kubeletconfigv1.CredentialProvider
		gateOff   bool
		want      string
	}{
		{"valid", valid(nil), false, ""},
		{"valid with tokens", tokens(func(ta *kubeletconfigv1.ServiceAccountTokenAttributes) {
			ta.RequiredServiceAccountAnnotationKeys = []string{"example.com/a"}
			ta.OptionalServiceAccountAnnotationKeys = []string{"example.com/b"}
		}), false, ""},
		{"no providers", nil, false, "providers: Required value: at least 1 item in plugins is required"},
		{"slash", valid(func(p *kubeletconfigv1.CredentialProvider) { p.Name = "foo/../bar" }), false,
			`providers.name: Invalid value: "foo/../bar": provider name cannot contain '/'`},
		{"dot", valid(func(p *kubeletconfigv1.CredentialProvider) { p.Name = "." }), false,
			`providers.name: Invalid value: ".": provider name cannot be '.'`},
		{"dot dot", valid(func(p *kubeletconfigv1.CredentialProvider) { p.Name = ".." }), false,
			`providers.name: Invalid value: "..": provider name cannot be '..'`},
		{"space", valid(func(p *kubeletconfigv1.CredentialProvider) { p.Name = "foo bar" }), false,
			`providers.name: Invalid value: "foo bar": provider name cannot contain spaces`},
		{"duplicate", append(valid(nil), valid(nil)...), false, `providers.name: Duplicate value: "foobar"`},
		{"no apiVersion", valid(func(p *kubeletconfigv1.CredentialProvider) { p.APIVersion = "" }), false,
			"providers.apiVersion: Required value"},
		{"bad apiVersion", valid(func(p *kubeletconfigv1.CredentialProvider) {
			p.APIVersion = "credentialprovider.kubelet.k8s.io/v1alpha0"
		}), false,
			`providers.apiVersion: Unsupported value: "credentialprovider.kubelet.k8s.io/v1alpha0": supported values: "credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v1alpha1", "credentialprovider.kubelet.k8s.io/v1beta1"`},
		{"no matchImages", valid(func(p *kubeletconfigv1.CredentialProvider) { p.MatchImages = nil }), false,
			"providers.matchImages: Required value: at least 1 item in matchImages is required"},
		{"bad matchImage", valid(func(p *kubeletconfigv1.CredentialProvider) { p.MatchImages = []string{"%invalid%"} }), false,
			`providers.matchImages: Invalid value: "%invalid%": match image is invalid: parse "https://%invalid%": invalid URL escape "%in"`},
		{"no defaultCacheDuration", valid(func(p *kubeletconfigv1.CredentialProvider) { p.DefaultCacheDuration = nil }), false,
			"providers.defaultCacheDuration: Required value"},
		{"negative defaultCacheDuration", valid(func(p *kubeletconfigv1.CredentialProvider) { p.DefaultCacheDuration.Duration = -time.Minute }), false,
			`providers.defaultCacheDuration: Invalid value: "-1m0s": must be greater than or equal to 0`},
		{"several errors", valid(func(p *kubeletconfigv1.CredentialProvider) { p.Name, p.APIVersion = ".", "" }), false,
			`[providers.name: Invalid value: ".": provider name cannot be '.', providers.apiVersion: Required value]`},
		{"tokens with the gate off", tokens(nil), true,
			"providers.tokenAttributes: Forbidden: tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled"},
		{"no audience", tokens(func(ta *kubeletconfigv1.ServiceAccountTokenAttributes) { ta.ServiceAccountTokenAudience = "" }), false,
			"providers.tokenAttributes.serviceAccountTokenAudience: Required value"},
		{"no requireServiceAccount", tokens(func(ta *kubeletconfigv1.ServiceAccountTokenAttributes) { ta.RequireServiceAccount = nil }), false,
			"providers.tokenAttributes.requireServiceAccount: Required value"},
		{"tokens with v1beta1", func() []kubeletconfigv1.CredentialProvider {
			ps := tokens(nil)
			ps[0].APIVersion = "credentialprovider.kubelet.k8s.io/v1beta1"
			return ps
		}(), false, "providers.tokenAttributes: Forbidden: tokenAttributes is only supported for credentialprovider.kubelet.k8s.io/v1 API version"},
		{"required keys without requiring a service account", tokens(func(ta *kubeletconfigv1.ServiceAccountTokenAttributes) {
			ta.RequireServiceAccount = ptr.To(false)
			ta.RequiredServiceAccountAnnotationKeys = []string{"example.com/a"}
		}), false, "providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Forbidden: requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"},
		{"bad required key", tokens(func(ta *kubeletconfigv1.ServiceAccountTokenAttributes) {
			ta.RequiredServiceAccountAnnotationKeys = []string{"cantendwithadash-"}
		}), false, `providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Invalid value: "cantendwithadash-": ` + nameRule},
		{"bad optional key", tokens(func(ta *kubeletconfigv1.ServiceAccountTokenAttributes) {
			ta.OptionalServiceAccountAnnotationKeys = []string{"cantendwithadash-"}
		}), false, `providers.tokenAttributes.optionalServiceAccountAnnotationKeys: Invalid value: "cantendwithadash-": ` + nameRule},
		{"upper case key", tokens(func(ta *kubeletconfigv1.ServiceAccountTokenAttributes) {
			ta.OptionalServiceAccountAnnotationKeys = []string{"Example.com/UPPER"}
		}), false, ""},
		{"repeated required key", tokens(func(ta *kubeletconfigv1.ServiceAccountTokenAttributes) {
			ta.RequiredServiceAccountAnnotationKeys = []string{"now-with-dashes/simple", "now-with-dashes/simple"}
		}), false, `providers.tokenAttributes.requiredServiceAccountAnnotationKeys: Duplicate value: "now-with-dashes/simple"`},
		{"repeated optional key", tokens(func(ta *kubeletconfigv1.ServiceAccountTokenAttributes) {
			ta.OptionalServiceAccountAnnotationKeys = []string{"now-with-dashes/simple", "now-with-dashes/simple"}
		}), false, `providers.tokenAttributes.optionalServiceAccountAnnotationKeys: Duplicate value: "now-with-dashes/simple"`},
		{"key both required and optional", tokens(func(ta *kubeletconfigv1.ServiceAccountTokenAttributes) {
			ta.RequiredServiceAccountAnnotationKeys = []string{"now-with-dashes/simple-1", "now-with-dashes/simple-2"}
			ta.OptionalServiceAccountAnnotationKeys = []string{"now-with-dashes/simple-2"}
		}), false, `providers.tokenAttributes: Invalid value: ["now-with-dashes/simple-2"]: annotation keys cannot be both required and optional`},
		{"no cacheType", tokens(func(ta *kubeletconfigv1.ServiceAccountTokenAttributes) { ta.CacheType = "" }), false,
			"providers.tokenAttributes.cacheType: Required value: cacheType is required to be set when tokenAttributes is specified. Supported values are: ServiceAccount, Token"},
		{"bad cacheType", tokens(func(ta *kubeletconfigv1.ServiceAccountTokenAttributes) { ta.CacheType = "invalid-cache-type" }), false,
			`providers.tokenAttributes.cacheType: Unsupported value: "invalid-cache-type": supported values: "ServiceAccount", "Token"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if errs := validateProviders(tc.providers, !tc.gateOff); len(errs) > 0 {
				got = errs.ToAggregate().Error()
			}
			if got != tc.want {
				t.Errorf("errors:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestLoadChecks(t *testing.T) {
	f := newFixture(t)
	config := f.writeConfig(recorderConfig)

	if _, err := Load(config, "/nonexistent-bin"); err == nil || err.Error() != "plugin binary directory /nonexistent-bin did not exist" {
		t.Errorf("missing bin dir: %v", err)
	}
	empty := t.TempDir()
	want := fmt.Sprintf("plugin binary executable %s did not exist", filepath.Join(empty, "recorder"))
	if _, err := Load(config, empty); err == nil || err.Error() != want {
		t.Errorf("missing executable: %v, want %s", err, want)
	}
	if err := os.WriteFile(filepath.Join(empty, "recorder"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(config, empty); err == nil || !strings.Contains(err.Error(), "permission denied") ||
		!strings.HasPrefix(err.Error(), "error inspecting binary executable ") {
		t.Errorf("executable without x bit: %v", err)
	}
	if _, err := Load(f.writeConfig(strings.Replace(recorderConfig, "defaultCacheDuration: 10m", "defaultCacheDuration: -1m", 1)), f.binDir); err == nil ||
		err.Error() != `failed to validate credential provider config: providers.defaultCacheDuration: Invalid value: "-1m0s": must be greater than or equal to 0` {
		t.Errorf("invalid config: %v", err)
	}
	if _, err := Load(config, f.binDir); err != nil {
		t.Errorf("valid: %v", err)
	}
}

// TestLoadGateOff: a config with tokenAttributes does not load with the gate off.
func TestLoadGateOff(t *testing.T) {
	f := newFixture(t)
	config := f.writeConfig(recorderConfig + saTokenAttributes("ServiceAccount", true, nil, nil))
	_, err := Load(config, f.binDir, WithServiceAccountTokens(false))
	if err == nil || !strings.Contains(err.Error(), "tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled") {
		t.Errorf("error = %v", err)
	}
}
