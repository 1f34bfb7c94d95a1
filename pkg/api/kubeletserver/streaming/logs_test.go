package streaming

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// writeLines is a runtime whose log has the given lines on stdout and "oops" on stderr.
func writeLines(lines ...string) func(context.Context, *v1.PodLogOptions, io.Writer, io.Writer) error {
	return func(_ context.Context, _ *v1.PodLogOptions, stdout, stderr io.Writer) error {
		for _, l := range lines {
			if stdout != nil {
				fmt.Fprintln(stdout, l)
			}
		}
		if stderr != nil {
			fmt.Fprintln(stderr, "oops")
		}
		return nil
	}
}

func TestContainerLogsOptions(t *testing.T) {
	env := newTestEnv(t, allFeatures)
	var got *v1.PodLogOptions
	env.runtime.logs = func(_ context.Context, opts *v1.PodLogOptions, stdout, _ io.Writer) error {
		got = opts
		_, err := io.WriteString(stdout, "line\n")
		return err
	}
	q := "?follow=true&previous=0&timestamps=1&tailLines=5&limitBytes=100&sinceTime=2026-01-02T03:04:05Z&container=ignored"
	env.pods.pods["ns/web"].Status.ContainerStatuses[0].LastTerminationState.Terminated = &v1.ContainerStateTerminated{ContainerID: "containerd://app-0"}
	code, body := do(t, http.MethodGet, env.server.URL+"/containerLogs/ns/web/app"+q)
	if code != 200 || body != "line\n" {
		t.Fatalf("got %d %q", code, body)
	}
	if !got.Follow || got.Previous || !got.Timestamps || *got.TailLines != 5 || *got.LimitBytes != 100 ||
		!got.SinceTime.Time.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) || got.SinceSeconds != nil {
		t.Errorf("options = %+v", got)
	}
	if calls := env.runtime.recorded(); len(calls) != 1 || calls[0] != "logs app-1" {
		t.Errorf("runtime calls = %q, want the running instance", calls)
	}

	// previous reads the instance before; "tail" is the old name of tailLines.
	code, _ = do(t, http.MethodGet, env.server.URL+"/containerLogs/ns/web/app?previous=true&tail=3")
	if calls := env.runtime.recorded(); code != 200 || calls[len(calls)-1] != "logs app-0" || *got.TailLines != 3 {
		t.Errorf("previous: %d, calls %q, tail %v", code, calls, got.TailLines)
	}
	code, _ = do(t, http.MethodGet, env.server.URL+"/containerLogs/ns/web/app?tail=all&sinceSeconds=10")
	if code != 200 || got.TailLines != nil || *got.SinceSeconds != 10 {
		t.Errorf("tail=all: %d, options %+v", code, got)
	}
}

func TestContainerLogsErrors(t *testing.T) {
	cases := []struct {
		name, method, path string
		code               int
		body               string
	}{
		{"missing container", "GET", "/containerLogs/ns/web/", 400, `{"message": "Missing container name."}`},
		{"bad number", "GET", "/containerLogs/ns/web/app?tailLines=x", 400, `{"message": "Unable to decode query."}`},
		{"bad time", "GET", "/containerLogs/ns/web/app?sinceTime=yesterday", 400, `{"message": "Unable to decode query."}`},
		{"negative tail", "GET", "/containerLogs/ns/web/app?tailLines=-1", 422, `{"message": "Invalid request."}`},
		{"zero limit", "GET", "/containerLogs/ns/web/app?limitBytes=0", 422, `{"message": "Invalid request."}`},
		{"zero since", "GET", "/containerLogs/ns/web/app?sinceSeconds=0", 422, `{"message": "Invalid request."}`},
		{"both since", "GET", "/containerLogs/ns/web/app?sinceSeconds=5&sinceTime=2026-01-02T03:04:05Z", 422, `{"message": "Invalid request."}`},
		{"unknown stream", "GET", "/containerLogs/ns/web/app?stream=Both", 422, `{"message": "Invalid request."}`},
		{"stream and tail", "GET", "/containerLogs/ns/web/app?stream=Stdout&tailLines=1", 422, `{"message": "Invalid request."}`},
		{"stream without the gate", "GET", "/containerLogs/ns/web/app?stream=Stderr", 400,
			`unable to return the given log stream: "Stderr". Please enable PodLogsQuerySplitStreams feature gate in kubelet`},
		{"no pod", "GET", "/containerLogs/ns/nope/app", 404, `pod "nope" does not exist`},
		{"no container", "GET", "/containerLogs/ns/web/nope", 404, `container "nope" not found in pod "web"`},
		{"not started", "GET", "/containerLogs/ns/web/init", 400, `container "init" in pod "web" is not available`},
		{"no previous", "GET", "/containerLogs/ns/web/app?previous=1", 400, `previous terminated container "app" in pod "web" not found`},
		{"post", "POST", "/containerLogs/ns/web/app", 405, "405: Method Not Allowed"},
		{"uid form does not exist", "GET", "/containerLogs/ns/web/uid-1/app", 404, "404: Page Not Found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, allFeatures)
			env.runtime.logs = writeLines("x")
			code, body := do(t, tc.method, env.server.URL+tc.path)
			if code != tc.code || body != tc.body {
				t.Errorf("got %d %q, want %d %q", code, body, tc.code, tc.body)
			}
		})
	}
}

// TestContainerLogsEmptySegments: a server mux cleans "//" away before the handler
// sees it, so these are for a router that does not.
func TestContainerLogsEmptySegments(t *testing.T) {
	env := newTestEnv(t, allFeatures)
	for path, want := range map[string]string{
		"/containerLogs/ns//app":  `{"message": "Missing podID."}`,
		"/containerLogs//web/app": `{"message": "Missing podNamespace."}`,
	} {
		rec := httptest.NewRecorder()
		h, _ := env.mux.Handler(httptest.NewRequest(http.MethodGet, "/containerLogs/x/y/z", nil))
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != 400 || rec.Body.String() != want {
			t.Errorf("%s: got %d %q, want 400 %q", path, rec.Code, rec.Body, want)
		}
	}
}

func TestContainerLogsStreams(t *testing.T) {
	cases := []struct {
		stream string
		split  bool
		want   string
	}{
		{"", false, "a\noops\n"},
		{"All", false, "a\noops\n"},
		{"Stdout", true, "a\n"},
		{"Stderr", true, "oops\n"},
	}
	for _, tc := range cases {
		env := newTestEnv(t, Features{PodLogsQuerySplitStreams: tc.split})
		env.runtime.logs = writeLines("a")
		q := url.Values{}
		if tc.stream != "" {
			q.Set("stream", tc.stream)
		}
		code, body := do(t, http.MethodGet, env.server.URL+"/containerLogs/ns/web/app?"+q.Encode())
		if code != 200 || body != tc.want {
			t.Errorf("stream %q: got %d %q, want %q", tc.stream, code, body, tc.want)
		}
	}
}

// TestContainerLogsFollowFlushes: a follower sees each line while the stream goes on,
// and the runtime's reader ends when the client goes away.
func TestContainerLogsFollowFlushes(t *testing.T) {
	env := newTestEnv(t, allFeatures)
	next, ended := make(chan string), make(chan error, 1)
	env.runtime.logs = func(ctx context.Context, _ *v1.PodLogOptions, stdout, _ io.Writer) error {
		for {
			select {
			case line := <-next:
				fmt.Fprintln(stdout, line)
			case <-ctx.Done():
				ended <- ctx.Err()
				return ctx.Err()
			}
		}
	}
	resp, err := http.Get(env.server.URL + "/containerLogs/ns/web/app?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	// The headers come before any line.
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	lines := bufio.NewReader(resp.Body)
	for _, want := range []string{"one", "two"} {
		next <- want
		got, err := lines.ReadString('\n')
		if err != nil || got != want+"\n" {
			t.Fatalf("read %q, %v; want %q", got, err, want)
		}
	}
	resp.Body.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("reader ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("log reader still running after the client left")
	}
}

func TestContainerLogsErrorAfterStart(t *testing.T) {
	env := newTestEnv(t, allFeatures)
	env.runtime.logs = func(_ context.Context, _ *v1.PodLogOptions, stdout, _ io.Writer) error {
		fmt.Fprintln(stdout, "partial")
		return errors.New("failed to open log file")
	}
	code, body := do(t, http.MethodGet, env.server.URL+"/containerLogs/ns/web/app")
	if code != 200 || body != "partial\nfailed to open log file" {
		t.Errorf("got %d %q", code, body)
	}
}

func TestContainerIDForLogs(t *testing.T) {
	terminated := func(id string) *v1.ContainerStateTerminated { return &v1.ContainerStateTerminated{ContainerID: id} }
	cases := []struct {
		name     string
		status   v1.ContainerStatus
		previous bool
		want     string
	}{
		{"running", v1.ContainerStatus{ContainerID: "cri://now", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}, false, "now"},
		{"previous", v1.ContainerStatus{ContainerID: "cri://now", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}},
			LastTerminationState: v1.ContainerState{Terminated: terminated("cri://before")}}, true, "before"},
		{"no previous", v1.ContainerStatus{State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}, true,
			`previous terminated container "c" in pod "p" not found`},
		{"terminated", v1.ContainerStatus{State: v1.ContainerState{Terminated: terminated("cri://done")}}, false, "done"},
		{"terminated without ID shows the one before", v1.ContainerStatus{State: v1.ContainerState{Terminated: terminated("")},
			LastTerminationState: v1.ContainerState{Terminated: terminated("cri://before")}}, false, "before"},
		{"terminated without any ID", v1.ContainerStatus{State: v1.ContainerState{Terminated: terminated("")}}, false,
			`container "c" in pod "p" is terminated`},
		{"waiting after a run (crash loop)", v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: v1.ContainerState{Terminated: terminated("cri://crashed")}}, false, "crashed"},
		{"image pull", v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ErrImagePull"}}}, false,
			`container "c" in pod "p" is waiting to start: image can't be pulled`},
		{"image back-off", v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}, false,
			`container "c" in pod "p" is waiting to start: trying and failing to pull image`},
		{"creating", v1.ContainerStatus{State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}, false,
			`container "c" in pod "p" is waiting to start: ContainerCreating`},
		{"no state", v1.ContainerStatus{}, false, `container "c" in pod "p" is waiting to start - no logs yet`},
	}
	for _, tc := range cases {
		tc.status.Name = "c"
		// Init containers and ephemeral containers are looked at too.
		for _, status := range []v1.PodStatus{
			{ContainerStatuses: []v1.ContainerStatus{tc.status}},
			{InitContainerStatuses: []v1.ContainerStatus{tc.status}},
			{EphemeralContainerStatuses: []v1.ContainerStatus{tc.status}},
		} {
			id, err := containerIDForLogs("p", &status, "c", tc.previous)
			got := id.ID
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
			}
		}
	}
}

// TestContainerLogsPrefersTheKubeletsStatus: the status the kubelet computed wins over
// the one the pod came with (which may be stale or empty).
func TestContainerLogsPrefersTheKubeletsStatus(t *testing.T) {
	env := newTestEnv(t, allFeatures)
	env.runtime.logs = writeLines("x")
	env.pods.statuses["uid-1"] = v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{
		Name: "app", ContainerID: "containerd://app-2", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}},
	}}}
	do(t, http.MethodGet, env.server.URL+"/containerLogs/ns/web/app")
	if calls := env.runtime.recorded(); len(calls) != 1 || calls[0] != "logs app-2" {
		t.Errorf("runtime calls = %q", calls)
	}
}

func TestDecodeLogOptionsBooleans(t *testing.T) {
	for value, want := range map[string]bool{"true": true, "1": true, "": true, "yes": true, "false": false, "FALSE": false, "0": false} {
		opts, err := decodeLogOptions(url.Values{"follow": {value}})
		if err != nil || opts.Follow != want {
			t.Errorf("follow=%q: %v, %v", value, opts.Follow, err)
		}
	}
	opts, _ := decodeLogOptions(url.Values{"tailLines": {"1", "2"}, "stream": {"Stdout"}})
	if *opts.TailLines != 1 || !ptr.Equal(opts.Stream, ptr.To("Stdout")) {
		t.Errorf("first value must count: %+v", opts)
	}
	if !strings.Contains(fmt.Sprint(decodeLogOptions(url.Values{"limitBytes": {"1e3"}})), "invalid syntax") {
		t.Error("limitBytes=1e3 decoded")
	}
}
