//lint:file-ignore SA1019 apimachinery's httpstream packages are kept over their new home k8s.io/streaming, a module nodelet does not import directly.

package streaming

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	constants "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// fakePods is the kubelet's pod view.
type fakePods struct {
	pods     map[string]*v1.Pod // by namespace/name
	statuses map[types.UID]v1.PodStatus
}

func (f *fakePods) PodByName(namespace, name string) (*v1.Pod, bool) {
	p, ok := f.pods[namespace+"/"+name]
	return p, ok
}

func (f *fakePods) PodStatus(uid types.UID) (v1.PodStatus, bool) {
	s, ok := f.statuses[uid]
	return s, ok
}

// fakeRuntime is the runtime manager. Its streaming URLs point at a fakeStreamServer
// and carry the request in their query, as a real runtime's token stands for it.
type fakeRuntime struct {
	mu          sync.Mutex
	running     []*container.Pod
	podsErr     error
	streamURL   string
	urlErr      error
	runOut      []byte
	runErr      error
	logs        func(ctx context.Context, opts *v1.PodLogOptions, stdout, stderr io.Writer) error
	checkErr    error
	calls       []string
	checkpoints []*runtimeapi.CheckpointContainerRequest
}

func (f *fakeRuntime) record(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeRuntime) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeRuntime) GetPods(context.Context, bool) ([]*container.Pod, error) {
	return f.running, f.podsErr
}

func (f *fakeRuntime) url(kind string, q url.Values) (*url.URL, error) {
	if f.urlErr != nil {
		return nil, f.urlErr
	}
	return url.Parse(f.streamURL + "/" + kind + "?" + q.Encode())
}

func flags(stdin, stdout, stderr, tty bool) url.Values {
	q := url.Values{}
	for name, on := range map[string]bool{"stdin": stdin, "stdout": stdout, "stderr": stderr, "tty": tty} {
		if on {
			q.Set(name, "1")
		}
	}
	return q
}

func (f *fakeRuntime) GetExec(_ context.Context, id container.ContainerID, cmd []string, stdin, stdout, stderr, tty bool) (*url.URL, error) {
	f.record("exec %s %q stdin=%v stdout=%v stderr=%v tty=%v", id.ID, cmd, stdin, stdout, stderr, tty)
	q := flags(stdin, stdout, stderr, tty)
	q["cmd"] = cmd
	return f.url("exec", q)
}

func (f *fakeRuntime) GetAttach(_ context.Context, id container.ContainerID, stdin, stdout, stderr, tty bool) (*url.URL, error) {
	f.record("attach %s stdin=%v stdout=%v stderr=%v tty=%v", id.ID, stdin, stdout, stderr, tty)
	q := flags(stdin, stdout, stderr, tty)
	q["cmd"] = []string{"cat"}
	return f.url("exec", q)
}

func (f *fakeRuntime) GetPortForward(_ context.Context, name, namespace string, uid types.UID, ports []int32) (*url.URL, error) {
	f.record("portforward %s/%s %s %v", namespace, name, uid, ports)
	return f.url("portforward", nil)
}

func (f *fakeRuntime) RunInContainer(_ context.Context, id container.ContainerID, cmd []string, timeout time.Duration) ([]byte, error) {
	f.record("run %s %q %v", id.ID, cmd, timeout)
	return f.runOut, f.runErr
}

func (f *fakeRuntime) GetContainerLogs(ctx context.Context, _ *v1.Pod, id container.ContainerID, opts *v1.PodLogOptions, stdout, stderr io.Writer) error {
	f.record("logs %s", id.ID)
	return f.logs(ctx, opts, stdout, stderr)
}

func (f *fakeRuntime) CheckpointContainer(_ context.Context, req *runtimeapi.CheckpointContainerRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checkpoints = append(f.checkpoints, req)
	return f.checkErr
}

// testPod is pod "web" in "ns" (UID "uid-1") with container "app" running as
// containerd://app-1 and init container "init".
func testPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-1"},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "init"}},
			Containers:     []v1.Container{{Name: "app"}, {Name: "term", TTY: true}},
		},
		Status: v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{
			Name: "app", ContainerID: "containerd://app-1",
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{}},
		}}},
	}
}

// testEnv is a kubelet API serving the handlers over the fakes, and the fake
// runtime's streaming server.
type testEnv struct {
	pods    *fakePods
	runtime *fakeRuntime
	stream  *fakeStreamServer
	server  *httptest.Server
	mux     *http.ServeMux
	active  atomic.Int32 // requests being served
}

func newTestEnv(t *testing.T, features Features) *testEnv {
	t.Helper()
	pod := testPod()
	env := &testEnv{
		pods:   &fakePods{pods: map[string]*v1.Pod{"ns/web": pod}, statuses: map[types.UID]v1.PodStatus{}},
		stream: newFakeStreamServer(t),
	}
	env.runtime = &fakeRuntime{
		streamURL: env.stream.URL,
		running: []*container.Pod{{ID: pod.UID, Name: "web", Namespace: "ns", Containers: []*container.Container{
			{ID: container.ContainerID{Type: "containerd", ID: "app-1"}, Name: "app"},
			{ID: container.ContainerID{Type: "containerd", ID: "term-1"}, Name: "term"},
		}}},
	}
	h := New(Deps{
		Pods: env.pods, RunningPods: env.runtime, Streaming: env.runtime, Runner: env.runtime,
		Logs: env.runtime, Checkpoints: env.runtime, CheckpointDir: t.TempDir() + "/checkpoints",
		Features: features,
	})
	mux := http.NewServeMux()
	for _, r := range h.Routes() {
		mux.Handle(r.Prefix, r.Handler)
	}
	env.mux = mux
	env.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		env.active.Add(1)
		defer env.active.Add(-1)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(env.server.Close)
	return env
}

// fakeStreamServer is a CRI streaming server as containerd's: SPDY only, remote command
// protocols up to v4, port-forward protocol portforward.k8s.io. Its exec commands:
//
//	cat          copies stdin to stdout until stdin ends
//	exit N       writes "bye" to stderr (stdout with a TTY) and exits with N
//	size         writes the first terminal size it is sent, as WxH
//
// Port-forward streams echo what they receive, prefixed with the port.
type fakeStreamServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request
}

func newFakeStreamServer(t *testing.T) *fakeStreamServer {
	f := &fakeStreamServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/exec", f.serveExec)
	mux.HandleFunc("/portforward", f.servePortForward)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r)
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeStreamServer) lastRequest() *http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		return nil
	}
	return f.requests[len(f.requests)-1]
}

// upgrade answers an SPDY upgrade and returns the streams the client opens.
func upgrade(w http.ResponseWriter, r *http.Request, protocols ...string) (httpstream.Connection, <-chan httpstream.Stream, bool) {
	if _, err := httpstream.Handshake(r, w, protocols); err != nil {
		return nil, nil, false
	}
	streams := make(chan httpstream.Stream, 16)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, _ <-chan struct{}) error {
		streams <- s
		return nil
	})
	return conn, streams, conn != nil
}

func (f *fakeStreamServer) serveExec(w http.ResponseWriter, r *http.Request) {
	conn, incoming, ok := upgrade(w, r, constants.StreamProtocolV4Name)
	if !ok {
		return
	}
	defer conn.Close()
	q := r.URL.Query()
	tty := q.Get("tty") == "1"
	want := 1 // error
	for _, name := range []string{"stdin", "stdout", "stderr"} {
		if q.Get(name) == "1" {
			want++
		}
	}
	if tty {
		want++ // resize
	}
	streams := map[string]httpstream.Stream{}
	for len(streams) < want {
		select {
		case s := <-incoming:
			streams[s.Headers().Get(v1.StreamType)] = s
		case <-time.After(10 * time.Second):
			return
		}
	}
	code := runFakeCommand(q["cmd"], streams, tty)
	for _, name := range []string{v1.StreamTypeStdout, v1.StreamTypeStderr} {
		if s := streams[name]; s != nil {
			s.Close()
		}
	}
	status := metav1.Status{Status: metav1.StatusSuccess}
	if code != 0 {
		status = metav1.Status{Status: metav1.StatusFailure, Reason: constants.NonZeroExitCodeReason,
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: constants.ExitCodeCauseType, Message: strconv.Itoa(code)}}}}
	}
	data, _ := json.Marshal(status)
	errStream := streams[v1.StreamTypeError]
	_, _ = errStream.Write(data)
	errStream.Close()
	<-conn.CloseChan()
}

// runFakeCommand runs one of the fake commands over the streams; it returns the exit code.
func runFakeCommand(cmd []string, streams map[string]httpstream.Stream, tty bool) int {
	out := io.Writer(io.Discard)
	if s := streams[v1.StreamTypeStdout]; s != nil {
		out = s
	}
	errOut := out
	if s := streams[v1.StreamTypeStderr]; s != nil && !tty {
		errOut = s
	}
	switch {
	case len(cmd) == 1 && cmd[0] == "cat":
		_, _ = io.Copy(out, streams[v1.StreamTypeStdin])
		return 0
	case len(cmd) == 2 && cmd[0] == "exit":
		fmt.Fprint(errOut, "bye")
		code, _ := strconv.Atoi(cmd[1])
		return code
	case len(cmd) == 1 && cmd[0] == "size":
		var size remotecommand.TerminalSize
		if err := json.NewDecoder(streams[v1.StreamTypeResize]).Decode(&size); err != nil {
			fmt.Fprint(errOut, err)
			return 1
		}
		fmt.Fprintf(out, "%dx%d", size.Width, size.Height)
		return 0
	}
	fmt.Fprintf(errOut, "unknown command %q", cmd)
	return 127
}

func (f *fakeStreamServer) servePortForward(w http.ResponseWriter, r *http.Request) {
	conn, incoming, ok := upgrade(w, r, "portforward.k8s.io")
	if !ok {
		return
	}
	defer conn.Close()
	for {
		select {
		case s := <-incoming:
			if s.Headers().Get(v1.StreamType) == v1.StreamTypeData {
				go echoStream(s)
			}
		case <-conn.CloseChan():
			return
		}
	}
}

// echoStream answers each line read with "<port>:<line>".
func echoStream(s httpstream.Stream) {
	defer s.Close()
	port := s.Headers().Get(v1.PortHeader)
	lines := bufio.NewScanner(s)
	for lines.Scan() {
		if _, err := fmt.Fprintf(s, "%s:%s\n", port, strings.TrimSpace(lines.Text())); err != nil {
			return
		}
	}
}
