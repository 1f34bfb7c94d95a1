package stats

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// SummaryProvider is what the handlers need of a Provider.
type SummaryProvider interface {
	// Get returns the full summary.
	Get(ctx context.Context) (*statsapi.Summary, error)
	// GetCPUAndMemoryStats returns the summary's CPU and memory only.
	GetCPUAndMemoryStats(ctx context.Context) (*statsapi.Summary, error)
}

// SummaryPath is where upstream serves the Summary API.
const SummaryPath = "/stats/summary"

// NewSummaryHandler serves /stats/summary as upstream does: GET or POST,
// ?only_cpu_and_memory=true for the CPU and memory figures only, the
// summary as indented JSON, errors as 500 "Internal Error: ...". It is
// meant to be mounted at /stats/ (any other path under it is 404).
func NewSummaryHandler(sp SummaryProvider) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != SummaryPath {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "405: Method Not Allowed", http.StatusMethodNotAllowed)
			return
		}
		if err := r.ParseForm(); err != nil {
			summaryError(w, fmt.Errorf("parse form failed: %w", err))
			return
		}
		var (
			summary *statsapi.Summary
			err     error
		)
		if v, ok := r.Form["only_cpu_and_memory"]; ok && len(v) == 1 && v[0] == "true" {
			summary, err = sp.GetCPUAndMemoryStats(r.Context())
		} else {
			summary, err = sp.Get(r.Context())
		}
		if err != nil {
			summaryError(w, err)
			return
		}
		writeJSON(w, summary)
	})
}

// jsonWriter is a reusable buffer and encoder: a 100-pod summary is a few
// hundred kilobytes of JSON, worth not allocating anew on every request.
type jsonWriter struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var jsonWriters = sync.Pool{New: func() any {
	jw := &jsonWriter{}
	jw.enc = json.NewEncoder(&jw.buf)
	// go-restful's pretty printing, which upstream's responses have.
	jw.enc.SetIndent("", " ")
	return jw
}}

func writeJSON(w http.ResponseWriter, v any) {
	jw := jsonWriters.Get().(*jsonWriter)
	defer jsonWriters.Put(jw)
	jw.buf.Reset()
	if err := jw.enc.Encode(v); err != nil {
		summaryError(w, err)
		return
	}
	// Encode ends with a newline that go-restful's MarshalIndent has not.
	body := bytes.TrimSuffix(jw.buf.Bytes(), []byte{'\n'})
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(body); err != nil {
		klog.ErrorS(err, "Error writing response")
	}
}

func summaryError(w http.ResponseWriter, err error) {
	klog.ErrorS(err, "HTTP InternalServerError serving", "request", SummaryPath)
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = fmt.Fprintf(w, "Internal Error: %v", err)
}
