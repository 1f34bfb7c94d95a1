package streaming

import (
	"net/http"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// endpoint describes one of upstream's go-restful web services: the path prefix, the
// methods its routes take, and whether its routes have a form with the pod UID.
type endpoint struct {
	prefix  string
	methods []string
	// tail names the path parameters after the pod name: the container, or nothing
	// for portForward.
	tail []string
	// withUID: the routes also accept the pod UID right after the pod name.
	withUID bool
}

var (
	execEndpoint        = endpoint{"/exec/", []string{http.MethodGet, http.MethodPost}, []string{"container"}, true}
	attachEndpoint      = endpoint{"/attach/", []string{http.MethodGet, http.MethodPost}, []string{"container"}, true}
	runEndpoint         = endpoint{"/run/", []string{http.MethodPost}, []string{"container"}, true}
	portForwardEndpoint = endpoint{"/portForward/", []string{http.MethodGet, http.MethodPost}, nil, true}
	logsEndpoint        = endpoint{"/containerLogs/", []string{http.MethodGet}, []string{"container"}, false}
	checkpointEndpoint  = endpoint{"/checkpoint/", []string{http.MethodPost}, []string{"container"}, false}
)

// target is what a request's path names.
type target struct {
	namespace, pod, container string
	uid                       types.UID
}

// parse reads the path parameters, or answers as go-restful does when no route
// matches: 404 for a path of another shape, 405 with Allow for another method.
// Segments may be empty ("/exec/ns/pod/" names container ""), as in go-restful.
func (e endpoint) parse(w http.ResponseWriter, r *http.Request) (target, bool) {
	segs := strings.Split(strings.TrimPrefix(r.URL.Path, e.prefix), "/")
	short := 2 + len(e.tail)
	if !strings.HasPrefix(r.URL.Path, e.prefix) || (len(segs) != short && (!e.withUID || len(segs) != short+1)) {
		writeError(w, http.StatusNotFound, "404: Page Not Found")
		return target{}, false
	}
	if !slices.Contains(e.methods, r.Method) {
		w.Header().Set("Allow", strings.Join(e.methods, ", "))
		writeError(w, http.StatusMethodNotAllowed, "405: Method Not Allowed")
		return target{}, false
	}
	t := target{namespace: segs[0], pod: segs[1]}
	rest := segs[2:]
	if len(segs) == short+1 {
		t.uid, rest = types.UID(rest[0]), rest[1:]
	}
	if len(e.tail) == 1 {
		t.container = rest[0]
	}
	return t, true
}

// writeError answers with a plain-text body, as go-restful's WriteError does.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg))
}
