package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// PodProvider is what the pod endpoints need from the kubelet.
type PodProvider interface {
	// PodsWithStatus lists the desired pods with their latest status filled in.
	PodsWithStatus() []*v1.Pod
	// ContainerLogs streams a container's log as the kubelet API's containerLogs does.
	ContainerLogs(ctx context.Context, namespace, pod, container string, opts *v1.PodLogOptions, w io.Writer) error
}

// PodHandlers serves the kubelet API's /pods and /containerLogs shapes; the standalone
// CLI reads them over a unix socket, and the authenticated kubelet API reuses them.
func PodHandlers(p PodProvider) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /pods", func(w http.ResponseWriter, r *http.Request) {
		list := v1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
		for _, pod := range p.PodsWithStatus() {
			list.Items = append(list.Items, *pod)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&list)
	})
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", func(w http.ResponseWriter, r *http.Request) {
		opts, err := podLogOptions(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fw := &flushWriter{w: w}
		if f, ok := w.(http.Flusher); ok {
			fw.f = f
		}
		if err := p.ContainerLogs(r.Context(), r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container"), opts, fw); err != nil {
			if !fw.wrote {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			klog.V(2).InfoS("Streaming logs ended with an error", "err", err)
		}
	})
	return mux
}

// podLogOptions reads the query parameters kubectl sends to containerLogs.
func podLogOptions(r *http.Request) (*v1.PodLogOptions, error) {
	q := r.URL.Query()
	opts := &v1.PodLogOptions{
		Follow:     q.Get("follow") == "true",
		Previous:   q.Get("previous") == "true",
		Timestamps: q.Get("timestamps") == "true",
	}
	for name, dst := range map[string]**int64{"tailLines": &opts.TailLines, "limitBytes": &opts.LimitBytes, "sinceSeconds": &opts.SinceSeconds} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%s: must be a non-negative integer (got %q)", name, v)
			}
			*dst = &n
		}
	}
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, fmt.Errorf("sinceTime: %v", err)
		}
		opts.SinceTime = &metav1.Time{Time: t}
	}
	return opts, nil
}

// flushWriter flushes after every write so `logs -f` shows lines as they come.
type flushWriter struct {
	w     io.Writer
	f     http.Flusher
	wrote bool
}

func (fw *flushWriter) Write(p []byte) (int, error) {
	n, err := fw.w.Write(p)
	fw.wrote = true
	if fw.f != nil {
		fw.f.Flush()
	}
	return n, err
}

// ServeLocal serves handler on a unix socket (mode 0600, root only) until ctx ends.
func ServeLocal(ctx context.Context, socketPath string, handler http.Handler) error {
	if err := os.Remove(socketPath); err != nil && !os.IsNotExist(err) {
		return err
	}
	ln, err := net.Listen("unix", socketPath)
	if err != nil {
		return fmt.Errorf("local API socket: %w", err)
	}
	if err := os.Chmod(socketPath, 0o600); err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
		_ = os.Remove(socketPath)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
			klog.ErrorS(err, "Local API server failed")
		}
	}()
	return nil
}

// LocalClient talks to a nodelet's local API socket.
func LocalClient(socketPath string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socketPath)
		},
	}}
}

// LocalURL builds a request URL for the local client.
func LocalURL(path string) string { return "http://nodelet" + path }
