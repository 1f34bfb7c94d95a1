package kuberuntime

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

type staticStatus struct{ ips []string }

func (s staticStatus) GetPodStatus(context.Context, types.UID, string, string) (*container.PodStatus, error) {
	return &container.PodStatus{IPs: s.ips}, nil
}

type recordingRunner struct {
	cmd    []string
	output []byte
	err    error
}

func (r *recordingRunner) RunInContainer(_ context.Context, _ container.ContainerID, cmd []string, _ time.Duration) ([]byte, error) {
	r.cmd = cmd
	return r.output, r.err
}

func hookPod(c v1.Container) *v1.Pod { return newPod("hooks", c) }

func TestHookExec(t *testing.T) {
	runner := &recordingRunner{}
	h := newHookRunner(runner, staticStatus{}, record.NewFakeRecorder(10))
	c := ctr("app")
	handler := &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo hi"}}}
	if msg, err := h.run(context.Background(), container.ContainerID{ID: "x"}, hookPod(c), &c, handler); err != nil || msg != "" {
		t.Fatalf("run: %q %v", msg, err)
	}
	if strings.Join(runner.cmd, " ") != "sh -c echo hi" {
		t.Errorf("ran %v", runner.cmd)
	}
	runner.output, runner.err = []byte("bad things"), errors.New("exit 2")
	msg, err := h.run(context.Background(), container.ContainerID{ID: "x"}, hookPod(c), &c, handler)
	if err == nil || !strings.Contains(msg, `message: "bad things"`) || !strings.Contains(msg, "error: exit 2") {
		t.Fatalf("failure message %q, err %v", msg, err)
	}
}

func TestHookHTTPGet(t *testing.T) {
	type request struct{ path, agent, custom string }
	got := make(chan request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- request{r.URL.RequestURI(), r.UserAgent(), r.Header.Get("X-Custom")}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	host, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)

	h := newHookRunner(&recordingRunner{}, staticStatus{ips: []string{host}}, record.NewFakeRecorder(10))
	c := ctr("app")
	c.Ports = []v1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}
	handler := &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{
		Path: "/hook?x=1", Port: intstr.FromString("http"),
		HTTPHeaders: []v1.HTTPHeader{{Name: "X-Custom", Value: "yes"}},
	}}
	// Host defaults to the pod IP; a named port resolves from the container's ports; an
	// error status is not a failure, as upstream.
	if msg, err := h.run(context.Background(), container.ContainerID{ID: "x"}, hookPod(c), &c, handler); err != nil {
		t.Fatalf("run: %q %v", msg, err)
	}
	r := <-got
	if r.path != "/hook?x=1" || r.custom != "yes" || !strings.HasPrefix(r.agent, "kube-lifecycle/") {
		t.Errorf("request %+v", r)
	}

	// HTTPS to a plain HTTP server falls back to HTTP, with an event.
	rec := record.NewFakeRecorder(10)
	h = newHookRunner(&recordingRunner{}, staticStatus{}, rec)
	handler = &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Host: host, Port: intstr.FromInt32(int32(port)), Scheme: v1.URISchemeHTTPS, Path: "/tls"}}
	if msg, err := h.run(context.Background(), container.ContainerID{ID: "x"}, hookPod(c), &c, handler); err != nil {
		t.Fatalf("https fallback: %q %v", msg, err)
	}
	if r := <-got; r.path != "/tls" {
		t.Errorf("fallback request %+v", r)
	}
	if ev := <-rec.Events; !strings.HasPrefix(ev, "Warning LifecycleHTTPFallback") {
		t.Errorf("event %q", ev)
	}

	// Nothing listening: a failure with upstream's message.
	srv.Close()
	msg, err := h.run(context.Background(), container.ContainerID{ID: "x"}, hookPod(c), &c, handler)
	if err == nil || !strings.HasPrefix(msg, `HTTP lifecycle hook (/tls) for Container "app" in Pod "hooks_ns(hooks-uid)" failed - error:`) {
		t.Fatalf("msg %q err %v", msg, err)
	}
}

func TestResolveContainerPort(t *testing.T) {
	c := &v1.Container{Ports: []v1.ContainerPort{{Name: "web", ContainerPort: 8080}}}
	for _, tc := range []struct {
		port    intstr.IntOrString
		want    int
		wantErr bool
	}{
		{intstr.FromInt32(80), 80, false},
		{intstr.FromString("web"), 8080, false},
		{intstr.FromString("9090"), 9090, false},
		{intstr.FromString("nope"), 0, true},
		{intstr.FromInt32(0), 0, true},
		{intstr.FromInt32(70000), 0, true},
	} {
		got, err := resolveContainerPort(tc.port, c)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("%v: got %d, %v", tc.port.String(), got, err)
		}
	}
}

func TestHookSleep(t *testing.T) {
	h := newHookRunner(&recordingRunner{}, staticStatus{}, record.NewFakeRecorder(10))
	c := ctr("app")
	if _, err := h.run(context.Background(), container.ContainerID{}, hookPod(c), &c, &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 0}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	_, err := h.run(ctx, container.ContainerID{}, hookPod(c), &c, &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 60}})
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("cancelled sleep: err %v after %v", err, time.Since(start))
	}
	if _, err := h.run(ctx, container.ContainerID{}, hookPod(c), &c, &v1.LifecycleHandler{}); err == nil {
		t.Error("empty handler accepted")
	}
}
