package kubeletserver

import (
	"net/http"
	"reflect"
	"testing"
)

func TestIsSubpath(t *testing.T) {
	for _, tc := range []struct {
		sub, path string
		want      bool
	}{
		{"", "", true}, {"/foo", "/foo", true}, {"/foo/", "/foo/", true}, {"/foo/bar", "/foo/bar", true},
		{"/foo", "/", true}, {"/foo/", "/", true}, {"/foo/bar", "/", true},
		{"/foo/", "/foo", true}, {"/foo/bar", "/foo", true},
		{"/foo", "/bar", false}, {"/foo", "/foobar", false}, {"/foobar", "/foo", false},
	} {
		if got := isSubpath(tc.sub, tc.path); got != tc.want {
			t.Errorf("isSubpath(%q, %q) = %v, want %v", tc.sub, tc.path, got, tc.want)
		}
	}
}

// authzCases are upstream's AuthzTestCases with fine-grained authorization (GA in 1.36):
// path → subresources, most specific first.
var authzCases = map[string][]string{
	"/attach/ns/pod/ctr":      {"proxy"},
	"/attach/ns/pod/uid/ctr":  {"proxy"},
	"/checkpoint/ns/pod/ctr":  {"checkpoint"},
	"/configz":                {"configz", "proxy"},
	"/flagz":                  {"configz"},
	"/statusz":                {"statusz"},
	"/containerLogs/ns/p/c":   {"proxy"},
	"/debug/flags/v":          {"proxy"},
	"/debug/pprof/heap":       {"proxy"},
	"/exec/ns/pod/ctr":        {"proxy"},
	"/exec/ns/pod/uid/ctr":    {"proxy"},
	"/healthz":                {"healthz", "proxy"},
	"/healthz/log":            {"healthz", "proxy"},
	"/healthz/ping":           {"healthz", "proxy"},
	"/healthz/syncloop":       {"healthz", "proxy"},
	"/logs/":                  {"log"},
	"/logs/syslog":            {"log"},
	"/metrics":                {"metrics"},
	"/metrics/slis":           {"metrics"},
	"/metrics/cadvisor":       {"metrics"},
	"/metrics/probes":         {"metrics"},
	"/metrics/resource":       {"metrics"},
	"/pods":                   {"pods", "proxy"},
	"/pods/":                  {"pods", "proxy"},
	"/podsx":                  {"proxy"},
	"/portForward/ns/pod":     {"proxy"},
	"/portForward/ns/pod/uid": {"proxy"},
	"/run/ns/pod/ctr":         {"proxy"},
	"/run/ns/pod/uid/ctr":     {"proxy"},
	"/runningpods/":           {"pods", "proxy"},
	"/stats/":                 {"stats"},
	"/stats/summary":          {"stats"},
	"/":                       {"proxy"},
}

func TestRequestAttributes(t *testing.T) {
	u := &UserInfo{Name: "phibby"}
	verbs := map[string]string{"POST": "create", "GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "HEAD": "", "OPTIONS": ""}
	for path, subs := range authzCases {
		for method, verb := range verbs {
			r, _ := http.NewRequest(method, "https://localhost:10250"+path, nil)
			var want []Attributes
			for _, sub := range subs {
				want = append(want, Attributes{User: u, Verb: verb, APIVersion: "v1", Resource: "nodes", Subresource: sub, Name: testNode, Path: path})
			}
			if got := RequestAttributes(testNode, u, r); !reflect.DeepEqual(got, want) {
				t.Errorf("%s %s:\n got %+v\nwant %+v", method, path, got, want)
			}
		}
	}
}
