package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
)

// stepTimeout bounds one step (pods Ready, or pods gone) of either kubelet.
const stepTimeout = 3 * time.Minute

// results holds every sample, per kubelet name.
type results struct {
	nodeReady                          map[string]time.Duration
	create1, delete1, createN, deleteN map[string][]time.Duration
	// raw1 and rawN are the containerd floor: one pod, -pods pods, by direct CRI calls.
	raw1, rawN []time.Duration
	rssMiB     map[string]float64
	// rssSplit is the anonymous and file-backed MiB of the median RSS sample.
	rssSplit      map[string][2]float64
	cpu, children map[string]time.Duration
	window        time.Duration
	// cycleCPU is, per batch cycle, the CPU used by the kubelet and by its containerd.
	cycleCPU map[string][][2]time.Duration
	api      apiResults
	volumes  volumeResults
	requests requestsResults
	density  densityResults
	churn    churnResults
	// loadBefore and loadAfter are the machine's load averages (/proc/loadavg) at the
	// start and the end of the measurements.
	loadBefore, loadAfter string
}

func newResults() results {
	return results{nodeReady: map[string]time.Duration{},
		create1: map[string][]time.Duration{}, delete1: map[string][]time.Duration{},
		createN: map[string][]time.Duration{}, deleteN: map[string][]time.Duration{},
		rssMiB: map[string]float64{}, rssSplit: map[string][2]float64{}, cpu: map[string]time.Duration{}, children: map[string]time.Duration{},
		cycleCPU: map[string][][2]time.Duration{}, api: newAPIResults(), volumes: newVolumeResults(),
		requests: newRequestsResults(), density: newDensityResults(), churn: newChurnResults()}
}

func (b *bench) measure(ctx context.Context) error {
	rs, err := cri.NewRemoteRuntimeService(ctx, b.nodelet.rig.endpoint, 3*time.Second, 2*time.Minute)
	if err != nil {
		return err
	}
	b.rawRuntime = rs
	b.results.loadBefore = loadAverage()
	var steps []func(context.Context) error
	if slices.ContainsFunc(b.o.scenarioList(), func(s string) bool { return s != scenarioVolumes }) {
		steps = append(steps, b.warmUp)
	}
	if b.o.runs(scenarioPods) {
		steps = append(steps, b.singlePods, b.batches, b.idle)
	}
	if b.o.runs(scenarioAPI) {
		steps = append(steps, b.kubeletAPI)
	}
	if b.o.runs(scenarioVolumes) {
		steps = append(steps, b.volumes)
	}
	if b.o.runs(scenarioRequests) {
		steps = append(steps, b.requests)
	}
	if b.o.runs(scenarioDensity) {
		steps = append(steps, b.density)
	}
	if b.o.runs(scenarioChurn) {
		steps = append(steps, b.churn)
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	b.results.loadAfter = loadAverage()
	b.print(os.Stdout)
	return nil
}

// warmUp runs one pod on each kubelet first, not counted: one-time costs (QoS cgroups,
// caches, the first status patch) stay out of the figures.
func (b *bench) warmUp(ctx context.Context) error {
	for _, k := range b.kubelets() {
		if _, _, err := b.cycle(ctx, k, benchPod, []string{"warm"}); err != nil {
			return err
		}
	}
	return nil
}

// loadAverage is the first three fields of /proc/loadavg: the 1, 5 and 15 min averages.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// inTurn runs the round's steps one after the other, starting with step round%len: each
// goes first as often as the others, so slow drifts of the machine's load hit all alike.
func inTurn(round int, steps ...func() error) error {
	for i := range steps {
		if err := steps[(round+i)%len(steps)](); err != nil {
			return err
		}
	}
	return nil
}

// singlePods runs -rounds create/delete cycles of one pod on each kubelet, and as many
// raw CRI starts of the pod, in turn.
func (b *bench) singlePods(ctx context.Context) error {
	r := &b.results
	for round := range b.o.rounds {
		names := []string{fmt.Sprintf("one-%d", round)}
		single := func(k *kubelet) func() error {
			return func() error {
				created, deleted, err := b.cycle(ctx, k, benchPod, names)
				r.create1[k.name] = append(r.create1[k.name], created)
				r.delete1[k.name] = append(r.delete1[k.name], deleted)
				return err
			}
		}
		raw := func() error { return b.rawStep(ctx, fmt.Sprintf("raw-one-%d", round), 1, &r.raw1) }
		if err := inTurn(round, single(b.nodelet), single(b.upstream), raw); err != nil {
			return err
		}
	}
	return nil
}

// batches runs -batch-rounds create/delete cycles of -pods pods on each kubelet, and as
// many raw CRI starts of them, in turn; it notes the CPU each kubelet and its containerd
// use per cycle.
func (b *bench) batches(ctx context.Context) error {
	r := &b.results
	for round := range b.o.batchRounds {
		names := podNames(fmt.Sprintf("batch-%d", round), b.o.pods)
		batch := func(k *kubelet) func() error {
			return func() error {
				before, err := cpuOf(k)
				if err != nil {
					return err
				}
				created, deleted, err := b.cycle(ctx, k, benchPod, names)
				if err != nil {
					return err
				}
				after, err := cpuOf(k)
				r.cycleCPU[k.name] = append(r.cycleCPU[k.name], [2]time.Duration{after[0] - before[0], after[1] - before[1]})
				r.createN[k.name] = append(r.createN[k.name], created)
				r.deleteN[k.name] = append(r.deleteN[k.name], deleted)
				return err
			}
		}
		raw := func() error { return b.rawStep(ctx, fmt.Sprintf("raw-batch-%d", round), b.o.pods, &r.rawN) }
		if err := inTurn(round, batch(b.nodelet), batch(b.upstream), raw); err != nil {
			return err
		}
	}
	return nil
}

func podNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return names
}

// cycle creates the pods on k's node at once and waits until all are Ready, then deletes
// them at once and waits until all are gone from the API; it pauses after each half.
func (b *bench) cycle(ctx context.Context, k *kubelet, kind podKind, names []string) (created, deleted time.Duration, err error) {
	if created, err = b.createAllReady(ctx, k, kind, names); err != nil {
		return 0, 0, err
	}
	if err := b.pause(ctx); err != nil {
		return 0, 0, err
	}
	if deleted, err = b.deleteAllGone(ctx, k, names); err != nil {
		return 0, 0, err
	}
	return created, deleted, b.pause(ctx)
}

// cpuOf reads the CPU time used so far by the kubelet and by its containerd.
func cpuOf(k *kubelet) ([2]time.Duration, error) {
	ku, err := k.usage()
	if err != nil {
		return [2]time.Duration{}, err
	}
	pid, err := k.rig.pid()
	if err != nil {
		return [2]time.Duration{}, err
	}
	cu, err := processUsage(pid)
	return [2]time.Duration{ku.cpu, cu.cpu}, err
}

// pause waits -settle plus a random fraction of a second. Without the random part each
// step would start at the same offset from the kubelet's 1 s ticks (PLEG relist, sync
// loop) as the step before, which ended on one of them: a kubelet whose events follow its
// ticks would always hit the same phase, lucky or not.
func (b *bench) pause(ctx context.Context) error {
	return b.sleep(ctx, b.o.settle+rand.N(time.Second))
}

func (b *bench) createAllReady(ctx context.Context, k *kubelet, kind podKind, names []string) (time.Duration, error) {
	start, err := b.createPods(ctx, k, kind, names)
	if err != nil {
		return 0, err
	}
	at, err := b.tracker.waitAll(ctx, readyTimes, keys(k, names), stepTimeout, b.alive)
	if err != nil {
		return 0, fmt.Errorf("%s: Ready: %w; see %s", k.name, err, k.logFile())
	}
	progress(k, "created", names, start, at)
	return at.Sub(start), nil
}

func (b *bench) deleteAllGone(ctx context.Context, k *kubelet, names []string) (time.Duration, error) {
	start, err := b.deletePods(ctx, k, names)
	if err != nil {
		return 0, err
	}
	at, err := b.tracker.waitAll(ctx, goneTimes, keys(k, names), stepTimeout, b.alive)
	if err != nil {
		return 0, fmt.Errorf("%s: gone: %w; see %s", k.name, err, k.logFile())
	}
	progress(k, "deleted", names, start, at)
	return at.Sub(start), nil
}

// progress reports a step on stderr, with the wall-clock time of the API call so that it
// can be found in the kubelets' logs.
func progress(k *kubelet, what string, names []string, start, end time.Time) {
	fmt.Fprintf(os.Stderr, "bench: %-8s %s %s (%d pods) at %s: %.3f s\n", k.name, what, names[0], len(names),
		start.Format("15:04:05.000000"), end.Sub(start).Seconds())
}

// alive fails once either kubelet has exited.
func (b *bench) alive() error {
	for _, k := range b.kubelets() {
		if err := k.exited(); err != nil {
			return err
		}
	}
	return nil
}

// idle runs -pods pods on each kubelet, lets them settle, then samples both kubelets
// every 5 s over the same idle window: CPU from the first to the last sample, RSS the
// median of the samples (it moves with each garbage collection).
func (b *bench) idle(ctx context.Context) error {
	names := podNames("idle", b.o.pods)
	for _, k := range b.kubelets() {
		if _, err := b.createAllReady(ctx, k, benchPod, names); err != nil {
			return err
		}
	}
	if err := b.sleep(ctx, b.o.idleSettle); err != nil {
		return err
	}
	samples, err := b.sampleUsage(ctx, b.o.idle, b.kubelets()...)
	if err != nil {
		return err
	}
	for name, s := range samples {
		first, last := s[0], s[len(s)-1]
		b.results.cpu[name], b.results.children[name] = last.cpu-first.cpu, last.children-first.children
		b.results.window = last.at.Sub(first.at)
		mid := medianRSS(s)
		b.results.rssMiB[name], b.results.rssSplit[name] = mid.rssMiB, [2]float64{mid.anonMiB, mid.fileMiB}
	}
	for _, k := range b.kubelets() {
		if _, err := b.deleteAllGone(ctx, k, names); err != nil {
			return err
		}
	}
	return nil
}

// sampleUsage samples the kubelets every 5 s over window, from its start to its end.
func (b *bench) sampleUsage(ctx context.Context, window time.Duration, kubelets ...*kubelet) (map[string][]usage, error) {
	samples := map[string][]usage{}
	for end := time.Now().Add(window); ; {
		for _, k := range kubelets {
			u, err := k.usage()
			if err != nil {
				return nil, err
			}
			samples[k.name] = append(samples[k.name], u)
		}
		if !time.Now().Before(end) {
			return samples, nil
		}
		if err := b.sleep(ctx, min(5*time.Second, time.Until(end))); err != nil {
			return nil, err
		}
	}
}

// medianRSS is the sample of median RSS (it moves with each garbage collection).
func medianRSS(s []usage) usage {
	byRSS := append([]usage(nil), s...)
	sort.Slice(byRSS, func(i, j int) bool { return byRSS[i].rssMiB < byRSS[j].rssMiB })
	return byRSS[len(byRSS)/2]
}

// row is one line of the table: nodelet's and upstream's figure, and the aim for their
// ratio (0: none).
type row struct {
	what     string
	n, u     float64
	unit     string
	aim      float64
	duration bool
}

func (b *bench) rows() []row {
	r := b.results
	rows := []row{{what: "kubelet start → Node Ready (1 sample)", n: r.nodeReady["nodelet"].Seconds(), u: r.nodeReady["upstream"].Seconds(), duration: true}}
	if b.o.runs(scenarioPods) {
		rows = append(rows, b.podRows()...)
	}
	if b.o.runs(scenarioAPI) {
		rows = append(rows, b.apiRows()...)
	}
	if b.o.runs(scenarioVolumes) {
		rows = append(rows, b.volumeRows()...)
	}
	if b.o.runs(scenarioRequests) {
		rows = append(rows, b.requestsRows()...)
	}
	if b.o.runs(scenarioDensity) {
		rows = append(rows, b.densityRows()...)
	}
	if b.o.runs(scenarioChurn) {
		rows = append(rows, b.churnRows()...)
	}
	return rows
}

// podRows are the table's rows of the plain pods: single, batches, idle.
func (b *bench) podRows() []row {
	r := b.results
	med := func(m map[string][]time.Duration, name string) float64 { return median(m[name]).Seconds() }
	perSecond := func(name string) float64 { return 1000 * r.cpu[name].Seconds() / r.window.Seconds() }
	return []row{
		{what: fmt.Sprintf("API create → Ready, 1 pod (median of %d)", b.o.rounds), n: med(r.create1, "nodelet"), u: med(r.create1, "upstream"), aim: 0.5, duration: true},
		{what: fmt.Sprintf("1 pod deleted → gone (median of %d)", b.o.rounds), n: med(r.delete1, "nodelet"), u: med(r.delete1, "upstream"), duration: true},
		{what: fmt.Sprintf("%d pods created at once → all Ready (median of %d)", b.o.pods, b.o.batchRounds), n: med(r.createN, "nodelet"), u: med(r.createN, "upstream"), aim: 0.6, duration: true},
		{what: fmt.Sprintf("%d pods deleted → all gone (median of %d)", b.o.pods, b.o.batchRounds), n: med(r.deleteN, "nodelet"), u: med(r.deleteN, "upstream"), duration: true},
		{what: fmt.Sprintf("kubelet RSS with %d pods (median)", b.o.pods), n: r.rssMiB["nodelet"], u: r.rssMiB["upstream"], unit: "MiB", aim: 0.4},
		{what: fmt.Sprintf("idle CPU with %d pods (over %.0f s)", b.o.pods, r.window.Seconds()), n: perSecond("nodelet"), u: perSecond("upstream"), unit: "ms/s", aim: 0.33},
	}
}

func (b *bench) print(out *os.File) {
	fmt.Fprintf(out, "cluster mode: nodelet vs upstream's kubelet v1.37.2, one run, one control plane, a containerd each\n")
	// The script runs bin/nodelet as it finds it: the figures name the build they measured.
	fmt.Fprintf(out, "nodelet measured: %s (%s)\n", binaryVersion(b.o.nodeletBin), b.o.nodeletBin)
	fmt.Fprintf(out, "pods: %s, pinned with spec.nodeName, no probe; times from the API call to the watch event; rounds alternate; scenarios: %s\n", image, strings.Join(b.o.scenarioList(), ", "))
	fmt.Fprintf(out, "load average (1, 5, 15 min) at the start %s, at the end %s (2 cores, shared)\n\n", b.results.loadBefore, b.results.loadAfter)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "what\tnodelet\tupstream\tratio\taim\t")
	for _, r := range b.rows() {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t\n", r.what, r.format(r.n), r.format(r.u), r.ratio(), r.aimCell())
	}
	w.Flush()
	if b.o.runs(scenarioPods) {
		b.printFloor(out)
	}
	if b.o.runs(scenarioAPI) {
		b.printAPIContext(out)
	}
	if b.o.runs(scenarioPods) {
		b.printPodSamples(out)
	}
	if b.o.runs(scenarioVolumes) {
		b.printVolumeContext(out)
	}
	if b.o.runs(scenarioRequests) {
		b.printRequestsContext(out)
	}
	if b.o.runs(scenarioDensity) {
		b.printDensityContext(out)
	}
	if b.o.runs(scenarioChurn) {
		b.printChurnContext(out)
	}
}

// printPodSamples prints the plain pods' samples, CPU per batch and RSS split.
func (b *bench) printPodSamples(out *os.File) {
	fmt.Fprintln(out, "\nsamples in round order (s), pods without volumes nor service account token:")
	for _, s := range []struct {
		what string
		m    map[string][]time.Duration
	}{{"create → Ready, 1 pod", b.results.create1}, {"delete → gone, 1 pod", b.results.delete1},
		{fmt.Sprintf("create → Ready, %d pods", b.o.pods), b.results.createN}, {fmt.Sprintf("delete → gone, %d pods", b.o.pods), b.results.deleteN},
		{"raw CRI, 1 pod", map[string][]time.Duration{"nodelet": b.results.raw1}}, {fmt.Sprintf("raw CRI, %d pods", b.o.pods), map[string][]time.Duration{"nodelet": b.results.rawN}}} {
		fmt.Fprintf(out, "  %-24s nodelet %s | upstream %s\n", s.what, seconds(s.m["nodelet"]), seconds(s.m["upstream"]))
	}
	for _, name := range []string{"nodelet", "upstream"} {
		var kubelet, runtime []time.Duration
		for _, c := range b.results.cycleCPU[name] {
			kubelet, runtime = append(kubelet, c[0]), append(runtime, c[1])
		}
		fmt.Fprintf(out, "  CPU per %d-pod create+delete cycle (with its pauses), median: %s %.2f s, its containerd %.2f s\n",
			b.o.pods, name, median(kubelet).Seconds(), median(runtime).Seconds())
	}
	for _, name := range []string{"nodelet", "upstream"} {
		split := b.results.rssSplit[name]
		fmt.Fprintf(out, "  RSS of %s: %.1f MiB anonymous (heap, stacks) + %.1f MiB file-backed (its binary)\n", name, split[0], split[1])
	}
	fmt.Fprintf(out, "  CPU of waited-for child processes in the idle window: nodelet %v, upstream %v\n",
		b.results.children["nodelet"], b.results.children["upstream"])
}

// printFloor prints the containerd floor and each kubelet's share above it.
func (b *bench) printFloor(out *os.File) {
	r := b.results
	floor1, floorN := median(r.raw1), median(r.rawN)
	fmt.Fprintf(out, "\ncontainerd floor on nodelet's rig, in turn with the rounds (RunPodSandbox+CreateContainer+StartContainer called directly, no API, nodelet frozen):\n")
	fmt.Fprintf(out, "  1 pod %.2f s (median of %d), %d pods at once %.2f s (median of %d)\n", floor1.Seconds(), len(r.raw1), b.o.pods, floorN.Seconds(), len(r.rawN))
	share := func(what string, m map[string][]time.Duration, floor time.Duration) {
		n, u := median(m["nodelet"])-floor, median(m["upstream"])-floor
		ratio := "-" // a median at or under the floor (noise) has no share to compare
		if n > 0 && u > 0 {
			ratio = fmt.Sprintf("%.2f", n.Seconds()/u.Seconds())
		}
		fmt.Fprintf(out, "  kubelet's share above the floor, %s: nodelet %+.2f s, upstream %+.2f s, ratio %s\n", what, n.Seconds(), u.Seconds(), ratio)
	}
	share("create → Ready, 1 pod", r.create1, floor1)
	share(fmt.Sprintf("create → Ready, %d pods", b.o.pods), r.createN, floorN)
}

// ratio is nodelet's figure over upstream's; "-" when it means nothing (both infinite:
// in churn, both kubelets left more pods unready than the percentile allows).
func (r row) ratio() string {
	if q := r.n / r.u; !math.IsNaN(q) {
		return fmt.Sprintf("%.2f", q)
	}
	return "-"
}

// aimCell is the aim for the ratio and whether the run met it.
func (r row) aimCell() string {
	q := r.n / r.u
	switch {
	case r.aim <= 0:
		return "-"
	case math.IsNaN(q):
		return fmt.Sprintf("≤ %.2f n/a", r.aim)
	}
	return fmt.Sprintf("≤ %.2f %s", r.aim, verdict(q, r.aim))
}

func (r row) format(v float64) string {
	if math.IsInf(v, 1) {
		return "∞ (not Ready)"
	}
	if r.duration {
		return fmt.Sprintf("%.2f s", v)
	}
	return fmt.Sprintf("%.1f %s", v, r.unit)
}

func seconds(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = fmt.Sprintf("%.2f", d.Seconds())
	}
	return strings.Join(s, " ")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// binaryVersion is what bin --version prints (nodelet: the commit it was built from), or
// why it printed nothing.
func binaryVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "version unknown: " + err.Error()
	}
	return strings.TrimSpace(string(out))
}
