package credentialprovider

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestExecRequestAndResponse: the request on stdin, the arguments, the environment
// (the kubelet's, overridden by the config's) and the credentials returned.
func TestExecRequestAndResponse(t *testing.T) {
	t.Setenv("NODELET_CP_KUBELET", "from-kubelet")
	t.Setenv("NODELET_CP_OVERRIDE", "from-kubelet")
	f := newFixture(t)
	p := f.load(recorderConfig)
	f.respond(v1Response("Image", "", map[string][2]string{"registry.example.com": {"user", "pass"}}))

	got := p.Credentials(context.Background(), "registry.example.com/team/app", nil)
	want := []Credential{{Registry: "registry.example.com", Username: "user", Password: "pass"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("credentials = %+v, want %+v", got, want)
	}
	wantRequest := `{"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"registry.example.com/team/app"}` + "\n"
	if req := f.readState("request"); req != wantRequest {
		t.Errorf("request = %q, want %q", req, wantRequest)
	}
	if args := f.readState("args"); args != "--region eu\n" {
		t.Errorf("args = %q", args)
	}
	if env := f.readState("env"); env != "from-kubelet from-config\n" {
		t.Errorf("env = %q, want the kubelet's variable and the config's override", env)
	}
	if n := testutil.CollectAndCount(p.metrics.pluginDuration); n != 1 {
		t.Errorf("duration series = %d, want 1", n)
	}
}

// TestExecOlderVersions: the request is in the provider's version, and so must the
// response be.
func TestExecOlderVersions(t *testing.T) {
	for _, version := range []string{"v1alpha1", "v1beta1"} {
		t.Run(version, func(t *testing.T) {
			f := newFixture(t)
			apiVersion := "credentialprovider.kubelet.k8s.io/" + version
			p := f.load(strings.Replace(recorderConfig, "credentialprovider.kubelet.k8s.io/v1", apiVersion, 1))
			f.respond(response(apiVersion, "Registry", "1m", map[string][2]string{"*.example.com": {"u", "p"}}))
			got := p.Credentials(context.Background(), "registry.example.com/app", nil)
			if len(got) != 1 || got[0].Username != "u" {
				t.Errorf("credentials = %+v", got)
			}
			if req := f.request(); req["apiVersion"] != apiVersion || req["image"] != "registry.example.com/app" {
				t.Errorf("request = %v", req)
			}
		})
	}
}

func TestExecErrors(t *testing.T) {
	const image = "registry.example.com/app"
	tests := []struct {
		name   string
		script string // replaces recorderPlugin when set
		reply  string // recorderPlugin's response otherwise
		want   string
	}{
		{name: "exit 1", script: "#!/bin/sh\necho boom >&2\nexit 1\n",
			want: "failed to get credential from external registry credential provider: error execing credential provider plugin recorder for image registry.example.com/app: exit status 1: boom\n"},
		{name: "garbage", reply: "hello",
			want: "failed to get credential from external registry credential provider: error reading GVK from response: couldn't get version/kind; json parse error: invalid character 'h' looking for beginning of value"},
		{name: "nothing", reply: "",
			want: "failed to get credential from external registry credential provider: error reading GVK from response: couldn't get version/kind; json parse error: unexpected end of JSON input"},
		{name: "wrong apiVersion", reply: response("credentialprovider.kubelet.k8s.io/v1beta1", "Image", "", nil),
			want: "failed to get credential from external registry credential provider: apiVersion from credential plugin response did not match expected apiVersion:credentialprovider.kubelet.k8s.io/v1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1beta1"},
		{name: "wrong kind", reply: `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderRequest","image":"x"}`,
			want: "failed to get credential from external registry credential provider: error decoding credential provider plugin response from stdout"},
		{name: "unknown field", reply: `{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","secret":"s3cr3t"}`,
			want: "failed to get credential from external registry credential provider: error decoding credential provider plugin response from stdout"},
		{name: "bad cacheKeyType", reply: v1Response("Pod", "", nil),
			want: "credential provider plugin did not return a valid cacheKeyType: Pod"},
		{name: "no cacheKeyType", reply: v1Response("", "0s", nil),
			want: "credential provider plugin did not return a valid cacheKeyType: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.script != "" {
				f.plugin("recorder", tc.script)
			}
			f.respond(tc.reply)
			p := f.load(recorderConfig)
			_, _, err := provideFirst(p, image, Pod{})
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error:\n got %v\nwant %s", err, tc.want)
			}
			if got := p.Credentials(context.Background(), image, nil); got != nil {
				t.Errorf("credentials after an error = %+v", got)
			}
		})
	}
}

// TestExecErrorsMetric: failed runs count in kubelet_credential_provider_plugin_errors_total.
func TestExecErrorsMetric(t *testing.T) {
	f := newFixture(t)
	f.plugin("recorder", "#!/bin/sh\nexit 3\n")
	p := f.load(recorderConfig)
	p.Credentials(context.Background(), "registry.example.com/app", nil)
	p.Credentials(context.Background(), "registry.example.com/app", nil)
	if got := testutil.ToFloat64(p.metrics.pluginErrors.WithLabelValues("recorder")); got != 2 {
		t.Errorf("errors = %v, want 2", got)
	}
}

// TestExecTimeout: a plugin that runs past the timeout is killed with what it started
// (the shell's sleep holds its stdout), and the run fails soon after.
func TestExecTimeout(t *testing.T) {
	f := newFixture(t)
	f.writeState("sleep", "30")
	p := f.load(recorderConfig, withExecTimeout(200*time.Millisecond))
	start := time.Now()
	_, _, err := provideFirst(p, "registry.example.com/app", Pod{})
	const want = "failed to get credential from external registry credential provider: error execing credential provider plugin recorder for image registry.example.com/app: context deadline exceeded: "
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got %v\nwant %s", err, want)
	}
	if elapsed := time.Since(start); elapsed > 200*time.Millisecond+execWaitDelay/2 {
		t.Errorf("run took %v: the plugin's group was not killed", elapsed)
	}
}

// TestExecIgnoresCallerCancel: the run goes on when the caller's context ends, as
// upstream's (it may be shared with other callers).
func TestExecIgnoresCallerCancel(t *testing.T) {
	f := newFixture(t)
	f.writeState("sleep", "0.3")
	f.respond(v1Response("Image", "", map[string][2]string{"registry.example.com": {"u", "p"}}))
	p := f.load(recorderConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if got := p.Credentials(ctx, "registry.example.com/app", nil); len(got) != 1 {
		t.Errorf("credentials = %+v", got)
	}
}

// TestCollectors: upstream's families, and the config hash as soon as the config loads.
func TestCollectors(t *testing.T) {
	f := newFixture(t)
	p := f.load(recorderConfig)
	_, hash, err := readConfig(f.writeConfig(recorderConfig))
	if err != nil {
		t.Fatal(err)
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(p.Collectors()...)
	f.plugin("recorder", "#!/bin/sh\nexit 1\n")
	p.Credentials(context.Background(), "registry.example.com/app", nil)
	want := fmt.Sprintf(`
# HELP kubelet_credential_provider_config_info [ALPHA] Information about the last applied credential provider configuration with hash as label
# TYPE kubelet_credential_provider_config_info gauge
kubelet_credential_provider_config_info{hash=%q} 1
# HELP kubelet_credential_provider_plugin_errors_total [ALPHA] Number of errors from credential provider plugin
# TYPE kubelet_credential_provider_plugin_errors_total counter
kubelet_credential_provider_plugin_errors_total{plugin_name="recorder"} 1
`, hash)
	if err := testutil.GatherAndCompare(registry, strings.NewReader(want),
		"kubelet_credential_provider_config_info", "kubelet_credential_provider_plugin_errors_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(registry, "kubelet_credential_provider_plugin_duration"); err != nil || n != 1 {
		t.Errorf("duration series = %d, %v", n, err)
	}
}
