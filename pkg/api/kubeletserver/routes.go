package kubeletserver

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	kc "k8s.io/kubelet/config/v1beta1"
)

// Paths of the debugging handlers that enableDebuggingHandlers: false (and the read-only
// port) answer with "Debug endpoints are disabled."
const (
	pprofPath     = "/debug/pprof/"
	debugFlagPath = "/debug/flags/v"
)

var debuggingPaths = []string{"/run/", "/exec/", "/attach/", "/portForward/", "/containerLogs/", runningPodsPath, pprofPath, logsPath}

// routes is the request multiplexer. Both servers have health, pods, stats and metrics;
// the HTTPS server adds the debugging handlers when enableDebuggingHandlers is on, as
// upstream's InstallAuthRequiredHandlers does. Requests reach it only once authorized.
func (s *Server) routes(readOnly bool) *http.ServeMux {
	mux := http.NewServeMux()
	s.installHealthz(mux)
	mux.Handle(podsPath, getOnly(http.HandlerFunc(s.getPods)))
	mount(mux, s.deps.Stats, statsPath, "/stats")
	mount(mux, s.deps.Metrics, metricsPath)
	mount(mux, s.deps.MetricsCadvisor, "/metrics/cadvisor")
	mount(mux, s.deps.MetricsResource, "/metrics/resource")
	mount(mux, s.deps.MetricsProbes, "/metrics/probes")
	mount(mux, s.deps.MetricsSLIs, "/metrics/slis")
	if readOnly || !s.opts.EnableDebuggingHandlers {
		disabled := disabledEndpoint("Debug endpoints are disabled.")
		for _, p := range debuggingPaths {
			mux.Handle(p, disabled)
		}
		return mux
	}
	klog.InfoS("Adding debug handlers to kubelet server")
	s.installSystemLogs(mux)
	s.installProfiling(mux)
	s.installDebugFlags(mux)
	mount(mux, s.deps.Run, "/run/")
	mount(mux, s.deps.Exec, "/exec/")
	mount(mux, s.deps.Attach, "/attach/")
	mount(mux, s.deps.PortForward, "/portForward/")
	mount(mux, s.deps.ContainerLogs, "/containerLogs/")
	mount(mux, s.deps.Checkpoint, checkpointPath)
	mux.Handle(configzPath, http.HandlerFunc(s.getConfigz))
	mux.Handle(runningPodsPath, getOnly(http.HandlerFunc(s.getRunningPods)))
	s.installZPages(mux)
	return mux
}

// mount serves h under the given patterns; a nil handler leaves them to the mux's 404.
func mount(mux *http.ServeMux, h http.Handler, patterns ...string) {
	if h == nil {
		return
	}
	for _, p := range patterns {
		mux.Handle(p, h)
	}
}

// disabledEndpoint is upstream's answer for a turned-off endpoint: 405 and the reason.
func disabledEndpoint(msg string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, msg, http.StatusMethodNotAllowed)
	})
}

// getOnly refuses every method but GET with 405 and "Allow: GET", as upstream's read-only
// kubelet APIs do.
func getOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeText(w, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) getPods(w http.ResponseWriter, _ *http.Request) {
	writePodList(w, s.deps.Host.PodsWithStatus())
}

func (s *Server) getRunningPods(w http.ResponseWriter, r *http.Request) {
	pods, err := s.deps.Host.RunningPods(r.Context())
	if err != nil {
		writeText(w, http.StatusInternalServerError, err.Error())
		return
	}
	writePodList(w, pods)
}

// writePodList answers with a v1 PodList.
func writePodList(w http.ResponseWriter, pods []*v1.Pod) {
	list := v1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: make([]v1.Pod, 0, len(pods))}
	for _, p := range pods {
		list.Items = append(list.Items, *p)
	}
	writeJSON(w, &list)
}

func writeJSON(w http.ResponseWriter, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		writeText(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(data); err != nil {
		klog.ErrorS(err, "Error writing response")
	}
}

// getConfigz serves the running configuration as upstream's configz does:
// {"kubeletconfig": {kind, apiVersion, ...}}.
func (s *Server) getConfigz(w http.ResponseWriter, _ *http.Request) {
	cfg := &kc.KubeletConfiguration{}
	if s.opts.Configz != nil {
		cfg = s.opts.Configz.DeepCopy()
	}
	cfg.TypeMeta = metav1.TypeMeta{Kind: "KubeletConfiguration", APIVersion: kc.SchemeGroupVersion.String()}
	data, err := json.Marshal(map[string]any{"kubeletconfig": cfg})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(data)
}

// installProfiling serves Go's pprof under /debug/pprof/ (GET only), or the disabled
// answer; enableContentionProfiling also records blocking events.
func (s *Server) installProfiling(mux *http.ServeMux) {
	if !s.opts.EnableProfilingHandler {
		mux.Handle(pprofPath, disabledEndpoint("profiling endpoint is disabled."))
		return
	}
	mux.Handle(pprofPath, getOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch strings.TrimPrefix(r.URL.Path, pprofPath) {
		case "profile":
			pprof.Profile(w, r)
		case "symbol":
			pprof.Symbol(w, r)
		case "cmdline":
			pprof.Cmdline(w, r)
		case "trace":
			pprof.Trace(w, r)
		default:
			pprof.Index(w, r)
		}
	})))
	if s.opts.EnableContentionProfiling {
		runtime.SetBlockProfileRate(1)
	}
}
