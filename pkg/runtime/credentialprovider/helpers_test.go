package credentialprovider

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// recorderPlugin is a plugin for tests. It keeps its state in $STATE: it appends a line
// to calls on each run, writes its stdin to request, its arguments to args and two
// variables to env, sleeps for the seconds in sleep if that file exists, and answers
// with the content of response.
const recorderPlugin = `#!/bin/sh
echo run >> "$STATE/calls"
cat > "$STATE/request"
echo "$@" > "$STATE/args"
echo "$NODELET_CP_KUBELET $NODELET_CP_OVERRIDE" > "$STATE/env"
if [ -f "$STATE/sleep" ]; then sleep "$(cat "$STATE/sleep")"; fi
cat "$STATE/response"
`

// fixture is a bin directory, a state directory for recorderPlugin and a fake clock.
type fixture struct {
	t        *testing.T
	binDir   string
	stateDir string
	clock    *clocktesting.FakeClock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, binDir: t.TempDir(), stateDir: t.TempDir(), clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	f.plugin("recorder", recorderPlugin)
	return f
}

// plugin writes an executable script into the bin directory.
func (f *fixture) plugin(name, script string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.binDir, name), []byte(script), 0o755); err != nil {
		f.t.Fatal(err)
	}
}

// load loads config, in which @STATE@ stands for the state directory, with the fake clock.
func (f *fixture) load(config string, opts ...Option) *Plugins {
	f.t.Helper()
	p, err := Load(f.writeConfig(config), f.binDir, append([]Option{withClock(f.clock)}, opts...)...)
	if err != nil {
		f.t.Fatalf("Load: %v", err)
	}
	return p
}

func (f *fixture) writeConfig(config string) string {
	f.t.Helper()
	path := filepath.Join(f.t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(config, "@STATE@", f.stateDir)), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return path
}

// respond sets what recorderPlugin answers.
func (f *fixture) respond(response string) {
	f.t.Helper()
	f.writeState("response", response)
}

func (f *fixture) writeState(name, content string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.stateDir, name), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) readState(name string) string {
	f.t.Helper()
	data, err := os.ReadFile(filepath.Join(f.stateDir, name))
	if err != nil && !os.IsNotExist(err) {
		f.t.Fatal(err)
	}
	return string(data)
}

// calls is how many times recorderPlugin ran.
func (f *fixture) calls() int {
	return strings.Count(f.readState("calls"), "run\n")
}

// request is the last request recorderPlugin received, decoded.
func (f *fixture) request() map[string]any {
	f.t.Helper()
	var req map[string]any
	if err := json.Unmarshal([]byte(f.readState("request")), &req); err != nil {
		f.t.Fatalf("request %q: %v", f.readState("request"), err)
	}
	return req
}

// v1Response is a credentialprovider.kubelet.k8s.io/v1 response. cacheDuration "" leaves
// the field out.
func v1Response(keyType, cacheDuration string, auth map[string][2]string) string {
	return response("credentialprovider.kubelet.k8s.io/v1", keyType, cacheDuration, auth)
}

func response(apiVersion, keyType, cacheDuration string, auth map[string][2]string) string {
	r := map[string]any{"apiVersion": apiVersion, "kind": "CredentialProviderResponse", "cacheKeyType": keyType}
	if cacheDuration != "" {
		r["cacheDuration"] = cacheDuration
	}
	entries := map[string]any{}
	for k, up := range auth {
		entries[k] = map[string]string{"username": up[0], "password": up[1]}
	}
	r["auth"] = entries
	data, _ := json.Marshal(r)
	return string(data)
}

// recorderConfig is a v1 config of recorderPlugin matching *.example.com.
const recorderConfig = `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: recorder
  matchImages: ["*.example.com", "registry.example.com:5000/team"]
  defaultCacheDuration: 10m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: ["--region", "eu"]
  env:
  - name: STATE
    value: "@STATE@"
  - name: NODELET_CP_OVERRIDE
    value: from-config
`

// provideFirst runs the first provider directly, to see its error.
func provideFirst(p *Plugins, image string, pod Pod) (authMap, *ServiceAccountRef, error) {
	return p.providers[0].provide(context.Background(), image, pod, p.serviceAccountAccess())
}

// withClock and withExecTimeout are for tests only.
func withClock(c *clocktesting.FakeClock) Option {
	return func(o *options) { o.clock = c }
}

func withExecTimeout(d time.Duration) Option {
	return func(o *options) { o.execTimeout = d }
}
