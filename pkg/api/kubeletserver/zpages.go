package kubeletserver

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/version"
)

// The z-pages (component-base's zpages, served by k8s.io/apiserver's statusz and flagz
// packages): /statusz says when the kubelet started, its Go, binary and emulation
// versions and the paths worth a look; /flagz lists the command line's flags. Both answer
// text for humans by default, and, asked for with
// "application/json;g=config.k8s.io;v=v1beta1;as=Statusz" (or Flagz, or YAML, or the
// deprecated v1alpha1), the structured object.

// componentName names the kubelet in the z-pages.
const componentName = "kubelet"

const (
	zpagesGroup   = "config.k8s.io"
	zpagesWarning = "Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only."
)

// zpagesDelimiters separate names from values in the text pages; one is picked at
// random (per server for /flagz, per request for /statusz), as upstream does, so that
// nobody parses them.
var zpagesDelimiters = []string{":", ": ", "=", " "}

// zpagesVersions are the structured versions served; v1alpha1 is deprecated.
var zpagesVersions = map[string]bool{"v1beta1": false, "v1alpha1": true}

// installZPages serves /flagz and then /statusz, as upstream's InstallZPages does last
// on the HTTPS server with the debugging handlers.
func (s *Server) installZPages(mux *http.ServeMux) {
	flagz := s.opts.Flagz && s.opts.Flags != nil
	if flagz {
		mux.Handle(flagzPath, newFlagzHandler(s.opts.Flags))
	}
	if s.opts.Statusz {
		mux.Handle(statuszPath, &statuszHandler{paths: s.statuszPaths(flagz), started: processStart})
	}
}

// statuszPaths are the paths /statusz lists: upstream lists the first element of each
// path its server handles directly rather than through a web service, which with the
// debugging handlers on are /configz, /debug (the debug flags handler, on or off),
// /healthz and /metrics, /flagz when served, and /logs when the log handler is off.
func (s *Server) statuszPaths(flagz bool) []string {
	paths := []string{"/configz", "/debug", "/healthz", "/metrics"}
	if flagz {
		paths = append(paths, "/flagz")
	}
	if !s.opts.EnableSystemLogHandler {
		paths = append(paths, "/logs")
	}
	sort.Strings(paths)
	return paths
}

// processStart is when the process started, in whole seconds, as upstream's statusz
// reads it.
func processStart() time.Time { return time.Unix(metrics.ProcessStartTime().Unix(), 0) }

// statusz is upstream's Statusz object (config.k8s.io v1beta1; v1alpha1 has the same
// fields).
type statusz struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	StartTime         metav1.Time `json:"startTime"`
	UptimeSeconds     int64       `json:"uptimeSeconds"`
	GoVersion         string      `json:"goVersion"`
	BinaryVersion     string      `json:"binaryVersion"`
	EmulationVersion  string      `json:"emulationVersion,omitempty"`
	Paths             []string    `json:"paths"`
}

// flagz is upstream's Flagz object.
type flagz struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Flags             map[string]string `json:"flags,omitempty"`
}

type statuszHandler struct {
	paths   []string
	started func() time.Time
}

func (h *statuszHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.started()
	binary := strings.TrimPrefix(version.KubeletVersion, "v")
	obj := statusz{
		ObjectMeta:       metav1.ObjectMeta{Name: componentName},
		StartTime:        metav1.NewTime(start),
		UptimeSeconds:    max(0, int64(time.Since(start).Seconds())),
		GoVersion:        runtime.Version(),
		BinaryVersion:    binary,
		EmulationVersion: majorMinor(binary),
		Paths:            h.paths,
	}
	serveZPage(w, r, "Statusz", "statusz", &obj, &obj.TypeMeta, func(out io.Writer) {
		writeStatuszText(out, obj)
	})
}

// writeStatuszText is upstream's text serializer: a header, then one line each for the
// start time, uptime, Go, binary and emulation versions, and the paths.
func writeStatuszText(w io.Writer, s statusz) {
	fmt.Fprintf(w, "\n%s statusz\n%s\n", componentName, zpagesWarning)
	delim := html.EscapeString(zpagesDelimiters[rand.IntN(len(zpagesDelimiters))])
	emulation, paths := "", ""
	if s.EmulationVersion != "" {
		emulation = fmt.Sprintf("Emulation version%s %s", delim, html.EscapeString(s.EmulationVersion))
	}
	if len(s.Paths) > 0 {
		paths = fmt.Sprintf("Paths%s %s", delim, html.EscapeString(strings.Join(s.Paths, " ")))
	}
	fmt.Fprintf(w, "\nStarted%[1]s %[2]s\nUp%[1]s %[3]s\nGo version%[1]s %[4]s\nBinary version%[1]s %[5]s\n%[6]s\n%[7]s\n",
		delim, html.EscapeString(s.StartTime.Time.Format(time.UnixDate)), html.EscapeString(uptime(s.StartTime.Time)),
		html.EscapeString(s.GoVersion), html.EscapeString(s.BinaryVersion), emulation, paths)
}

// uptime is upstream's "H hr MM min SS sec".
func uptime(start time.Time) string {
	up := int64(time.Since(start).Seconds())
	return fmt.Sprintf("%d hr %02d min %02d sec", up/3600, (up/60)%60, up%60)
}

// majorMinor is "1.37" for "1.37.2": the emulation version of a binary that emulates
// its own release.
func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return ""
	}
	return parts[0] + "." + parts[1]
}

// flagzHandler serves /flagz; its text, with the delimiter drawn once, is made on the
// first request and served as is afterwards, as upstream caches it.
type flagzHandler struct {
	flags map[string]string
	once  sync.Once
	text  []byte
}

func newFlagzHandler(flags map[string]string) *flagzHandler { return &flagzHandler{flags: flags} }

func (h *flagzHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	obj := flagz{ObjectMeta: metav1.ObjectMeta{Name: componentName}, Flags: h.flags}
	serveZPage(w, r, "Flagz", "flagz", &obj, &obj.TypeMeta, func(out io.Writer) {
		h.once.Do(func() {
			var b strings.Builder
			fmt.Fprintf(&b, "\n%s flagz\n%s\n", componentName, zpagesWarning)
			delim := zpagesDelimiters[rand.IntN(len(zpagesDelimiters))]
			names := make([]string, 0, len(h.flags))
			for name := range h.flags {
				names = append(names, name)
			}
			slices.Sort(names)
			for _, name := range names {
				fmt.Fprintf(&b, "%s%s%s\n", name, delim, h.flags[name])
			}
			h.text = []byte(b.String())
		})
		_, _ = out.Write(h.text)
	})
}

// serveZPage answers with text (no Accept header, text/plain, text/* or */*), or with
// obj as JSON or YAML when asked for kind of group config.k8s.io in a served version,
// or 406. meta is obj's TypeMeta, set to the version served.
func serveZPage(w http.ResponseWriter, r *http.Request, kind, endpoint string, obj any, meta *metav1.TypeMeta, text func(io.Writer)) {
	format, v, ok := negotiateZPage(r.Header.Get("Accept"), kind)
	if !ok {
		http.Error(w, fmt.Sprintf("only the following media types are accepted: text/plain, application/json;g=%s;v=v1beta1;as=%s, application/yaml;g=%s;v=v1beta1;as=%s",
			zpagesGroup, kind, zpagesGroup, kind), http.StatusNotAcceptable)
		return
	}
	if format == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		text(w)
		return
	}
	meta.Kind, meta.APIVersion = kind, zpagesGroup+"/"+v
	if zpagesVersions[v] {
		w.Header().Set("Warning", fmt.Sprintf(`299 - "This version of the %s endpoint is deprecated. Please use a newer version."`, endpoint))
	}
	data, err := json.Marshal(obj)
	if err == nil && format == "yaml" {
		data, err = yaml.JSONToYAML(data)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/"+format)
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(data); err != nil {
		klog.ErrorS(err, "Error writing response", "endpoint", endpoint)
	}
}

// negotiateZPage picks the first acceptable media range of an Accept header, by quality:
// format "text", "json" or "yaml", and for the structured ones the version.
func negotiateZPage(accept, kind string) (format, v string, ok bool) {
	if strings.TrimSpace(accept) == "" {
		return "text", "", true
	}
	type mediaRange struct {
		typ    string
		params map[string]string
		q      float64
	}
	var ranges []mediaRange
	for _, part := range strings.Split(accept, ",") {
		typ, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if s, ok := params["q"]; ok {
			if f, err := strconv.ParseFloat(s, 64); err == nil {
				q = f
			}
		}
		ranges = append(ranges, mediaRange{typ, params, q})
	}
	sort.SliceStable(ranges, func(i, j int) bool { return ranges[i].q > ranges[j].q })
	for _, mr := range ranges {
		if mr.q <= 0 {
			continue
		}
		switch mr.typ {
		case "text/plain", "text/*", "*/*":
			if _, structured := mr.params["as"]; !structured {
				return "text", "", true
			}
		case "application/json", "application/yaml":
			version, served := mr.params["v"]
			if _, known := zpagesVersions[version]; served && known && mr.params["g"] == zpagesGroup && mr.params["as"] == kind {
				return strings.TrimPrefix(mr.typ, "application/"), version, true
			}
		}
	}
	return "", "", false
}
