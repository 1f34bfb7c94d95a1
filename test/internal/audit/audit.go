// Package audit counts kubelets' API requests from the control plane's audit log
// (hack/controlplane.sh writes the requests of group system:nodes, Metadata level, as JSON
// lines to $NODELET_CP_DIR/logs/audit.log): the benchmarks' figure of how much of the API
// server's load each kubelet makes.
package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// DefaultLog is the audit log of the project's control plane in its default state dir.
const DefaultLog = "/var/lib/nodelet-cp/logs/audit.log"

// LogPath is the audit log of the control plane whose state dir is NODELET_CP_DIR.
func LogPath() string {
	if d := os.Getenv("NODELET_CP_DIR"); d != "" {
		return filepath.Join(d, "logs", "audit.log")
	}
	return DefaultLog
}

// Event is what the counts need of an audit.k8s.io/v1 Event.
type Event struct {
	AuditID string `json:"auditID"`
	Verb    string `json:"verb"`
	User    struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
}

// Kind is a request's verb and resource[/subresource], e.g. "patch pods/status"; a
// request for no resource (a discovery GET) is its verb alone.
func (e Event) Kind() string {
	if e.ObjectRef == nil || e.ObjectRef.Resource == "" {
		return e.Verb
	}
	r := e.ObjectRef.Resource
	if e.ObjectRef.Subresource != "" {
		r += "/" + e.ObjectRef.Subresource
	}
	return e.Verb + " " + r
}

// Counts are requests per user, itemised by Kind.
type Counts map[string]map[string]int

// Total is all of user's requests.
func (c Counts) Total(user string) int {
	n := 0
	for _, v := range c[user] {
		n += v
	}
	return n
}

// Kinds is every Kind any of users made, sorted.
func (c Counts) Kinds(users ...string) []string {
	set := map[string]bool{}
	for _, u := range users {
		for k := range c[u] {
			set[k] = true
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Count reads audit events (JSON lines) and counts each request once (a watch has two
// events, ResponseStarted and ResponseComplete, under one auditID), per user. A line that
// is not an event (a torn last line while the API server writes) is skipped.
func Count(r io.Reader) (Counts, error) {
	seen := map[string]bool{}
	c := Counts{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		var e Event
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.AuditID == "" || seen[e.AuditID] {
			continue
		}
		seen[e.AuditID] = true
		u := e.User.Username
		if c[u] == nil {
			c[u] = map[string]int{}
		}
		c[u][e.Kind()]++
	}
	return c, sc.Err()
}

// Window is a place in the audit log: what is written after it is what a measurement
// counts. It survives one rotation (the API server renames audit.log to
// audit-<time>.log and starts a new one): the rest of the renamed file is read first.
type Window struct {
	path   string
	offset int64
	inode  uint64
}

// Mark notes the end of the log at path now.
func Mark(path string) (*Window, error) {
	st, err := os.Stat(path)
	if os.IsNotExist(err) {
		return &Window{path: path}, nil
	}
	if err != nil {
		return nil, err
	}
	return &Window{path: path, offset: st.Size(), inode: inode(st)}, nil
}

// Count counts the requests written since Mark.
func (w *Window) Count() (Counts, error) {
	var readers []io.Reader
	st, err := os.Stat(w.path)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w (is the control plane up with hack/controlplane.sh?)", err)
	}
	start := w.offset
	if w.inode != 0 && inode(st) != w.inode {
		if old := w.rotated(); old != "" {
			f, err := os.Open(old)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			if _, err := f.Seek(w.offset, io.SeekStart); err != nil {
				return nil, err
			}
			readers = append(readers, f)
		}
		start = 0
	}
	f, err := os.Open(w.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return nil, err
	}
	return Count(io.MultiReader(append(readers, f)...))
}

// rotated finds the backup the marked file was renamed to.
func (w *Window) rotated() string {
	base := strings.TrimSuffix(filepath.Base(w.path), ".log")
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(w.path), base+"-*.log"))
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil && inode(st) == w.inode {
			return m
		}
	}
	return ""
}

func inode(st os.FileInfo) uint64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return s.Ino
	}
	return 0
}
