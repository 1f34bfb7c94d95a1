package streaming

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
)

var allFeatures = Features{ExtendWebSocketsToKubelet: true, ContainerCheckpoint: true}

// executor is a client of the kubelet API as the API server is one: SPDY, or WebSocket
// (v5 only, as the API server passes kubectl's WebSocket through).
type executor func(t *testing.T, rawURL string) remotecommand.Executor

func spdyExecutor(t *testing.T, rawURL string) remotecommand.Executor {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	e, err := remotecommand.NewSPDYExecutor(&restclient.Config{}, http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func webSocketExecutor(t *testing.T, rawURL string) remotecommand.Executor {
	e, err := remotecommand.NewWebSocketExecutor(&restclient.Config{}, http.MethodGet, rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

var executors = map[string]executor{"spdy": spdyExecutor, "websocket": webSocketExecutor}

// stream runs a session with a deadline and returns stdout, stderr and the error.
func stream(t *testing.T, e remotecommand.Executor, opts remotecommand.StreamOptions) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if opts.Stdout == nil {
		opts.Stdout = &stdout
	}
	if opts.Stderr == nil && !opts.Tty {
		opts.Stderr = &stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := e.StreamWithContext(ctx, opts)
	return stdout.String(), stderr.String(), err
}

func TestExecStdinToStdoutUntilStdinCloses(t *testing.T) {
	for name, newExecutor := range executors {
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t, allFeatures)
			e := newExecutor(t, env.server.URL+"/exec/ns/web/app?command=cat&input=1&output=1&error=1")
			// The session ends only if the end of stdin reaches the command.
			stdout, _, err := stream(t, e, remotecommand.StreamOptions{Stdin: strings.NewReader("hello\nworld\n")})
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			if stdout != "hello\nworld\n" {
				t.Errorf("stdout = %q", stdout)
			}
			want := `exec app-1 ["cat"] stdin=true stdout=true stderr=true tty=false`
			if got := env.runtime.recorded(); len(got) != 1 || got[0] != want {
				t.Errorf("runtime calls = %q, want %q", got, want)
			}
		})
	}
}

// TestExecEndsWhenTheClientLeaves: a client that goes away mid-session does not leave
// the handler (and its runtime connection) behind.
func TestExecEndsWhenTheClientLeaves(t *testing.T) {
	for name, newExecutor := range executors {
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t, allFeatures)
			e := newExecutor(t, env.server.URL+"/exec/ns/web/app?command=cat&input=1&output=1")
			ctx, cancel := context.WithCancel(context.Background())
			stdin, typing := io.Pipe()
			defer typing.Close()
			done := make(chan error, 1)
			go func() {
				done <- e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: io.Discard})
			}()
			if _, err := typing.Write([]byte("x")); err != nil { // the session is up
				t.Fatal(err)
			}
			cancel()
			<-done
			deadline := time.Now().Add(10 * time.Second)
			for env.active.Load() != 0 {
				if time.Now().After(deadline) {
					t.Fatal("handler still serving after the client left")
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func TestExecExitCodeAndStderr(t *testing.T) {
	for name, newExecutor := range executors {
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t, allFeatures)
			e := newExecutor(t, env.server.URL+"/exec/ns/web/uid-1/app?command=exit&command=7&output=1&error=1")
			_, stderr, err := stream(t, e, remotecommand.StreamOptions{})
			var exitErr exec.CodeExitError
			if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 7 {
				t.Fatalf("err = %v (%T), want exit code 7", err, err)
			}
			if stderr != "bye" {
				t.Errorf("stderr = %q", stderr)
			}
		})
	}
}

func TestExecTTYResize(t *testing.T) {
	for name, newExecutor := range executors {
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t, allFeatures)
			// tty with error=1: stderr is dropped, as upstream.
			e := newExecutor(t, env.server.URL+"/exec/ns/web/app?command=size&input=1&output=1&tty=1&error=1")
			sizes := &fixedSizes{sizes: []remotecommand.TerminalSize{{Width: 120, Height: 40}}}
			stdout, _, err := stream(t, e, remotecommand.StreamOptions{Stdin: idleStdin(t), Tty: true, TerminalSizeQueue: sizes})
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			if stdout != "120x40" {
				t.Errorf("stdout = %q, want the size the client sent", stdout)
			}
			if got := env.runtime.recorded(); len(got) != 1 || !strings.HasSuffix(got[0], "stderr=false tty=true") {
				t.Errorf("runtime calls = %q", got)
			}
		})
	}
}

func TestAttachUsesTheContainersTTY(t *testing.T) {
	for name, newExecutor := range executors {
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t, allFeatures)
			e := newExecutor(t, env.server.URL+"/attach/ns/web/term?input=1&output=1&tty=1")
			stdout, _, err := stream(t, e, remotecommand.StreamOptions{Stdin: strings.NewReader("typed"), Tty: true})
			if err != nil || stdout != "typed" {
				t.Fatalf("stream: %q, %v", stdout, err)
			}
			// The app container has no TTY: asking for one does not give it one.
			e = newExecutor(t, env.server.URL+"/attach/ns/web/app?input=1&output=1&tty=1")
			_, _, _ = stream(t, e, remotecommand.StreamOptions{Stdin: strings.NewReader("x"), Tty: true})
			want := []string{"attach term-1 stdin=true stdout=true stderr=false tty=true", "attach app-1 stdin=true stdout=true stderr=false tty=false"}
			if got := env.runtime.recorded(); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("runtime calls = %q, want %q", got, want)
			}
		})
	}
}

// TestWebSocketPassesThroughWithoutTheGate: with ExtendWebSocketsToKubelet off, a
// WebSocket request goes to the runtime unchanged (which here speaks SPDY only).
func TestWebSocketPassesThroughWithoutTheGate(t *testing.T) {
	env := newTestEnv(t, Features{})
	e := webSocketExecutor(t, env.server.URL+"/exec/ns/web/app?command=cat&input=1&output=1")
	if _, _, err := stream(t, e, remotecommand.StreamOptions{Stdin: strings.NewReader("x")}); err == nil {
		t.Fatal("WebSocket session against an SPDY-only runtime succeeded")
	}
	if r := env.stream.lastRequest(); r == nil || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		t.Errorf("runtime did not get the WebSocket upgrade: %v", r)
	}
}

func TestExecErrors(t *testing.T) {
	cases := []struct {
		name, method, path string
		setup              func(*fakeRuntime)
		code               int
		body               string
	}{
		{"no streams", "POST", "/exec/ns/web/app?command=ls", nil, 400, "you must specify at least 1 of stdin, stdout, stderr"},
		{"tty alone is no stream", "POST", "/exec/ns/web/app?command=ls&tty=1&error=1", nil, 400, "you must specify at least 1 of stdin, stdout, stderr"},
		{"no pod", "POST", "/exec/ns/nope/app?output=1", nil, 404, "pod does not exist"},
		{"no running container", "POST", "/exec/ns/web/init?output=1", nil, 500, `container not found ("init")`},
		{"runtime list fails", "POST", "/exec/ns/web/app?output=1", func(f *fakeRuntime) { f.podsErr = errors.New("runtime down") }, 500, "runtime down"},
		{"runtime NotFound", "POST", "/exec/ns/web/app?output=1", func(f *fakeRuntime) { f.urlErr = grpcstatus.Error(codes.NotFound, "gone") }, 404, "rpc error: code = NotFound desc = gone"},
		{"runtime busy", "POST", "/exec/ns/web/app?output=1", func(f *fakeRuntime) {
			f.urlErr = grpcstatus.Error(codes.ResourceExhausted, "maximum number of in-flight requests exceeded")
		}, 429, "rpc error: code = ResourceExhausted desc = maximum number of in-flight requests exceeded"},
		// Upstream answers 500 too: the proxy reports every error that way.
		{"not an upgrade", "POST", "/exec/ns/web/app?output=1", nil, 500, "Upgrade request required"},
		{"attach uid mismatch", "POST", "/attach/ns/web/other-uid/app?output=1", nil, 500, "pod web_ns not found"},
		{"attach no container", "POST", "/attach/ns/web/init?output=1", nil, 500, "container init not found in pod web_ns"},
		{"exec bad method", "PUT", "/exec/ns/web/app?output=1", nil, 405, "405: Method Not Allowed"},
		{"exec bad path", "POST", "/exec/ns/web?output=1", nil, 404, "404: Page Not Found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, allFeatures)
			if tc.setup != nil {
				tc.setup(env.runtime)
			}
			code, body := do(t, tc.method, env.server.URL+tc.path)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("got %d %q, want %d %q", code, body, tc.code, tc.body)
			}
		})
	}
}

// do sends a request and returns the status and body.
func do(t *testing.T, method, rawURL string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// fixedSizes is a terminal that reports its sizes once each.
type fixedSizes struct{ sizes []remotecommand.TerminalSize }

func (f *fixedSizes) Next() *remotecommand.TerminalSize {
	if len(f.sizes) == 0 {
		return nil
	}
	s := f.sizes[0]
	f.sizes = f.sizes[1:]
	return &s
}

// idleStdin is a terminal's stdin nobody types on, until the test ends.
func idleStdin(t *testing.T) io.Reader {
	r, w := io.Pipe()
	t.Cleanup(func() { w.Close() })
	return r
}
