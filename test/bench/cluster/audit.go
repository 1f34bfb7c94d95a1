package main

// The requests scenario: how many API requests a kubelet makes per pod lifecycle, as the
// API server counts them. The control plane writes an audit log of the nodes' requests
// (user group system:nodes, Metadata level, one JSON audit.k8s.io/v1 Event a line, stage
// RequestReceived omitted; see hack/controlplane.sh). Per kubelet, one at a time, on an
// idle node: the log is tailed from the start of an idle window of -requests-window (no
// pods changing: the background of leases, node status, watches), then -requests-pods
// pods are created at once → all Ready → deleted → all gone, in a window of the same
// length that starts with the creates. Requests are counted by
// requestReceivedTimestamp and user (system:node:<node>), each once by auditID (a watch
// logs ResponseStarted and ResponseComplete); the lifecycle window's counts less the idle
// window's, divided by the pods, are the requests per pod lifecycle, itemised by verb and
// resource[/subresource].

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nodelet/nodelet/test/internal/audit"
)

// perPod is the lifecycle window's counts less the idle window's scaled to the same
// length (they are the same length unless the lifecycle outran -requests-window), divided
// by the pods.
func perPod(life, idle audit.Counts, scale float64, pods int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range life {
		out[k] += float64(v)
	}
	for k, v := range idle {
		out[k] -= scale * float64(v)
	}
	for k := range out {
		out[k] /= float64(pods)
	}
	return out
}

// requestsResults are the requests scenario's counts, per kubelet name.
type requestsResults struct {
	// life and idle are the counts of the lifecycle and the idle window; lifeLen and
	// idleLen their lengths.
	life, idle       map[string]audit.Counts
	lifeLen, idleLen map[string]time.Duration
}

func newRequestsResults() requestsResults {
	return requestsResults{life: map[string]audit.Counts{}, idle: map[string]audit.Counts{},
		lifeLen: map[string]time.Duration{}, idleLen: map[string]time.Duration{}}
}

// perPod is k's requests per pod lifecycle, itemised.
func (r requestsResults) perPod(name string, pods int) map[string]float64 {
	return perPod(r.life[name], r.idle[name], r.lifeLen[name].Seconds()/r.idleLen[name].Seconds(), pods)
}

// auditWriteSlack is how long after a window the log is read: the API server writes a
// request's event once it has answered it.
const auditWriteSlack = 2 * time.Second

// requests counts each kubelet's requests over an idle window and a pod lifecycle window.
func (b *bench) requests(ctx context.Context) error {
	for _, k := range b.kubelets() {
		if err := b.requestWindows(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// requestWindows is the requests scenario on k: the idle window, then the lifecycle of
// -requests-pods pods in a window as long (or longer, if the lifecycle outruns it).
func (b *bench) requestWindows(ctx context.Context, k *kubelet) error {
	// Whatever came before (deletions, their clean-up) must be over.
	if err := b.sleep(ctx, b.o.idleSettle); err != nil {
		return err
	}
	tail, err := audit.OpenTail(b.auditLog())
	if err != nil {
		return err
	}
	defer tail.Close()
	idleStart := time.Now()
	if err := b.sleep(ctx, b.o.requestsWindow); err != nil {
		return err
	}
	start := time.Now()
	names := podNames("req", b.o.requestsPods)
	_, _, err = b.cycle(ctx, k, benchPod, names)
	if err == nil {
		err = b.sleep(ctx, time.Until(start.Add(b.o.requestsWindow)))
	}
	end := time.Now()
	if err == nil {
		err = b.sleep(ctx, auditWriteSlack)
	}
	if err != nil {
		return err
	}
	events, err := tail.Read()
	if err != nil {
		return err
	}
	user := "system:node:" + k.node
	r := &b.results.requests
	r.idle[k.name], r.idleLen[k.name] = audit.Tally(events, user, idleStart, start), start.Sub(idleStart)
	r.life[k.name], r.lifeLen[k.name] = audit.Tally(events, user, start, end), end.Sub(start)
	fmt.Fprintf(os.Stderr, "bench: %-8s requests: %d in %.1f s idle, %d in %.1f s with %d pods' lifecycle\n", k.name,
		r.idle[k.name].Total(), r.idleLen[k.name].Seconds(), r.life[k.name].Total(), r.lifeLen[k.name].Seconds(), b.o.requestsPods)
	return nil
}

// auditLog is the control plane's audit log: -audit-log, or logs/audit.log next to the
// admin kubeconfig (NODELET_CP_DIR).
func (b *bench) auditLog() string {
	if b.o.auditLog != "" {
		return b.o.auditLog
	}
	return filepath.Join(filepath.Dir(b.kubeconfig), "logs", "audit.log")
}

// requestsRows is the table's row of the requests scenario: the total per pod lifecycle.
func (b *bench) requestsRows() []row {
	r := b.results.requests
	sum := func(name string) float64 {
		t := 0.0
		for _, v := range r.perPod(name, b.o.requestsPods) {
			t += v
		}
		return t
	}
	return []row{{what: fmt.Sprintf("API requests per pod lifecycle (audit log, %d pods at once, less background)", b.o.requestsPods),
		n: sum("nodelet"), u: sum("upstream"), unit: "req", aim: 1}}
}

// printRequestsContext prints the requests per pod lifecycle and the background per
// minute, itemised.
func (b *bench) printRequestsContext(out io.Writer) {
	r := b.results.requests
	fmt.Fprintf(out, "\nAPI requests per pod lifecycle (create → Ready → delete → gone, %d pods at once), from the API server's audit log: the lifecycle window (nodelet %.0f s, upstream %.0f s) less the idle window just before it (%.0f s, %.0f s; scaled to the lifecycle window's length), per pod\n",
		b.o.requestsPods, r.lifeLen["nodelet"].Seconds(), r.lifeLen["upstream"].Seconds(), r.idleLen["nodelet"].Seconds(), r.idleLen["upstream"].Seconds())
	writeRequestTable(out, r.perPod("nodelet", b.o.requestsPods), r.perPod("upstream", b.o.requestsPods), "%.2f")
	perMinute := func(name string) map[string]float64 {
		out := map[string]float64{}
		for k, v := range r.idle[name] {
			out[k] = float64(v) * 60 / r.idleLen[name].Seconds()
		}
		return out
	}
	fmt.Fprintf(out, "background, idle node without pods changing, requests per minute (watches count when they start):\n")
	writeRequestTable(out, perMinute("nodelet"), perMinute("upstream"), "%.1f")
}

// writeRequestTable prints one line per request kind of either kubelet, the busiest
// first, and their totals: names left-aligned, figures right-aligned.
func writeRequestTable(out io.Writer, n, u map[string]float64, format string) {
	keys := requestKeys(n, u)
	width := len("request")
	for _, k := range keys {
		width = max(width, len(k))
	}
	line := func(what, nv, uv string) { fmt.Fprintf(out, "  %-*s %10s %10s\n", width, what, nv, uv) }
	figure := func(v float64) string {
		s := fmt.Sprintf(format, v)
		if strings.Trim(s, "-0.") == "" {
			return strings.TrimPrefix(s, "-") // a background item's rounding, not a negative count
		}
		return s
	}
	line("request", "nodelet", "upstream")
	var nt, ut float64
	for _, k := range keys {
		line(k, figure(n[k]), figure(u[k]))
		nt, ut = nt+n[k], ut+u[k]
	}
	line("total", figure(nt), figure(ut))
}

// requestKeys are the keys of both maps, by the larger of their figures (largest first),
// then by name.
func requestKeys(n, u map[string]float64) []string {
	var keys []string
	for k := range n {
		keys = append(keys, k)
	}
	for k := range u {
		if _, ok := n[k]; !ok {
			keys = append(keys, k)
		}
	}
	size := func(k string) float64 { return max(abs(n[k]), abs(u[k])) }
	sort.Slice(keys, func(i, j int) bool {
		if a, b := size(keys[i]), size(keys[j]); a != b {
			return a > b
		}
		return keys[i] < keys[j]
	})
	return keys
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}
