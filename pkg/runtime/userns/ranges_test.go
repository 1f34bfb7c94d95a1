package userns

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var kubelet = &user.User{Username: "kubelet", Uid: "990"}

// sources returns subIDSources over temp subuid/subgid files with the given contents
// ("" for a missing file), a kubelet user, and no getsubids.
func sources(t *testing.T, subuid, subgid string) subIDSources {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if content != "" {
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return path
	}
	return subIDSources{
		lookupUser: func(string) (*user.User, error) { return kubelet, nil },
		lookPath:   func(string) (string, error) { return "", errors.New("not found") },
		output: func(string, ...string) ([]byte, error) {
			t.Error("getsubids run although not installed")
			return nil, nil
		},
		subuid: write("subuid", subuid),
		subgid: write("subgid", subgid),
	}
}

func TestKubeletRangeFromSubIDFiles(t *testing.T) {
	def := DefaultRange(65536)
	cases := []struct {
		name, subuid, subgid string
		want                 IDRange
		err                  string
	}{
		{name: "no files", want: def},
		{name: "other users only", subuid: "alice:100000:65536\n", subgid: "alice:100000:65536\n", want: def},
		{name: "by name", subuid: "alice:100000:65536\nkubelet:65536:7208960\n", subgid: "# comment\nkubelet:65536:7208960\n",
			want: IDRange{First: 65536, Length: 7208960}},
		{name: "by uid", subuid: "990:131072:131072\n", subgid: "990:131072:131072\n", want: IDRange{First: 131072, Length: 131072}},
		{name: "mismatch", subuid: "kubelet:65536:65536\n", subgid: "kubelet:131072:65536\n", err: "mismatched subuids and subgids"},
		{name: "only subuid", subuid: "kubelet:65536:65536\n", err: "exactly one range"},
		{name: "two ranges", subuid: "kubelet:65536:65536\nkubelet:131072:65536\n", subgid: "kubelet:65536:65536\n", err: "exactly one range"},
		{name: "malformed", subuid: "kubelet:65536\n", subgid: "kubelet:65536:65536\n", err: "want name:first:count"},
		{name: "not a number", subuid: "kubelet:x:65536\n", subgid: "kubelet:65536:65536\n", err: "invalid first ID"},
		{name: "another user's bad line is ignored", subuid: "bob\nkubelet:65536:65536\n", subgid: "kubelet:65536:65536\n",
			want: IDRange{First: 65536, Length: 65536}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sources(t, tc.subuid, tc.subgid).kubeletRange(65536)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestKubeletRangeWithoutTheUser(t *testing.T) {
	s := sources(t, "kubelet:65536:65536\n", "kubelet:65536:65536\n")
	s.lookupUser = func(name string) (*user.User, error) { return nil, user.UnknownUserError(name) }
	if got, err := s.kubeletRange(65536); err != nil || got != DefaultRange(65536) {
		t.Errorf("got %+v, %v; want the default range", got, err)
	}
	s.lookupUser = func(string) (*user.User, error) { return nil, errors.New("nss down") }
	if _, err := s.kubeletRange(65536); err == nil {
		t.Error("a failed user lookup gave a range")
	}
}

func TestKubeletRangeFromGetsubids(t *testing.T) {
	s := sources(t, "", "")
	s.lookPath = func(string) (string, error) { return "/usr/bin/getsubids", nil }
	var ran [][]string
	outputs := map[string]string{"kubelet": "0: kubelet 65536 2147483648\n", "-g kubelet": "0: kubelet 65536 2147483648\n"}
	s.output = func(name string, args ...string) ([]byte, error) {
		ran = append(ran, append([]string{name}, args...))
		out, ok := outputs[strings.Join(args, " ")]
		if !ok {
			return nil, errors.New("exit status 1")
		}
		return []byte(out), nil
	}
	got, err := s.kubeletRange(65536)
	if err != nil || got != (IDRange{First: 65536, Length: 2147483648}) {
		t.Errorf("got %+v, %v", got, err)
	}
	if len(ran) != 2 || ran[0][0] != "/usr/bin/getsubids" || strings.Join(ran[1][1:], " ") != "-g kubelet" {
		t.Errorf("ran %v", ran)
	}

	outputs["-g kubelet"] = "0: kubelet 131072 65536\n"
	if _, err := s.kubeletRange(65536); err == nil || !strings.Contains(err.Error(), "mismatched") {
		t.Errorf("mismatched output: err %v", err)
	}
	delete(outputs, "-g kubelet")
	if _, err := s.kubeletRange(65536); err == nil || !strings.Contains(err.Error(), "additional gids") {
		t.Errorf("failing getsubids -g: err %v", err)
	}
}

func TestParseGetsubids(t *testing.T) {
	for in, want := range map[string]string{
		"0: kubelet 65536 2147483648\n":                     "",
		"0: kubelet 65536 2147483648\n1: kubelet 1 65536\n": "only one line",
		"0: kubelet 65536\n":                                "invalid line",
		"0: kubelet 65536 x\n":                              "invalid ID count",
	} {
		_, err := parseGetsubids(in)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: err %v, want %q", in, err, want)
		}
	}
}

// statusReader answers Status with fixed handlers and counts the calls.
type statusReader struct {
	handlers []*runtimeapi.RuntimeHandler
	err      error
	calls    int
}

func (s *statusReader) Status(context.Context, bool) (*runtimeapi.StatusResponse, error) {
	s.calls++
	if s.err != nil {
		return nil, s.err
	}
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{}, RuntimeHandlers: s.handlers}, nil
}

func handler(name string, userns bool) *runtimeapi.RuntimeHandler {
	return &runtimeapi.RuntimeHandler{Name: name, Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: userns}}
}

func TestRuntimeHandlersReadsTheStatusFeatures(t *testing.T) {
	ctx := context.Background()
	// containerd 2.x lists the default handler "" and "runc".
	rt := &statusReader{handlers: []*runtimeapi.RuntimeHandler{handler("", true), handler("runc", true), handler("kata", false), {Name: "old"}}}
	r := NewRuntimeHandlers(rt)
	for name, want := range map[string]bool{"": true, "runc": true, "kata": false, "old": false} {
		if got, err := r.SupportsUserNamespaces(ctx, name); err != nil || got != want {
			t.Errorf("handler %q: %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := r.SupportsUserNamespaces(ctx, "gvisor"); err == nil || err.Error() != `the handler "gvisor" is not known` {
		t.Errorf("unknown handler: %v", err)
	}

	// containerd 1.6 lists no handlers: nothing supports user namespaces, without error.
	if got, err := NewRuntimeHandlers(&statusReader{}).SupportsUserNamespaces(ctx, ""); got || err != nil {
		t.Errorf("runtime without handlers: %v, %v", got, err)
	}
	if _, err := NewRuntimeHandlers(&statusReader{err: errors.New("unavailable")}).SupportsUserNamespaces(ctx, ""); err == nil {
		t.Error("a failing Status said something")
	}
}

// Recursive read-only support as the runtime lists it; a runtime listing no handlers
// (containerd 1.6) supports it nowhere.
func TestRuntimeHandlersRecursiveReadOnly(t *testing.T) {
	ctx := context.Background()
	r := NewRuntimeHandlers(&statusReader{handlers: []*runtimeapi.RuntimeHandler{
		{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true}}, handler("test-handler", true)}})
	for name, want := range map[string]bool{"": true, "test-handler": false, "gone": false} {
		if got := r.SupportsRecursiveReadOnlyMounts(ctx, name); got != want {
			t.Errorf("handler %q: %v, want %v", name, got, want)
		}
	}
	if NewRuntimeHandlers(&statusReader{}).SupportsRecursiveReadOnlyMounts(ctx, "") {
		t.Error("a runtime without handlers supports recursive read-only mounts")
	}
}

func TestRuntimeHandlersCachesForFiveSeconds(t *testing.T) {
	rt := &statusReader{handlers: []*runtimeapi.RuntimeHandler{handler("", true)}}
	r := NewRuntimeHandlers(rt)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	ask := func() {
		if ok, err := r.SupportsUserNamespaces(context.Background(), ""); !ok || err != nil {
			t.Fatalf("%v %v", ok, err)
		}
	}
	ask()
	now = now.Add(4 * time.Second)
	ask()
	if rt.calls != 1 {
		t.Errorf("%d Status calls within 5 s, want 1", rt.calls)
	}
	now = now.Add(time.Second)
	ask()
	if rt.calls != 2 {
		t.Errorf("%d Status calls after 5 s, want 2", rt.calls)
	}
}
