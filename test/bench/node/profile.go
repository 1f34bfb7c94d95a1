package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// profiler takes CPU profiles over the idle windows: of nodelet through its kubelet
// API's /debug/pprof/ (served for the bench on 127.0.0.1:port with anonymous access)
// and of containerd through its debug socket (hack/runtime.sh puts it next to the CRI
// socket). Serving the API adds its own small idle cost (volume stats), so the CPU
// figures of a profiled run are not those of the default bench.
type profiler struct {
	dir             string
	port            int
	containerdDebug string
	insecure        *http.Client
	containerd      *http.Client
}

func newProfiler(dir, endpoint string) (*profiler, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	sock := strings.TrimPrefix(endpoint, "unix://")
	debug := filepath.Join(filepath.Dir(sock), "containerd-debug.sock")
	return &profiler{
		dir: dir, port: port, containerdDebug: debug,
		// nodelet's serving certificate is self-signed.
		insecure: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}, //nolint:gosec // a throw-away local bench
		containerd: &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", debug)
		}}},
	}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// serverConfig is the KubeletConfiguration fragment that serves the API for profiling.
func (p *profiler) serverConfig() string {
	return fmt.Sprintf(`enableServer: true
address: 127.0.0.1
port: %d
readOnlyPort: 0
enableProfilingHandler: true
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
`, p.port)
}

// profile starts CPU profiles of nodelet (when it runs in this window) and containerd
// over d; the function it returns waits for them and writes them into the directory as
// <run>-<variant>-{nodelet,containerd}.pprof. Without a profiler it does nothing.
func (n *node) profile(v variant, d time.Duration) func() error {
	p := n.profiler
	if p == nil {
		return func() error { return nil }
	}
	seconds := int(d.Seconds())
	prefix := filepath.Join(p.dir, fmt.Sprintf("%d-%s-", n.runs, v.key))
	var fetches []chan error
	fetch := func(c *http.Client, url, file string) {
		done := make(chan error, 1)
		fetches = append(fetches, done)
		go func() { done <- fetchTo(c, url, file) }()
	}
	if v.nodelet {
		fetch(p.insecure, fmt.Sprintf("https://127.0.0.1:%d/debug/pprof/profile?seconds=%d", p.port, seconds), prefix+"nodelet.pprof")
	}
	fetch(p.containerd, fmt.Sprintf("http://containerd/debug/pprof/profile?seconds=%d", seconds), prefix+"containerd.pprof")
	return func() error {
		var errs []error
		for _, done := range fetches {
			errs = append(errs, <-done)
		}
		return errors.Join(errs...)
	}
}

func fetchTo(c *http.Client, url, file string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}
