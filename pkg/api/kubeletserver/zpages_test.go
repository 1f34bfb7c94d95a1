package kubeletserver

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"testing"

	kc "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/pkg/config"
)

// get sends a GET with an Accept header.
func get(t *testing.T, url, accept string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, body: string(body), hdr: resp.Header}
}

// statuszText is upstream's text page, whatever delimiter it drew.
var statuszText = regexp.MustCompile(`^
kubelet statusz
Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.

Started(: |:|=| ) [A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d:\d\d [A-Z]+ \d{4}
Up(: |:|=| ) \d+ hr \d\d min \d\d sec
Go version(: |:|=| ) ` + regexp.QuoteMeta(runtime.Version()) + `
Binary version(: |:|=| ) 1\.37\.2
Emulation version(: |:|=| ) 1\.37
Paths(: |:|=| ) /configz /debug /healthz /metrics
$`)

func TestStatusz(t *testing.T) {
	o := openOptions(t)
	if !o.Statusz || !o.Flagz {
		t.Fatal("ComponentStatusz and ComponentFlagz are on by default in v1.37")
	}
	s := startServer(t, o, Deps{})
	url := base(s) + "/statusz"
	for _, accept := range []string{"", "text/plain", "*/*", "application/json;v=foo;g=config.k8s.io;as=Statusz,*/*"} {
		r := get(t, url, accept)
		m := statuszText.FindStringSubmatch(r.body)
		if r.code != 200 || r.hdr.Get("Content-Type") != "text/plain; charset=utf-8" || m == nil {
			t.Fatalf("Accept %q: %d %s %q", accept, r.code, r.hdr.Get("Content-Type"), r.body)
		}
		for _, delim := range m[2:] {
			if delim != m[1] {
				t.Errorf("Accept %q: delimiters %q differ", accept, m[1:])
			}
		}
	}

	r := get(t, url, "application/json;v=v1beta1;g=config.k8s.io;as=Statusz")
	var got statusz
	if err := json.Unmarshal([]byte(r.body), &got); r.code != 200 || err != nil {
		t.Fatalf("JSON: %d %q %v", r.code, r.body, err)
	}
	if got.Kind != "Statusz" || got.APIVersion != "config.k8s.io/v1beta1" || got.Name != "kubelet" || got.BinaryVersion != "1.37.2" ||
		got.EmulationVersion != "1.37" || got.GoVersion != runtime.Version() || got.StartTime.IsZero() ||
		strings.Join(got.Paths, " ") != "/configz /debug /healthz /metrics" || r.hdr.Get("Warning") != "" {
		t.Errorf("JSON: %+v, warning %q", got, r.hdr.Get("Warning"))
	}
	r = get(t, url, "application/yaml;v=v1alpha1;g=config.k8s.io;as=Statusz")
	got = statusz{}
	if err := yaml.Unmarshal([]byte(r.body), &got); r.code != 200 || err != nil || got.APIVersion != "config.k8s.io/v1alpha1" {
		t.Fatalf("YAML v1alpha1: %d %q %v", r.code, r.body, err)
	}
	if w := r.hdr.Get("Warning"); !strings.Contains(w, "This version of the statusz endpoint is deprecated") {
		t.Errorf("v1alpha1 warning %q", w)
	}
	for _, accept := range []string{"application/xml", "application/json", "application/json;v=v1beta1;g=config.k8s.io",
		"application/json;v=v1beta1;g=config.k8s.io;as=Flagz"} {
		if r := get(t, url, accept); r.code != http.StatusNotAcceptable {
			t.Errorf("Accept %q: %d, want 406", accept, r.code)
		}
	}
}

func TestFlagz(t *testing.T) {
	o := openOptions(t)
	o.EnableSystemLogHandler = false
	o.Flags = map[string]string{"v": "2", "node-ip": "10.0.0.1", "config": "/etc/kubelet.yaml"}
	s := startServer(t, o, Deps{})
	r := get(t, base(s)+"/flagz", "")
	want := regexp.MustCompile(`^
kubelet flagz
Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only.
config(: |:|=| )/etc/kubelet.yaml
node-ip(: |:|=| )10\.0\.0\.1
v(: |:|=| )2
$`)
	if r.code != 200 || r.hdr.Get("Content-Type") != "text/plain; charset=utf-8" || !want.MatchString(r.body) {
		t.Fatalf("%d %s %q", r.code, r.hdr.Get("Content-Type"), r.body)
	}
	if again := get(t, base(s)+"/flagz", "text/plain"); again.body != r.body {
		t.Errorf("the text changed between requests: %q then %q", r.body, again.body)
	}
	r = get(t, base(s)+"/flagz", "application/json;v=v1beta1;g=config.k8s.io;as=Flagz")
	var got flagz
	if err := json.Unmarshal([]byte(r.body), &got); r.code != 200 || err != nil || got.Kind != "Flagz" ||
		got.APIVersion != "config.k8s.io/v1beta1" || got.Name != "kubelet" || got.Flags["node-ip"] != "10.0.0.1" {
		t.Fatalf("JSON: %d %q %v", r.code, r.body, err)
	}
	// With flagz served and the log handler off, statusz lists both.
	if r := get(t, base(s)+"/statusz", ""); !strings.Contains(r.body, " /configz /debug /flagz /healthz /logs /metrics\n") {
		t.Errorf("statusz paths: %q", r.body)
	}
}

// The pages are served only where upstream installs them: on the HTTPS server with the
// debugging handlers, with their feature gates on, /flagz with a command line to list.
func TestZPagesOff(t *testing.T) {
	c := client()
	cases := map[string]func(o *Options){
		"gates off":                func(o *Options) { o.Statusz, o.Flagz = false, false },
		"debugging handlers off":   func(o *Options) { o.EnableDebuggingHandlers = false },
		"no command line (flagz)":  func(o *Options) { o.Flags = nil },
		"ComponentFlagz off alone": func(o *Options) { o.Flagz = false },
	}
	for name, change := range cases {
		o := openOptions(t)
		o.Flags = map[string]string{"v": "0"}
		change(&o)
		s := startServer(t, o, Deps{})
		for path, served := range map[string]bool{"/statusz": o.Statusz && o.EnableDebuggingHandlers,
			"/flagz": o.Flagz && o.Flags != nil && o.EnableDebuggingHandlers} {
			r := do(t, c, "GET", base(s)+path, "")
			if served != (r.code == 200) || (!served && r.code != 404) {
				t.Errorf("%s: %s answered %d, served %v", name, path, r.code, served)
			}
		}
	}

	ro := openOptions(t)
	ro.ReadOnlyPort = freePort(t)
	ro.Flags = map[string]string{"v": "0"}
	s := startServer(t, ro, Deps{})
	for _, path := range []string{"/statusz", "/flagz"} {
		if r := do(t, &http.Client{}, "GET", "http://"+s.ReadOnlyAddr().String()+path, ""); r.code != 404 {
			t.Errorf("read-only %s: %d, want 404", path, r.code)
		}
	}
}

func TestZPagesFeatureGates(t *testing.T) {
	cfg := &kc.KubeletConfiguration{FeatureGates: map[string]bool{"ComponentStatusz": false}}
	config.SetDefaults(cfg)
	o := OptionsFromConfig(cfg, testNode, "node-a.example", nil, t.TempDir())
	if o.Statusz || !o.Flagz {
		t.Errorf("featureGates %v: statusz %v flagz %v", cfg.FeatureGates, o.Statusz, o.Flagz)
	}
}

func TestNegotiateZPage(t *testing.T) {
	for accept, want := range map[string]string{
		"": "text",
		"text/plain; q=0.5, application/json;g=config.k8s.io;v=v1beta1;as=Statusz": "json/v1beta1",
		"application/json;g=config.k8s.io;v=v1beta1;as=Statusz;q=0.1, text/*":      "text",
		"application/yaml;g=config.k8s.io;v=v1alpha1;as=Statusz":                   "yaml/v1alpha1",
		"text/plain;as=Statusz": "none",
		"*/*;q=0":               "none",
		"image/png":             "none",
	} {
		format, v, ok := negotiateZPage(accept, "Statusz")
		got := "none"
		if ok {
			got = format
			if v != "" {
				got += "/" + v
			}
		}
		if got != want {
			t.Errorf("Accept %q: %s, want %s", accept, got, want)
		}
	}
}
