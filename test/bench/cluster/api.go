package main

// The kubelet API figures. With -api-pods pods on each node, the bench loads each kubelet's
// HTTPS port directly, as the API server's proxy or metrics-server would: -api-clients
// clients, each on its own kept-alive connection, send GET requests back to back for
// -api-window, -api-rounds times per kubelet and endpoint, alternating which kubelet goes
// first. They present the control plane's apiserver-kubelet-client certificate, which
// both kubelets trust through clientCAFile; authorization is each kubelet's
// SubjectAccessReview webhook, whose cached answer the warm-up second before each window
// fills. Then `kubectl exec POD -- true` is timed through the API server, with
// `kubectl get pod` (kubectl's start and one API round trip, no kubelet) as its floor.
//
// Only one kubelet works at a time: the other is frozen (SIGSTOP) for the length of the
// window or exec, so its background work with its own pods does not weigh on the figures
// of the one measured. Its containerd keeps running.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// apiPaths are the endpoints loaded, in the order they are measured.
var apiPaths = []string{"/pods", "/stats/summary"}

// window is one load window of one kubelet endpoint.
type window struct {
	latencies []time.Duration
	elapsed   time.Duration
	// bytes is the size of the last response body.
	bytes int64
	// CPU used over the window by the kubelet, its containerd and the bench's clients.
	kubeletCPU, runtimeCPU, clientCPU time.Duration
}

func (w window) perSecond() float64 { return float64(len(w.latencies)) / w.elapsed.Seconds() }

// apiResults are the kubelet API samples, per kubelet name.
type apiResults struct {
	windows map[string]map[string][]window // path → kubelet → windows in round order
	exec    map[string][]time.Duration
	// execCPU is the CPU the kubelet and its containerd used over all counted execs: one
	// exec takes about a clock tick (10 ms) of CPU, too little to read alone.
	execCPU map[string][2]time.Duration
	// execFloor are the `kubectl get pod` round trips run in turn with the execs.
	execFloor []time.Duration
	// created and deleted: the -api-pods pods created at once → all Ready, deleted → gone.
	created, deleted map[string]time.Duration
	declared         map[string][]string
	// load is the load average once the pods are up, before the first window.
	load string
}

func newAPIResults() apiResults {
	r := apiResults{windows: map[string]map[string][]window{}, exec: map[string][]time.Duration{},
		execCPU: map[string][2]time.Duration{}, created: map[string]time.Duration{},
		deleted: map[string]time.Duration{}, declared: map[string][]string{}}
	for _, p := range apiPaths {
		r.windows[p] = map[string][]window{}
	}
	return r
}

// kubeletAPI starts -api-pods pods on each node, loads each kubelet's endpoints, times the
// exec round trips, and deletes the pods.
func (b *bench) kubeletAPI(ctx context.Context) error {
	r := &b.results.api
	names := podNames("api", b.o.apiPods)
	for _, k := range b.kubelets() {
		d, err := b.createAllReady(ctx, k, names)
		if err != nil {
			return err
		}
		r.created[k.name] = d
	}
	// The pods' start-up work (status updates, first stats) must be over.
	if err := b.sleep(ctx, b.o.idleSettle); err != nil {
		return err
	}
	r.load = loadAverage()
	if err := b.loadEndpoints(ctx); err != nil {
		return err
	}
	if err := b.execRoundTrips(ctx, names[0]); err != nil {
		return err
	}
	for _, k := range b.kubelets() {
		if node, err := b.client.CoreV1().Nodes().Get(ctx, k.node, metav1.GetOptions{}); err == nil {
			r.declared[k.name] = node.Status.DeclaredFeatures
		}
		d, err := b.deleteAllGone(ctx, k, names)
		if err != nil {
			return err
		}
		r.deleted[k.name] = d
	}
	return nil
}

// loadEndpoints runs -api-rounds windows per endpoint and kubelet, in turn.
func (b *bench) loadEndpoints(ctx context.Context) error {
	clients := map[string]*http.Client{}
	for _, k := range b.kubelets() {
		c, err := b.apiClient()
		if err != nil {
			return err
		}
		clients[k.name] = c
		defer c.CloseIdleConnections()
	}
	for _, path := range apiPaths {
		for round := range b.o.apiRounds {
			load := func(k *kubelet) func() error {
				return func() error {
					w, err := b.loadWindow(ctx, clients[k.name], k, path)
					if err != nil {
						return fmt.Errorf("%s GET %s: %w; see %s", k.name, path, err, k.logFile())
					}
					b.results.api.windows[path][k.name] = append(b.results.api.windows[path][k.name], w)
					fmt.Fprintf(os.Stderr, "bench: %-8s GET %s: %d requests in %.1f s, %.1f/s, p99 %.1f ms\n", k.name, path,
						len(w.latencies), w.elapsed.Seconds(), w.perSecond(), ms(percentile(w.latencies, 0.99)))
					return b.pause(ctx)
				}
			}
			if err := inTurn(round, load(b.nodelet), load(b.upstream)); err != nil {
				return err
			}
		}
	}
	return nil
}

// apiClient is an HTTPS client with the certificate the API server uses towards kubelets.
// Like the API server (no --kubelet-certificate-authority), it does not verify the
// kubelets' self-signed serving certificates. Transparent gzip is off: neither kubelet
// compresses these responses, and the API server's proxy passes bodies as they come.
func (b *bench) apiClient() (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(b.pki, "apiserver-kubelet-client.crt"), filepath.Join(b.pki, "apiserver-kubelet-client.key"))
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true},
		MaxIdleConnsPerHost: b.o.apiClients, MaxConnsPerHost: b.o.apiClients, DisableCompression: true,
	}}, nil
}

// loadWindow warms the connections up for a second, then loads path for -api-window, with
// the other kubelet frozen, and notes the CPU each party used.
func (b *bench) loadWindow(ctx context.Context, client *http.Client, k *kubelet, path string) (window, error) {
	url := fmt.Sprintf("https://127.0.0.1:%d%s", k.port, path)
	var w window
	err := b.alone(k, func() error {
		if _, err := hammer(ctx, client, url, b.o.apiClients, time.Second); err != nil {
			return err
		}
		before, err := cpuOf(k)
		if err != nil {
			return err
		}
		self, err := processUsage(os.Getpid())
		if err != nil {
			return err
		}
		if w, err = hammer(ctx, client, url, b.o.apiClients, b.o.apiWindow); err != nil {
			return err
		}
		after, err := cpuOf(k)
		if err != nil {
			return err
		}
		selfAfter, err := processUsage(os.Getpid())
		w.kubeletCPU, w.runtimeCPU, w.clientCPU = after[0]-before[0], after[1]-before[1], selfAfter.cpu-self.cpu
		return err
	})
	return w, err
}

// hammer sends GET url from n clients, each back to back, until d has passed; a request
// under way at the end is waited for and counted. Any failure ends the window.
func hammer(ctx context.Context, client *http.Client, url string, n int, d time.Duration) (window, error) {
	latencies := make([][]time.Duration, n)
	sizes := make([]int64, n)
	errs := make([]error, n)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for time.Now().Before(deadline) && errs[i] == nil {
				t0 := time.Now()
				sizes[i], errs[i] = get(ctx, client, url)
				latencies[i] = append(latencies[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	w := window{elapsed: time.Since(start), bytes: sizes[0]}
	for _, l := range latencies {
		w.latencies = append(w.latencies, l...)
	}
	return w, errors.Join(errs...)
}

// get fetches url and returns the body's size; anything but 200 is an error.
func get(ctx context.Context, client *http.Client, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return io.Copy(io.Discard, resp.Body)
}

// alone runs f with the kubelet other than k frozen (SIGSTOP), and thaws it after.
func (b *bench) alone(k *kubelet, f func() error) error {
	other := b.nodelet
	if k == b.nodelet {
		other = b.upstream
	}
	pid := other.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	return f()
}

// execRoundTrips times `kubectl exec POD -- true` on each kubelet and `kubectl get pod`,
// in turn, -exec-runs times, after one uncounted run of each (kubectl's discovery cache,
// the kubelets' authorization caches, the API server's connections to them).
func (b *bench) execRoundTrips(ctx context.Context, pod string) error {
	r := &b.results.api
	execOn := func(k *kubelet, record bool) func() error {
		return func() error {
			return b.alone(k, func() error {
				before, err := cpuOf(k)
				if err != nil {
					return err
				}
				d, err := b.kubectl(ctx, "-n", k.namespace, "exec", pod, "-c", "app", "--", "true")
				if err != nil {
					return fmt.Errorf("%s: %w; see %s", k.name, err, k.logFile())
				}
				after, err := cpuOf(k)
				if record {
					r.exec[k.name] = append(r.exec[k.name], d)
					sum := r.execCPU[k.name]
					r.execCPU[k.name] = [2]time.Duration{sum[0] + after[0] - before[0], sum[1] + after[1] - before[1]}
				}
				return errors.Join(err, b.shortPause(ctx))
			})
		}
	}
	floor := func(record bool) func() error {
		return func() error {
			d, err := b.kubectl(ctx, "-n", b.nodelet.namespace, "get", "pod", pod, "-o", "name")
			if record {
				r.execFloor = append(r.execFloor, d)
			}
			return errors.Join(err, b.shortPause(ctx))
		}
	}
	if err := inTurn(0, execOn(b.nodelet, false), execOn(b.upstream, false), floor(false)); err != nil {
		return err
	}
	for round := range b.o.execRuns {
		if err := inTurn(round, execOn(b.nodelet, true), execOn(b.upstream, true), floor(true)); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "bench: kubectl exec: nodelet %s | upstream %s | kubectl get %s (s)\n",
		seconds(r.exec["nodelet"]), seconds(r.exec["upstream"]), seconds(r.execFloor))
	return nil
}

// kubectl runs the cached kubectl with the admin kubeconfig and returns how long it took.
func (b *bench) kubectl(ctx context.Context, args ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, b.o.kubectlBin, append([]string{"--kubeconfig", b.kubeconfig}, args...)...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return took, nil
}

// shortPause separates exec runs: long enough for the exec's clean-up, with a random part
// so runs do not lock onto the kubelets' 1 s ticks.
func (b *bench) shortPause(ctx context.Context) error {
	return b.sleep(ctx, 300*time.Millisecond+rand.N(500*time.Millisecond))
}

// percentile is the nearest-rank p-quantile (0 < p ≤ 1) of d.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(p * float64(len(s))))
	return s[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pooled joins the windows' latencies and sums their requests, time and CPU.
func pooled(ws []window) window {
	var all window
	for _, w := range ws {
		all.latencies = append(all.latencies, w.latencies...)
		all.elapsed += w.elapsed
		all.kubeletCPU += w.kubeletCPU
		all.runtimeCPU += w.runtimeCPU
		all.clientCPU += w.clientCPU
		all.bytes = w.bytes
	}
	return all
}

// apiRows are the table's kubelet API rows: throughput and latency of each endpoint over
// all its windows, and the exec round trip.
func (b *bench) apiRows() []row {
	r := b.results.api
	var rows []row
	for _, path := range apiPaths {
		n, u := pooled(r.windows[path]["nodelet"]), pooled(r.windows[path]["upstream"])
		what := fmt.Sprintf("GET %s, %d pods, %d clients", path, b.o.apiPods, b.o.apiClients)
		rows = append(rows,
			row{what: fmt.Sprintf("%s: requests/s (%d × %.0f s; higher is better)", what, b.o.apiRounds, b.o.apiWindow.Seconds()), n: n.perSecond(), u: u.perSecond(), unit: "/s"},
			row{what: what + ": p50", n: ms(percentile(n.latencies, 0.5)), u: ms(percentile(u.latencies, 0.5)), unit: "ms"},
			row{what: what + ": p99", n: ms(percentile(n.latencies, 0.99)), u: ms(percentile(u.latencies, 0.99)), unit: "ms"})
	}
	return append(rows,
		row{what: fmt.Sprintf("kubectl exec POD -- true, round trip: median of %d", b.o.execRuns), n: ms(median(r.exec["nodelet"])), u: ms(median(r.exec["upstream"])), unit: "ms"},
		row{what: fmt.Sprintf("kubectl exec POD -- true, round trip: p90 of %d", b.o.execRuns), n: ms(percentile(r.exec["nodelet"], 0.9)), u: ms(percentile(r.exec["upstream"], 0.9)), unit: "ms"})
}

// printAPIContext prints where the kubelet API figures' time and CPU go.
func (b *bench) printAPIContext(out io.Writer) {
	r := b.results.api
	fmt.Fprintf(out, "\nkubelet API (%d pods a node; the other kubelet frozen during each window and exec; client cert apiserver-kubelet-client, SubjectAccessReview webhook, HTTP/1.1 kept alive; load average before the first window %s):\n", b.o.apiPods, r.load)
	for _, path := range apiPaths {
		for _, name := range []string{"nodelet", "upstream"} {
			w := pooled(r.windows[path][name])
			per := func(d time.Duration) float64 { return ms(d) / float64(len(w.latencies)) }
			fmt.Fprintf(out, "  GET %-14s %-8s %7.1f KiB; CPU per request: kubelet %.2f ms, its containerd %.2f ms, bench client %.2f ms — %s; per window %s/s\n",
				path, name, float64(w.bytes)/1024, per(w.kubeletCPU), per(w.runtimeCPU), per(w.clientCPU),
				dominant(w), rates(r.windows[path][name]))
		}
	}
	floor := median(r.execFloor)
	for _, name := range []string{"nodelet", "upstream"} {
		cpu, runs := r.execCPU[name], float64(len(r.exec[name]))
		fmt.Fprintf(out, "  kubectl exec %-8s median %.0f ms = %.0f ms kubectl and one API round trip (kubectl get pod, median) + %.0f ms exec path; CPU per exec: kubelet %.1f ms, its containerd %.1f ms; declared features %v\n",
			name, ms(median(r.exec[name])), ms(floor), ms(median(r.exec[name])-floor), ms(cpu[0])/runs, ms(cpu[1])/runs, r.declared[name])
	}
	fmt.Fprintf(out, "  samples (ms): exec nodelet %s | exec upstream %s | kubectl get %s\n", millis(r.exec["nodelet"]), millis(r.exec["upstream"]), millis(r.execFloor))
	fmt.Fprintf(out, "  %d pods created at once → all Ready (1 sample): nodelet %.1f s, upstream %.1f s; deleted → all gone: nodelet %.1f s, upstream %.1f s\n",
		b.o.apiPods, r.created["nodelet"].Seconds(), r.created["upstream"].Seconds(), r.deleted["nodelet"].Seconds(), r.deleted["upstream"].Seconds())
}

// dominant says which process spent the most CPU on a window's requests.
func dominant(w window) string {
	switch {
	case w.runtimeCPU > w.kubeletCPU && w.runtimeCPU > w.clientCPU:
		return "containerd dominates (CRI calls)"
	case w.kubeletCPU >= w.clientCPU:
		return "the kubelet's own work dominates"
	default:
		return "the client (TLS, reading) dominates"
	}
}

func rates(ws []window) string {
	s := make([]string, len(ws))
	for i, w := range ws {
		s[i] = fmt.Sprintf("%.0f", w.perSecond())
	}
	return strings.Join(s, " ")
}

func millis(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = fmt.Sprintf("%.0f", ms(d))
	}
	return strings.Join(s, " ")
}
