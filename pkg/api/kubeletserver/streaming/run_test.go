package streaming

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

func TestRun(t *testing.T) {
	env := newTestEnv(t, allFeatures)
	env.runtime.runOut = []byte("hello\n")
	for _, path := range []string{"/run/ns/web/app?cmd=echo+hello", "/run/ns/web/uid-1/app?cmd=echo+hello"} {
		resp, err := http.Post(env.server.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	// One "cmd" split on spaces, no timeout.
	want := `run app-1 ["echo" "hello"] 0s`
	if calls := env.runtime.recorded(); len(calls) != 2 || calls[0] != want {
		t.Errorf("runtime calls = %q, want %q", calls, want)
	}
	if code, body := do(t, http.MethodPost, env.server.URL+"/run/ns/web/app?cmd=echo+hello"); code != 200 || body != "hello\n" {
		t.Errorf("got %d %q", code, body)
	}
}

func TestRunErrors(t *testing.T) {
	cases := []struct {
		name, method, path string
		runErr             error
		code               int
		body               string
	}{
		{"command fails", "POST", "/run/ns/web/app?cmd=false", errors.New("command 'false' exited with 1: "), 500, "command 'false' exited with 1: "},
		{"no pod", "POST", "/run/ns/nope/app?cmd=ls", nil, 404, "pod does not exist"},
		{"not running", "POST", "/run/ns/web/init?cmd=ls", nil, 500, `container not found ("init")`},
		{"get", "GET", "/run/ns/web/app?cmd=ls", nil, 405, "405: Method Not Allowed"},
	}
	for _, tc := range cases {
		env := newTestEnv(t, allFeatures)
		env.runtime.runErr = tc.runErr
		if code, body := do(t, tc.method, env.server.URL+tc.path); code != tc.code || body != tc.body {
			t.Errorf("%s: got %d %q, want %d %q", tc.name, code, body, tc.code, tc.body)
		}
	}
}

func TestCheckpoint(t *testing.T) {
	env := newTestEnv(t, allFeatures)
	code, body := do(t, http.MethodPost, env.server.URL+"/checkpoint/ns/web/app?timeout=5&timeout=9")
	if code != 200 {
		t.Fatalf("got %d %q", code, body)
	}
	var answer struct{ Items []string }
	if err := json.Unmarshal([]byte(body), &answer); err != nil || len(answer.Items) != 1 {
		t.Fatalf("answer %q: %v", body, err)
	}
	req := env.runtime.checkpoints[0]
	if req.ContainerId != "app-1" || req.Timeout != 9 || req.Location != answer.Items[0] {
		t.Errorf("request %+v, answer %q", req, answer.Items)
	}
	pattern := `^checkpoint-web_ns-app-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)\.tar$`
	if !regexp.MustCompile(pattern).MatchString(filepath.Base(req.Location)) {
		t.Errorf("location %q does not match %s", req.Location, pattern)
	}
	if info, err := os.Stat(filepath.Dir(req.Location)); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("checkpoint directory: %v %v", info, err)
	}
}

func TestCheckpointErrors(t *testing.T) {
	cases := []struct {
		name, method, path string
		checkErr           error
		code               int
		body               string
	}{
		{"containerd 1.6", "POST", "/checkpoint/ns/web/app", grpcstatus.Error(codes.Unimplemented, "method CheckpointContainer not implemented"), 501,
			"checkpointing of ns/web/app failed (rpc error: code = Unimplemented desc = method CheckpointContainer not implemented)"},
		{"runtime fails", "POST", "/checkpoint/ns/web/app", errors.New("criu failed"), 500, "checkpointing of ns/web/app failed (criu failed)"},
		{"not running", "POST", "/checkpoint/ns/web/init", nil, 500, "checkpointing of ns/web/init failed (container init not found)"},
		{"no container", "POST", "/checkpoint/ns/web/nope", nil, 404, "container nope does not exist"},
		{"no pod", "POST", "/checkpoint/ns/nope/app", nil, 404, "pod does not exist"},
		{"bad timeout", "POST", "/checkpoint/ns/web/app?timeout=soon", nil, 404, "cannot parse value of timeout parameter"},
		{"get", "GET", "/checkpoint/ns/web/app", nil, 405, "405: Method Not Allowed"},
		{"uid form does not exist", "POST", "/checkpoint/ns/web/uid-1/app", nil, 404, "404: Page Not Found"},
	}
	for _, tc := range cases {
		env := newTestEnv(t, allFeatures)
		env.runtime.checkErr = tc.checkErr
		if code, body := do(t, tc.method, env.server.URL+tc.path); code != tc.code || body != tc.body {
			t.Errorf("%s: got %d %q, want %d %q", tc.name, code, body, tc.code, tc.body)
		}
	}
}

func TestRoutesFollowTheGates(t *testing.T) {
	prefixes := func(f Features) string {
		var out []string
		for _, r := range New(Deps{Features: f}).Routes() {
			out = append(out, r.Prefix)
		}
		return strings.Join(out, " ")
	}
	if got := prefixes(FeaturesFromGates(nil)); got != "/run/ /exec/ /attach/ /portForward/ /containerLogs/ /checkpoint/" {
		t.Errorf("default routes: %s", got)
	}
	if got := prefixes(FeaturesFromGates(map[string]bool{"ContainerCheckpoint": false})); strings.Contains(got, "checkpoint") {
		t.Errorf("routes without ContainerCheckpoint: %s", got)
	}
	f := FeaturesFromGates(map[string]bool{"ExtendWebSocketsToKubelet": false, "PodLogsQuerySplitStreams": true})
	if f.ExtendWebSocketsToKubelet || !f.PodLogsQuerySplitStreams || !f.ContainerCheckpoint {
		t.Errorf("features %+v", f)
	}
}

func TestPathShapes(t *testing.T) {
	cases := []struct {
		e      endpoint
		path   string
		method string
		want   target
		code   int
	}{
		{execEndpoint, "/exec/ns/pod/c", "GET", target{namespace: "ns", pod: "pod", container: "c"}, 0},
		{execEndpoint, "/exec/ns/pod/uid/c", "POST", target{namespace: "ns", pod: "pod", uid: "uid", container: "c"}, 0},
		{execEndpoint, "/exec/ns/pod/c/", "GET", target{namespace: "ns", pod: "pod", uid: "c", container: ""}, 0},
		{execEndpoint, "/exec/ns/pod", "GET", target{}, 404},
		{execEndpoint, "/exec/ns/pod/uid/c/x", "GET", target{}, 404},
		{execEndpoint, "/exec/ns/pod/c", "DELETE", target{}, 405},
		{portForwardEndpoint, "/portForward/ns/pod", "GET", target{namespace: "ns", pod: "pod"}, 0},
		{portForwardEndpoint, "/portForward/ns/pod/uid", "POST", target{namespace: "ns", pod: "pod", uid: "uid"}, 0},
		{portForwardEndpoint, "/portForward/ns", "GET", target{}, 404},
		{logsEndpoint, "/containerLogs/ns/pod/c", "GET", target{namespace: "ns", pod: "pod", container: "c"}, 0},
		{logsEndpoint, "/containerLogs/ns/pod/uid/c", "GET", target{}, 404},
		{runEndpoint, "/run/ns/pod/uid/c", "POST", target{namespace: "ns", pod: "pod", uid: "uid", container: "c"}, 0},
		{runEndpoint, "/exec/ns/pod/c", "POST", target{}, 404},
	}
	for _, tc := range cases {
		rec := httptest.NewRecorder()
		got, ok := tc.e.parse(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if ok != (tc.code == 0) || got != tc.want || (tc.code != 0 && rec.Code != tc.code) {
			t.Errorf("%s %s: %+v %v (%d), want %+v %d", tc.method, tc.path, got, ok, rec.Code, tc.want, tc.code)
		}
		if tc.code == 405 && rec.Header().Get("Allow") != "GET, POST" {
			t.Errorf("%s %s: Allow %q", tc.method, tc.path, rec.Header().Get("Allow"))
		}
	}
}
