// Package audit counts kubelets' API requests from the control plane's audit log
// (hack/controlplane.sh writes the requests of group system:nodes, Metadata level, one
// JSON audit.k8s.io/v1 Event a line, stage RequestReceived omitted, to
// $NODELET_CP_DIR/logs/audit.log): the benchmarks' figure of how much of the API server's
// load each kubelet makes.
package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Event is what the counts need of an audit.k8s.io/v1 Event.
type Event struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// Kind is what a request is counted as: verb and resource[/subresource] ("patch
// pods/status"), or verb and path for a request that is not about a resource (discovery,
// /version).
func (e Event) Kind() string {
	if e.ObjectRef == nil || e.ObjectRef.Resource == "" {
		path, _, _ := strings.Cut(e.RequestURI, "?")
		return e.Verb + " " + path
	}
	if e.ObjectRef.Subresource != "" {
		return e.Verb + " " + e.ObjectRef.Resource + "/" + e.ObjectRef.Subresource
	}
	return e.Verb + " " + e.ObjectRef.Resource
}

// Parse reads audit log lines; every line must be a whole event.
func Parse(r io.Reader) ([]Event, error) {
	var events []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("audit log line %.200q: %w", line, err)
		}
		events = append(events, e)
	}
	return events, sc.Err()
}

// Counts are requests by Kind.
type Counts map[string]int

// Total is all the requests counted.
func (c Counts) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// Tally counts user's requests received in [from, to), each once (a watch logs
// ResponseStarted and ResponseComplete under one auditID).
func Tally(events []Event, user string, from, to time.Time) Counts {
	seen := map[string]bool{}
	counts := Counts{}
	for _, e := range events {
		at := e.RequestReceivedTimestamp
		if e.User.Username != user || at.Before(from) || !at.Before(to) || seen[e.AuditID] {
			continue
		}
		seen[e.AuditID] = true
		counts[e.Kind()]++
	}
	return counts
}

// Tail reads what the audit log gets from the moment it is opened on. It keeps the file
// open, so a rotation (the API server renames the log and starts a new one) loses
// nothing: the rest of the renamed file is read through the descriptor, then the new one.
type Tail struct {
	path string
	f    *os.File
}

// OpenTail opens the log at path at its end.
func OpenTail(path string) (*Tail, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w (is the control plane's audit log on? hack/controlplane.sh up restarts it with it)", err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, err
	}
	return &Tail{path: path, f: f}, nil
}

// Close closes the log.
func (t *Tail) Close() { t.f.Close() }

// Read returns the events logged since OpenTail or the last Read. A last line without
// its newline is still being written: it is left for the next Read.
func (t *Tail) Read() ([]Event, error) {
	events, err := t.readWhole()
	if err != nil {
		return nil, err
	}
	opened, err := t.f.Stat()
	if err != nil {
		return nil, err
	}
	now, err := os.Stat(t.path)
	if err != nil || os.SameFile(opened, now) {
		return events, err
	}
	// Rotated since: what the renamed file got is read; the new log from its start on.
	f, err := os.Open(t.path)
	if err != nil {
		return nil, err
	}
	t.f.Close()
	t.f = f
	more, err := t.readWhole()
	return append(events, more...), err
}

// readWhole parses the whole lines from the descriptor's offset on and leaves it at the
// start of a torn last line.
func (t *Tail) readWhole() ([]Event, error) {
	data, err := io.ReadAll(t.f)
	if err != nil {
		return nil, err
	}
	whole := bytes.LastIndexByte(data, '\n') + 1
	if torn := len(data) - whole; torn > 0 {
		if _, err := t.f.Seek(int64(-torn), io.SeekCurrent); err != nil {
			return nil, err
		}
	}
	return Parse(bytes.NewReader(data[:whole]))
}
