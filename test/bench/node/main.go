// Command node benchmarks a standalone nodelet with many pods (100 by default) on a
// containerd that streams container events (containerd 2.x), for two questions:
//
//  1. the evented PLEG against relisting: nodelet's idle CPU with the pods running, and
//     the time from a container's exit (killed from the host) to its replacement's
//     start, as the runtime stamps them;
//  2. the eviction manager's CPU with the pods: nodelet's idle CPU with eviction on (the
//     default thresholds) against off (every threshold "0%" and no local storage
//     isolation, which leaves its loop nothing to do), and, measured in this process,
//     the cost of one eviction check (stats summary and signals) at the 10 s period.
//
// One set of pods runs throughout; nodelet is restarted for each measurement window with
// the variant's configuration (it adopts the running pods), and the variants alternate
// window by window, round after round, so that machine noise hits them alike. The CPU
// figures also give containerd's and its shims' share, and a window without nodelet
// their own cost. The bench removes everything it made; it needs a containerd of its
// own (a kubelet removes pods it does not own).
//
//	go run ./test/bench/node -endpoint unix:///run/nodelet-b2/containerd.sock -nodelet bin/nodelet
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/test/internal/host"
)

type options struct {
	endpoint, nodeletBin         string
	pods, sequential             int
	rounds, kills, evictionSyncs int
	settle, idle                 time.Duration
	// variants are the windows of each round, in order (-variants).
	variants []variant
	// profileDir, when set, receives CPU profiles of nodelet and containerd taken over
	// each idle window (-profile).
	profileDir string
}

func main() {
	var o options
	flag.StringVar(&o.endpoint, "endpoint", os.Getenv("CONTAINER_RUNTIME_ENDPOINT"), "CRI endpoint of a containerd the bench may use alone, with containerd.pid next to its socket")
	flag.StringVar(&o.nodeletBin, "nodelet", "bin/nodelet", "nodelet binary")
	flag.IntVar(&o.pods, "pods", 100, "pods running throughout")
	flag.IntVar(&o.sequential, "sequential", 5, "of those, pods started one at a time last, for nodelet's own start-up trace")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of windows, one window per variant each")
	flag.IntVar(&o.kills, "kills", 5, "containers killed per window of the PLEG variants (each in another pod)")
	flag.IntVar(&o.evictionSyncs, "eviction-checks", 50, "eviction checks timed in this process (0: skip)")
	flag.DurationVar(&o.settle, "settle", 30*time.Second, "wait after nodelet starts (it syncs every pod) before a window")
	flag.DurationVar(&o.idle, "idle", time.Minute, "idle CPU window")
	only := flag.String("variants", "", "comma-separated windows to run per round, of "+variantKeys()+" (default all)")
	before := flag.String("nodelet-before", "", "a second nodelet binary (e.g. main's) whose windows run next to each nodelet window, for before/after figures from one run")
	flag.StringVar(&o.profileDir, "profile", "", "directory for CPU profiles of nodelet and containerd over each idle window (nodelet then serves its API with anonymous access on 127.0.0.1)")
	flag.Parse()
	var err error
	if o.variants, err = pickVariants(*only); err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		os.Exit(2)
	}
	if *before != "" {
		o.variants = withBefore(o.variants, *before)
	}
	// The libraries' logs (the eviction manager's) are not the bench's output.
	klog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	start := time.Now()
	err = run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		os.Exit(1)
	}
	fmt.Printf("  (wall time %v)\n", time.Since(start).Round(time.Second))
}

// variant is one nodelet configuration, or none at all (the runtime's own cost).
type variant struct {
	key, name string
	// bin is the nodelet binary when not -nodelet's (a -nodelet-before window).
	bin      string
	nodelet  bool // false: nodelet stays stopped in this window
	evented  bool // EventedPLEG feature gate
	eviction bool // default eviction thresholds, or none
	latency  bool // the window also times container restarts
}

var (
	relisting   = variant{key: "relist", name: "relisting PLEG (EventedPLEG: false)", nodelet: true, evented: false, eviction: true, latency: true}
	evented     = variant{key: "evented", name: "evented PLEG (default)", nodelet: true, evented: true, eviction: true, latency: true}
	noEviction  = variant{key: "noevict", name: "evented PLEG, eviction off", nodelet: true, evented: true, eviction: false}
	runtimeOnly = variant{key: "none", name: "no nodelet (the runtime alone)"}
	variants    = []variant{relisting, evented, noEviction, runtimeOnly}
)

func variantKeys() string {
	keys := make([]string, len(variants))
	for i, v := range variants {
		keys[i] = v.key
	}
	return strings.Join(keys, ",")
}

// withBefore adds after each nodelet window the same window run by the binary bin.
func withBefore(vs []variant, bin string) []variant {
	var out []variant
	for _, v := range vs {
		out = append(out, v)
		if v.nodelet {
			b := v
			b.key, b.name, b.bin = v.key+"-before", "before: "+v.name, bin
			out = append(out, b)
		}
	}
	return out
}

// pickVariants returns the variants named in the comma-separated list, in the list's
// order; an empty list is all of them.
func pickVariants(list string) ([]variant, error) {
	if list == "" {
		return variants, nil
	}
	var picked []variant
	for _, key := range strings.Split(list, ",") {
		i := slices.IndexFunc(variants, func(v variant) bool { return v.key == key })
		if i < 0 {
			return nil, fmt.Errorf("-variants: unknown %q; known: %s", key, variantKeys())
		}
		picked = append(picked, variants[i])
	}
	return picked, nil
}

// window is what one nodelet run measured.
type window struct {
	idle     cpu // per minute
	restarts []time.Duration
}

func run(ctx context.Context, o options) (err error) {
	if o.sequential > o.pods || o.pods < 1 {
		return errors.New("-sequential must not exceed -pods, and -pods must be positive")
	}
	if need := o.rounds * o.kills * len(o.variants); need > o.pods {
		return fmt.Errorf("%d restarts need as many pods; -pods is %d", need, o.pods)
	}
	dir, err := os.MkdirTemp("", "nodelet-bench-node-")
	if err != nil {
		return err
	}
	// Removed last, once nodelet and its pods are gone.
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	n, err := newNode(ctx, o.endpoint, o.nodeletBin, dir)
	if err != nil {
		return err
	}
	if o.profileDir != "" {
		if n.profiler, err = newProfiler(o.profileDir, o.endpoint); err != nil {
			return err
		}
	}
	defer func() { err = errors.Join(err, n.cleanup()) }()

	fmt.Printf("%d busybox pods on %s, standalone nodelet restarted per window with each variant in turn\n", o.pods, o.endpoint)
	if err := startPods(ctx, n, o); err != nil {
		return err
	}
	results := map[string][]window{}
	v := &victims{used: map[string]bool{}}
	for r := range o.rounds {
		for _, va := range o.variants {
			w, err := measureWindow(ctx, n, va, o, v)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, va.name, err)
			}
			results[va.key] = append(results[va.key], w)
		}
	}
	printIdle(results, o)
	if o.kills > 0 {
		printRestarts(results, o)
	}
	if o.evictionSyncs > 0 {
		e, err := n.measureEviction(ctx, o.evictionSyncs)
		if err != nil {
			return fmt.Errorf("eviction checks: %w", err)
		}
		printEviction(e)
	}
	return nil
}

// startPods starts nodelet (evented, the default) with all but the sequential pods at
// once, then the sequential ones one at a time, and prints the median of their start-up
// traces from nodelet's log: a pod start on a node that already runs the others.
func startPods(ctx context.Context, n *node, o options) error {
	if err := n.start(evented); err != nil {
		return err
	}
	defer n.stop()
	batch := o.pods - o.sequential
	for i := range batch {
		if err := n.writeManifest(fmt.Sprint("pod", i)); err != nil {
			return err
		}
	}
	if err := n.waitRunning(ctx, batch, 5*time.Minute); err != nil {
		return err
	}
	if err := host.Sleep(ctx, o.settle); err != nil {
		return err
	}
	var names []string
	for i := range o.sequential {
		name := fmt.Sprint("seq", i)
		names = append(names, n.podName(name))
		if err := n.writeManifest(name); err != nil {
			return err
		}
		if err := n.waitRunning(ctx, batch+i+1, time.Minute); err != nil {
			return err
		}
		if err := host.Sleep(ctx, 2*time.Second); err != nil { // Ready, and its trace logged
			return err
		}
	}
	if o.sequential == 0 {
		return nil
	}
	starts, err := podStarts(n.logPath, names)
	if err != nil {
		return err
	}
	phase := func(key string) float64 {
		d := make([]time.Duration, len(starts))
		for i, s := range starts {
			d[i] = s[key]
		}
		return ms(host.Median(d))
	}
	fmt.Printf("nodelet's start-up trace of %d pods started one at a time with %d–%d pods running (medians, from its \"Pod started\" lines):\n", o.sequential, batch, o.pods-1)
	fmt.Printf("  total %.1f ms: sandbox %.1f, containerCreate %.1f, containerStart %.1f, readiness %.1f, other %.1f ms (pod worker, pod cgroup set-up, status)\n",
		phase("total"), phase("sandbox"), phase("containerCreate"), phase("containerStart"), phase("readiness"), phase("other"))
	return nil
}

// measureWindow starts nodelet with the variant, lets it settle, measures the idle CPU
// and then, for the PLEG variants, times container restarts; it stops nodelet at the end.
func measureWindow(ctx context.Context, n *node, v variant, o options, vs *victims) (window, error) {
	var w window
	if v.nodelet {
		if err := n.start(v); err != nil {
			return w, err
		}
		defer n.stop()
	}
	if err := host.Sleep(ctx, o.settle); err != nil {
		return w, err
	}
	if v.nodelet {
		if err := errors.Join(n.checkAlive(), n.checkPLEG(v)); err != nil {
			return w, err
		}
	}
	if cs, err := n.running(ctx); err != nil || len(cs) != o.pods {
		return w, fmt.Errorf("%d containers running, want %d (%v)", len(cs), o.pods, err)
	}
	shims, err := host.PIDsWithArgs(n.shimArgs...)
	if err != nil {
		return w, err
	}
	profiled := n.profile(v, o.idle)
	before, err := n.cpuNow(shims)
	if err != nil {
		return w, err
	}
	if err := host.Sleep(ctx, o.idle); err != nil {
		return w, err
	}
	after, err := n.cpuNow(shims)
	if err != nil {
		return w, err
	}
	if err := profiled(); err != nil {
		return w, err
	}
	if v.nodelet {
		if err := n.checkAlive(); err != nil {
			return w, err
		}
	}
	w.idle = after.sub(before).perMinute(o.idle)
	for i := 0; v.latency && i < o.kills; i++ {
		c, err := vs.next(ctx, n)
		if err != nil {
			return w, err
		}
		d, err := n.killAndTimeRestart(ctx, c)
		if err != nil {
			return w, err
		}
		w.restarts = append(w.restarts, d)
		if err := host.Sleep(ctx, time.Second); err != nil {
			return w, err
		}
	}
	return w, nil
}

func printIdle(results map[string][]window, o options) {
	fmt.Printf("idle CPU-seconds per minute with %d pods, %d rounds of %v windows (variants alternating), after %v settling: median (per round)\n",
		o.pods, o.rounds, o.idle, o.settle)
	fmt.Printf("  %-46s %-26s %-26s %s\n", "", "nodelet", "containerd", "shims")
	col := func(ws []window, f func(cpu) float64) (string, float64) {
		vals := make([]float64, len(ws))
		parts := make([]string, len(ws))
		for i, w := range ws {
			vals[i] = f(w.idle)
			parts[i] = fmt.Sprintf("%.2f", vals[i])
		}
		m := host.Median(vals)
		return fmt.Sprintf("%.2f (%s)", m, strings.Join(parts, " ")), m
	}
	nodelet := func(c cpu) float64 { return c.nodelet }
	containerd := func(c cpu) float64 { return c.containerd }
	shims := func(c cpu) float64 { return c.shims }
	med := map[string]cpu{}
	for _, v := range o.variants {
		ws := results[v.key]
		a, na := col(ws, nodelet)
		b, nb := col(ws, containerd)
		c, nc := col(ws, shims)
		med[v.key] = cpu{na, nb, nc}
		if !v.nodelet {
			a = "–"
		}
		fmt.Printf("  %-46s %-26s %-26s %s\n", v.name+":", a, b, c)
	}
	have := func(keys ...string) bool {
		for _, k := range keys {
			if _, ok := med[k]; !ok {
				return false
			}
		}
		return true
	}
	if have(evented.key+"-before", relisting.key+"-before") {
		ev, rl := med[evented.key+"-before"], med[relisting.key+"-before"]
		fmt.Printf("  before: evented/relisting, nodelet: %.2f of the medians, %.2f median of the rounds' own ratios\n",
			ev.nodelet/rl.nodelet, medianRatio(results[evented.key+"-before"], results[relisting.key+"-before"], nodelet))
	}
	if !have(evented.key, relisting.key) {
		return
	}
	ev, rl := med[evented.key], med[relisting.key]
	fmt.Printf("  evented/relisting, nodelet: %.2f of the medians, %.2f median of the rounds' own ratios (aim ≤ 0.3)\n",
		ev.nodelet/rl.nodelet, medianRatio(results[evented.key], results[relisting.key], nodelet))
	total := func(c cpu) float64 { return c.nodelet + c.containerd + c.shims }
	fmt.Printf("  evented/relisting, nodelet+containerd+shims: %.2f (%.2f vs %.2f CPU-s per minute)\n", total(ev)/total(rl), total(ev), total(rl))
	if !have(runtimeOnly.key, noEviction.key) {
		return
	}
	alone := med[runtimeOnly.key]
	fmt.Printf("  the runtime's CPU that nodelet causes (variant − runtime alone), containerd+shims: relisting %+.2f, evented %+.2f, evented without eviction %+.2f CPU-s per minute\n",
		rl.containerd+rl.shims-alone.containerd-alone.shims, ev.containerd+ev.shims-alone.containerd-alone.shims,
		med[noEviction.key].containerd+med[noEviction.key].shims-alone.containerd-alone.shims)
	off := med[noEviction.key]
	fmt.Printf("  eviction manager (evented, on − off): nodelet %+.2f, containerd %+.2f, shims %+.2f CPU-s per minute; median of the rounds' own differences, nodelet: %+.2f\n",
		ev.nodelet-off.nodelet, ev.containerd-off.containerd, ev.shims-off.shims, medianDiff(results[evented.key], results[noEviction.key], nodelet))
}

func medianRatio(a, b []window, f func(cpu) float64) float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = f(a[i].idle) / f(b[i].idle)
	}
	return host.Median(r)
}

func medianDiff(a, b []window, f func(cpu) float64) float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = f(a[i].idle) - f(b[i].idle)
	}
	return host.Median(r)
}

func printRestarts(results map[string][]window, o options) {
	fmt.Printf("container killed (SIGKILL from the host) → restarted, old FinishedAt → new StartedAt as the runtime stamps them; %d kills per variant, each in another pod\n", o.rounds*o.kills)
	med := map[string]time.Duration{}
	for _, v := range o.variants {
		if !v.latency {
			continue
		}
		var all []time.Duration
		for _, w := range results[v.key] {
			all = append(all, w.restarts...)
		}
		med[v.key] = host.Median(all)
		fmt.Printf("  %-46s median %7.1f ms, p10 %7.1f ms, p90 %7.1f ms, max %7.1f ms\n", v.name+":", ms(med[v.key]),
			ms(host.Percentile(all, 10)), ms(host.Percentile(all, 90)), ms(host.Percentile(all, 100)))
	}
	if med[evented.key] > 0 && med[relisting.key] > 0 {
		fmt.Printf("  evented/relisting: %.2f\n", float64(med[evented.key])/float64(med[relisting.key]))
	}
}

func printEviction(e evictionCost) {
	fmt.Printf("eviction manager measured in this process (pkg/node/stats Provider + pkg/node/eviction Manager, default evictionHard, %d pods, nodelet stopped): %d checks back to back\n", e.pods, e.syncs)
	fmt.Printf("  per check: %.1f ms wall; CPU %.1f ms here, %.1f ms containerd, %.1f ms shims\n", ms(e.wall), ms(e.self), ms(e.containerd), ms(e.shims))
	fmt.Printf("  at one check per %v: %.3f CPU-s per minute here, %.3f containerd, %.3f shims; pressure conditions %v, evictions attempted %d\n",
		evictionPeriod, e.perMinute(e.self), e.perMinute(e.containerd), e.perMinute(e.shims), e.conditions, e.evictedPods)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
