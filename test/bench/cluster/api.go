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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// apiPaths are the endpoints loaded, in the order they are measured.
var apiPaths = []string{"/pods", "/stats/summary"}

// window is one load window of one kubelet endpoint.
type window struct {
	latencies []time.Duration
	elapsed   time.Duration
	// bytes is the size of the last response body.
	bytes int64
	// CPU used over the window by the kubelet, its containerd, that containerd's shims
	// (they read each container's cgroup for the stats calls), the bench's clients and the
	// rest of the machine (other work on this shared machine, the kernel's share nobody is
	// billed for).
	kubeletCPU, runtimeCPU, shimCPU, clientCPU, otherCPU time.Duration
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
	// statsFloor are the windows of ListContainerStats run in turn with /stats/summary's.
	statsFloor []window
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
		d, err := b.createAllReady(ctx, k, benchPod, names)
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

// loadEndpoints runs -api-rounds windows per endpoint and kubelet, in turn; with the
// /stats/summary rounds it runs as many windows of the containerd floor.
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
	r := &b.results.api
	for _, path := range apiPaths {
		for round := range b.o.apiRounds {
			load := func(k *kubelet) func() error {
				return func() error {
					url := fmt.Sprintf("https://127.0.0.1:%d%s", k.port, path)
					w, err := b.measureWindow(ctx, k, []*kubelet{b.other(k)}, httpGet(clients[k.name], url))
					if err != nil {
						return fmt.Errorf("%s GET %s: %w; see %s", k.name, path, err, k.logFile())
					}
					r.windows[path][k.name] = append(r.windows[path][k.name], w)
					report(k.name, "GET "+path, w)
					return b.pause(ctx)
				}
			}
			steps := []func() error{load(b.nodelet), load(b.upstream)}
			if path == "/stats/summary" {
				steps = append(steps, b.statsFloorWindow(ctx))
			}
			if err := inTurn(round, steps...); err != nil {
				return err
			}
		}
	}
	return nil
}

// statsFloorWindow loads nodelet's containerd with the CRI stats call both kubelets make
// for every /stats/summary (besides ListContainers and ListPodSandbox), ListContainerStats
// of all containers, from as many clients, both kubelets frozen: no kubelet answers
// /stats/summary faster. Both rigs run the same containerd with as many pods.
func (b *bench) statsFloorWindow(ctx context.Context) func() error {
	return func() error {
		list := func(ctx context.Context) (int64, error) {
			stats, err := b.rawRuntime.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{})
			return int64(len(stats)), err
		}
		w, err := b.measureWindow(ctx, b.nodelet, b.kubelets(), list)
		if err != nil {
			return fmt.Errorf("ListContainerStats: %w", err)
		}
		b.results.api.statsFloor = append(b.results.api.statsFloor, w)
		report("raw CRI", "ListContainerStats", w)
		return b.pause(ctx)
	}
}

func report(who, what string, w window) {
	fmt.Fprintf(os.Stderr, "bench: %-8s %s: %d requests in %.1f s, %.1f/s, p99 %.1f ms\n", who, what,
		len(w.latencies), w.elapsed.Seconds(), w.perSecond(), ms(percentile(w.latencies, 0.99)))
}

// other is the kubelet that is not k.
func (b *bench) other(k *kubelet) *kubelet {
	if k == b.nodelet {
		return b.upstream
	}
	return b.nodelet
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

// measureWindow warms up for a second (connections, authorization caches), then runs do
// from -api-clients clients for -api-window with the frozen kubelets stopped, and notes
// the CPU used by k, k's containerd and its shims, the bench and the rest of the machine.
func (b *bench) measureWindow(ctx context.Context, k *kubelet, frozen []*kubelet, do request) (window, error) {
	var w window
	err := b.freeze(frozen, func() error {
		if _, err := hammer(ctx, b.o.apiClients, time.Second, do); err != nil {
			return err
		}
		before, err := b.cpuSnapshot(k)
		if err != nil {
			return err
		}
		if w, err = hammer(ctx, b.o.apiClients, b.o.apiWindow, do); err != nil {
			return err
		}
		after, err := b.cpuSnapshot(k)
		if err != nil {
			return err
		}
		w.kubeletCPU, w.runtimeCPU, w.shimCPU = after.kubelet-before.kubelet, after.runtime-before.runtime, after.shims-before.shims
		w.clientCPU = after.client - before.client
		w.otherCPU = (after.machine - before.machine) - w.kubeletCPU - w.runtimeCPU - w.shimCPU - w.clientCPU
		return nil
	})
	return w, err
}

// cpuSnapshot is the CPU used so far by a kubelet, its containerd, the shims of that
// containerd, the bench and the whole machine.
type cpuSnapshot struct{ kubelet, runtime, shims, client, machine time.Duration }

func (b *bench) cpuSnapshot(k *kubelet) (cpuSnapshot, error) {
	kr, err := cpuOf(k)
	if err != nil {
		return cpuSnapshot{}, err
	}
	self, err := processUsage(os.Getpid())
	if err != nil {
		return cpuSnapshot{}, err
	}
	shims, err := shimsCPU(strings.TrimPrefix(k.rig.endpoint, "unix://"))
	if err != nil {
		return cpuSnapshot{}, err
	}
	machine, err := machineBusy()
	return cpuSnapshot{kubelet: kr[0], runtime: kr[1], shims: shims, client: self.cpu, machine: machine}, err
}

// shimsCPU is the CPU used so far by the live shims of the containerd at socket.
func shimsCPU(socket string) (time.Duration, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || !isShimOf(cmdline, socket) {
			continue // gone, or not one of them
		}
		if u, err := processUsage(pid); err == nil {
			sum += u.cpu
		}
	}
	return sum, nil
}

// isShimOf says whether a /proc/PID/cmdline is a containerd shim serving the containerd
// at socket (its -address).
func isShimOf(cmdline []byte, socket string) bool {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
		return false
	}
	for i, a := range args[:len(args)-1] {
		if a == "-address" || a == "--address" {
			return args[i+1] == socket
		}
	}
	return false
}

// machineBusy is the CPU time all CPUs have spent running anything since boot (the "cpu"
// line of /proc/stat, in clock ticks).
func machineBusy() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	return busyTicks(line)
}

// busyTicks sums the fields of a /proc/stat cpu line but idle, iowait and steal (the
// 4th, 5th and 8th: nothing on this machine ran) and guest time (the 9th and 10th,
// already in user), as CPU time.
func busyTicks(line string) (time.Duration, error) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var ticks int64
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		if i != 3 && i != 4 && i != 7 {
			ticks += n
		}
	}
	const userHZ = 100
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// request is one request of a load window; it returns the size of the answer (bytes of
// a body, or items of a list).
type request func(context.Context) (int64, error)

func httpGet(client *http.Client, url string) request {
	return func(ctx context.Context) (int64, error) { return get(ctx, client, url) }
}

// hammer runs do from n clients, each back to back, until d has passed; a request under
// way at the end is waited for and counted. Any failure ends the window.
func hammer(ctx context.Context, n int, d time.Duration, do request) (window, error) {
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
				sizes[i], errs[i] = do(ctx)
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

// freeze runs f with the kubelets stopped (SIGSTOP), and resumes them after.
func (b *bench) freeze(kubelets []*kubelet, f func() error) error {
	for _, k := range kubelets {
		pid := k.cmd.Process.Pid
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return err
		}
		defer syscall.Kill(pid, syscall.SIGCONT)
	}
	return f()
}

// execRoundTrips times `kubectl exec POD -- true` on each kubelet and `kubectl get pod`,
// in turn, -exec-runs times, after one uncounted run of each (kubectl's discovery cache,
// the kubelets' authorization caches, the API server's connections to them).
func (b *bench) execRoundTrips(ctx context.Context, pod string) error {
	r := &b.results.api
	execOn := func(k *kubelet, record bool) func() error {
		return func() error {
			return b.freeze([]*kubelet{b.other(k)}, func() error {
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
		all.shimCPU += w.shimCPU
		all.clientCPU += w.clientCPU
		all.otherCPU += w.otherCPU
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
			fmt.Fprintf(out, "  GET %-14s %-8s %6.1f KiB; CPU per request: %s — %s; per window %s/s\n",
				path, name, float64(w.bytes)/1024, cpuPerRequest(w, "kubelet"), dominant(w), rates(r.windows[path][name]))
		}
	}
	if f := pooled(r.statsFloor); len(f.latencies) > 0 {
		fmt.Fprintf(out, "  containerd floor of /stats/summary: ListContainerStats (%d containers) called directly on nodelet's rig from %d clients, both kubelets frozen: %.1f/s, p50 %.1f ms, p99 %.1f ms; CPU per call: %s; per window %s/s\n",
			f.bytes, b.o.apiClients, f.perSecond(), ms(percentile(f.latencies, 0.5)), ms(percentile(f.latencies, 0.99)), cpuPerRequest(f, "nodelet (frozen)"), rates(r.statsFloor))
		n, u := pooled(r.windows["/stats/summary"]["nodelet"]), pooled(r.windows["/stats/summary"]["upstream"])
		fmt.Fprintf(out, "  /stats/summary against that floor: nodelet %.0f%% of its requests/s, upstream %.0f%%\n",
			100*n.perSecond()/f.perSecond(), 100*u.perSecond()/f.perSecond())
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

// cpuPerRequest is the CPU a window's requests cost each party, in ms.
func cpuPerRequest(w window, kubeletName string) string {
	per := func(d time.Duration) float64 { return ms(d) / float64(len(w.latencies)) }
	return fmt.Sprintf("%s %.2f ms, its containerd %.2f ms, containerd's shims %.2f ms, bench client %.2f ms, rest of the machine %.2f ms",
		kubeletName, per(w.kubeletCPU), per(w.runtimeCPU), per(w.shimCPU), per(w.clientCPU), per(w.otherCPU))
}

// dominant says who spent the most CPU on a window's requests.
func dominant(w window) string {
	parties := []struct {
		cpu  time.Duration
		says string
	}{
		{w.kubeletCPU, "the kubelet's own work dominates"},
		{w.runtimeCPU, "containerd dominates (CRI calls)"},
		{w.shimCPU, "containerd's shims dominate (container stats)"},
		{w.clientCPU, "the client (TLS, reading) dominates"},
		{w.otherCPU, "the rest of the machine dominates (other work: noise)"},
	}
	top := parties[0]
	for _, p := range parties[1:] {
		if p.cpu > top.cpu {
			top = p
		}
	}
	return top.says
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
