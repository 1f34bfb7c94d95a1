package main

// The density scenario: -density-pods pods (110, the default maxPods: a full node)
// brought up by one Deployment scale-up, the way a rollout or a node drain elsewhere lands
// them, one kubelet at a time (the other idle with no pods), rounds alternating which
// goes first, each round also timing the containerd floor for as many pods. Per kubelet:
//
//   - scale call → all pods Ready, and the CPU the kubelet and its containerd spent on it;
//   - with the pods up and settled, its RSS (anonymous and file-backed) and idle CPU over
//     -idle, and its heap profile (/debug/pprof/heap through the kubelet API), the top 10
//     of which is printed;
//   - scale to 0 → all pods gone.
//
// The Deployment is created with 0 replicas and its ReplicaSet waited for, so the clock
// covers only what the scale-up costs: the ReplicaSet controller creating the pods (in
// slow-start batches, at its client's rate limit: the same for both kubelets; printed
// apart) and the kubelet starting them. The pods are benchPod's, pinned with
// spec.nodeName, so the scheduler is not in the path.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/internal/host"
)

// deploymentLabel marks a Deployment's pods (value: its name): the tracker finds their
// generated names by it.
const deploymentLabel = "nodelet-bench-deployment"

// maxPods is both kubelets' default maxPods: the most pods a node admits.
const maxPods = 110

// densityResults are the density scenario's samples, per kubelet name, in round order.
type densityResults struct {
	// up: scale-up call → all Ready; down: scale to 0 → all gone; created: scale-up call →
	// the last pod seen in the API (the ReplicaSet controller's part).
	up, down, created map[string][]time.Duration
	// upBudget is the CPU the machine, the control plane, the kubelet and its containerd
	// used over each bring-up.
	upBudget map[string][]cpuBudget
	// rss is each round's median RSS sample with the pods up; idleCPU its CPU in ms/s.
	rss     map[string][]usage
	idleCPU map[string][]float64
	// reclaimed is the median RSS sample after the kernel was made to reclaim the
	// binary's resident pages, as memory pressure would (last round): RSS without the
	// code a kubelet ran once, whether or not it hands those pages back itself.
	reclaimed map[string]usage
	// floor is the same number of pods started by direct CRI calls on nodelet's rig, at
	// once; pacedFloor the same, each pod started when the latest scale-up's pod of its
	// rank reached the API (arrivals, offsets from the scale call), so that the ReplicaSet
	// controller's seconds are not counted as a kubelet's.
	floor, pacedFloor []time.Duration
	arrivals          []time.Duration
	// floorBudget is the CPU each at-once floor run took.
	floorBudget []cpuBudget
	// floorErr is why a raw run failed (110 sandboxes at once can outlast a CRI call's
	// deadline on containerd 2.x): the kubelets' figures stand without a floor.
	floorErr error
	// heap is each kubelet's heap profile top 10 (last round), or why there is none;
	// heapFile where the profile was saved.
	heap, heapFile map[string]string
	// criCalls is the CRI calls each kubelet made to bring the pods up (last round), by
	// kubelet_runtime_operations_total's operation_type; nil if its metrics could not be
	// read.
	criCalls map[string]map[string]float64
	// phases is the seconds nodelet's pods spent in each start-up phase over a bring-up
	// (last round), from nodelet_pod_startup_*'s sums, "total" included; empty for a
	// kubelet without those metrics.
	phases map[string]map[string]float64
}

func newDensityResults() densityResults {
	return densityResults{up: map[string][]time.Duration{}, down: map[string][]time.Duration{},
		created: map[string][]time.Duration{}, upBudget: map[string][]cpuBudget{},
		rss: map[string][]usage{}, reclaimed: map[string]usage{}, idleCPU: map[string][]float64{}, heap: map[string]string{}, heapFile: map[string]string{},
		criCalls: map[string]map[string]float64{}, phases: map[string]map[string]float64{}}
}

// density runs -density-rounds rounds of a full scale-up and scale-down on each kubelet
// and of the containerd floor, in turn.
func (b *bench) density(ctx context.Context) error {
	for round := range b.o.densityRounds {
		step := func(k *kubelet) func() error { return func() error { return b.densityRound(ctx, k, round) } }
		raw := func() error {
			err := b.densityFloors(ctx, round)
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "bench: raw CRI run of %d pods failed, no floor this round: %v\n", b.o.densityPods, err)
				b.results.density.floorErr = err
				return b.pause(ctx)
			}
			return err
		}
		if err := inTurn(round, step(b.nodelet), step(b.upstream), raw); err != nil {
			return err
		}
	}
	return nil
}

// densityFloors times the containerd floor for the density pods: all at once, then paced
// as the latest scale-up's pods arrived (the first round's raw step comes after both
// kubelets', so there is always one).
func (b *bench) densityFloors(ctx context.Context, round int) error {
	r := &b.results.density
	atOnce := make([]time.Duration, b.o.densityPods)
	if err := b.rawPacedStep(ctx, fmt.Sprintf("raw-density-%d", round), atOnce, &r.floor, &r.floorBudget); err != nil {
		return err
	}
	if len(r.arrivals) == 0 {
		return nil
	}
	return b.rawPacedStep(ctx, fmt.Sprintf("raw-paced-%d", round), r.arrivals, &r.pacedFloor, nil)
}

// densityRound is one round on k: Deployment created, scaled up, idle figures and heap
// profile with the pods up, scaled down, Deployment deleted.
func (b *bench) densityRound(ctx context.Context, k *kubelet, round int) error {
	name := fmt.Sprintf("density-%d", round)
	if err := b.createDeployment(ctx, k, name); err != nil {
		return err
	}
	if err := b.pause(ctx); err != nil {
		return err
	}
	keys, err := b.densityUp(ctx, k, name)
	if err != nil {
		return err
	}
	// The pods' start-up work (status updates, first stats) must be over.
	if err := b.sleep(ctx, b.o.idleSettle); err != nil {
		return err
	}
	if err := b.densityIdle(ctx, k); err != nil {
		return err
	}
	b.densityHeap(ctx, k)
	if round == b.o.densityRounds-1 {
		if err := b.densityReclaimed(ctx, k); err != nil {
			return err
		}
	}
	if err := b.densityDown(ctx, k, name, keys); err != nil {
		return err
	}
	return b.pause(ctx)
}

// densityDeployment is a Deployment of benchPods on k's node, with 0 replicas.
func densityDeployment(runID string, k *kubelet, name string) *appsv1.Deployment {
	pod := benchPod(runID, k.namespace, "", k.node)
	pod.Labels[deploymentLabel] = name
	// As any Deployment's pods: the service account token's projected volume
	// (kube-api-access-*) is mounted, and what a kubelet spends on it at every sync
	// is part of what 110 pods cost.
	pod.Spec.AutomountServiceAccountToken = nil
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: pod.Labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels}, Spec: pod.Spec},
		},
	}
}

// createDeployment creates the Deployment and waits for its ReplicaSet, so that the
// scale-up costs the controllers no more than the pods.
func (b *bench) createDeployment(ctx context.Context, k *kubelet, name string) error {
	if _, err := b.client.AppsV1().Deployments(k.namespace).Create(ctx, densityDeployment(b.runID, k, name), metav1.CreateOptions{}); err != nil {
		return err
	}
	selector := deploymentLabel + "=" + name // the ReplicaSet carries the template's labels
	for start := time.Now(); time.Since(start) < time.Minute; {
		list, err := b.client.AppsV1().ReplicaSets(k.namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(list.Items) > 0 {
			return nil
		}
		if err := b.sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("deployment %s/%s: no ReplicaSet within a minute (is kube-controller-manager up?)", k.namespace, name)
}

// scaleDeployment sets the Deployment's replicas in one call.
func (b *bench) scaleDeployment(ctx context.Context, k *kubelet, name string, replicas int) error {
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	_, err := b.client.AppsV1().Deployments(k.namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// densityTimeout bounds a scale-up or scale-down of n pods: a kubelet that needs longer
// has failed the figure anyway.
func densityTimeout(n int) time.Duration { return stepTimeout + time.Duration(n)*time.Second }

// densityUp scales the Deployment to -density-pods, waits until all its pods are Ready,
// notes the time and CPU it took, and returns the pods' keys.
func (b *bench) densityUp(ctx context.Context, k *kubelet, name string) ([]string, error) {
	r := &b.results.density
	budgetBefore, err := b.cpuNow(k)
	if err != nil {
		return nil, err
	}
	metricsBefore := b.kubeletMetrics(ctx, k)
	start := time.Now()
	if err := b.scaleDeployment(ctx, k, name, b.o.densityPods); err != nil {
		return nil, err
	}
	keys, at, err := b.waitDeploymentReady(ctx, name, b.o.densityPods)
	if err != nil {
		return nil, fmt.Errorf("%s: deployment %s: %w; see %s", k.name, name, err, k.logFile())
	}
	budgetAfter, err := b.cpuNow(k)
	if err != nil {
		return nil, err
	}
	lastAdded, _ := b.tracker.latest(addedTimes, keys)
	r.arrivals = b.tracker.offsets(addedTimes, keys, start)
	r.up[k.name] = append(r.up[k.name], at.Sub(start))
	r.created[k.name] = append(r.created[k.name], lastAdded.Sub(start))
	r.upBudget[k.name] = append(r.upBudget[k.name], budgetAfter.since(budgetBefore))
	metricsAfter := b.kubeletMetrics(ctx, k)
	r.criCalls[k.name] = countersSince(criOperations(metricsBefore), criOperations(metricsAfter))
	r.phases[k.name] = countersSince(startupPhases(metricsBefore), startupPhases(metricsAfter))
	progress(k, "scaled up", keys, start, at)
	return keys, nil
}

// waitDeploymentReady waits until the Deployment has n pods, all Ready, and returns their
// keys and when the last became Ready.
func (b *bench) waitDeploymentReady(ctx context.Context, name string, n int) ([]string, time.Time, error) {
	deadline := time.Now().Add(densityTimeout(n))
	for {
		keys := b.tracker.keysWith(deploymentLabel, name)
		last, missing := b.tracker.latest(readyTimes, keys)
		if len(keys) >= n && missing == 0 {
			return keys, last, nil
		}
		if err := b.alive(); err != nil {
			return nil, time.Time{}, err
		}
		if time.Now().After(deadline) {
			return nil, time.Time{}, fmt.Errorf("%d of %d pods Ready (%d created) within %v", len(keys)-missing, n, len(keys), densityTimeout(n))
		}
		if err := b.sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, time.Time{}, err
		}
	}
}

// densityIdle samples k alone over -idle with the pods up: CPU over the window, the
// median RSS sample.
func (b *bench) densityIdle(ctx context.Context, k *kubelet) error {
	samples, err := b.sampleUsage(ctx, b.o.idle, k)
	if err != nil {
		return err
	}
	r := &b.results.density
	s := samples[k.name]
	first, last := s[0], s[len(s)-1]
	r.idleCPU[k.name] = append(r.idleCPU[k.name], 1000*(last.cpu-first.cpu).Seconds()/last.at.Sub(first.at).Seconds())
	r.rss[k.name] = append(r.rss[k.name], medianRSS(s))
	return nil
}

// reclaimSettle is how long a kubelet runs after its binary's pages were reclaimed before
// its RSS is sampled (over reclaimWindow): what it runs again is read back meanwhile.
const reclaimSettle, reclaimWindow = 10 * time.Second, 20 * time.Second

// densityReclaimed has the kernel reclaim k's binary's resident pages and samples its RSS
// after. A kernel that refuses (before 5.10) costs the figure, not the run.
func (b *bench) densityReclaimed(ctx context.Context, k *kubelet) error {
	if err := host.PageOutBinary(k.cmd.Process.Pid); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %-8s no RSS after reclaim: %v\n", k.name, err)
		return nil
	}
	if err := b.sleep(ctx, reclaimSettle); err != nil {
		return err
	}
	samples, err := b.sampleUsage(ctx, reclaimWindow, k)
	if err != nil {
		return err
	}
	b.results.density.reclaimed[k.name] = medianRSS(samples[k.name])
	return nil
}

// densityHeap saves k's heap profile to the run directory and keeps its top 10. A
// profile that cannot be had is reported, not fatal: the other figures stand without it.
func (b *bench) densityHeap(ctx context.Context, k *kubelet) {
	r := &b.results.density
	file := filepath.Join(filepath.Dir(k.dir), fmt.Sprintf("heap-%s-%d-pods.pb.gz", k.name, b.o.densityPods))
	top, err := b.heapProfile(ctx, k, file)
	if err != nil {
		r.heap[k.name] = "no profile: " + err.Error()
		fmt.Fprintf(os.Stderr, "bench: %-8s heap profile: %v\n", k.name, err)
		return
	}
	r.heap[k.name], r.heapFile[k.name] = top, file
}

// heapProfile fetches k's /debug/pprof/heap (after a garbage collection, so that in-use
// figures are current) with the API server's client certificate, writes it to file, and
// returns `go tool pprof -top` of its in-use bytes, 10 nodes.
func (b *bench) heapProfile(ctx context.Context, k *kubelet, file string) (string, error) {
	body, err := b.kubeletGet(ctx, k, "/debug/pprof/heap?gc=1")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(file, body, 0o644); err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-sample_index=inuse_space", "-nodecount=10", file).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof %s: %w: %s", file, err, bytes.TrimSpace(out))
	}
	return pprofTable(string(out)), nil
}

// kubeletGet GETs path from k's kubelet API with the API server's client certificate.
func (b *bench) kubeletGet(ctx context.Context, k *kubelet, path string) ([]byte, error) {
	client, err := b.apiClient()
	if err != nil {
		return nil, err
	}
	defer client.CloseIdleConnections()
	url := fmt.Sprintf("https://127.0.0.1:%d%s", k.port, path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body[:min(len(body), 512)])))
	}
	return body, nil
}

// kubeletMetrics reads k's /metrics; "" (and a note) when they cannot be read: the
// other figures stand without them.
func (b *bench) kubeletMetrics(ctx context.Context, k *kubelet) string {
	body, err := b.kubeletGet(ctx, k, "/metrics")
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %-8s metrics: %v\n", k.name, err)
		return ""
	}
	return string(body)
}

// criOperations is kubelet_runtime_operations_total by operation type; nil without metrics.
func criOperations(metrics string) map[string]float64 {
	if metrics == "" {
		return nil
	}
	return counterByLabel(metrics, "kubelet_runtime_operations_total", "operation_type")
}

// startupPhases is the seconds spent in each of nodelet's pod start-up phases, and in all
// ("total"), summed over the pods recorded; nil without metrics.
func startupPhases(metrics string) map[string]float64 {
	if metrics == "" {
		return nil
	}
	out := counterByLabel(metrics, "nodelet_pod_startup_phase_duration_seconds_sum", "phase")
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, "nodelet_pod_startup_duration_seconds_sum "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				out["total"] = f
			}
		}
	}
	return out
}

// phasesLine is the mean seconds per pod in each start-up phase, in start-up order, and
// what no phase covers (waiting for the pod worker, the PLEG, the API).
func phasesLine(phases map[string]float64, n int) string {
	if len(phases) == 0 {
		return ""
	}
	var parts []string
	accounted := 0.0
	for _, ph := range []string{"admission", "volumes", "sandbox", "image_pull", "container_create", "container_start", "init_containers", "readiness"} {
		accounted += phases[ph]
		parts = append(parts, fmt.Sprintf("%s %.2f", ph, phases[ph]/float64(n)))
	}
	parts = append(parts, fmt.Sprintf("other %.2f", max(phases["total"]-accounted, 0)/float64(n)))
	return fmt.Sprintf("total %.2f s a pod = %s", phases["total"]/float64(n), strings.Join(parts, ", "))
}

// counterByLabel sums a counter's samples in Prometheus text by the value of one label.
func counterByLabel(text, metric, label string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, metric+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(labels, ",") {
			if name, val, ok := strings.Cut(kv, "="); ok && name == label {
				out[strings.Trim(val, `"`)] += v
			}
		}
	}
	return out
}

// countersSince is after less before, per key; nil if either is.
func countersSince(before, after map[string]float64) map[string]float64 {
	if before == nil || after == nil {
		return nil
	}
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// criCallsLine is a kubelet's CRI calls for n pods: the total and the list and status
// calls per pod, the ones that grow with how a kubelet watches its pods.
func criCallsLine(calls map[string]float64, n int) string {
	if calls == nil {
		return "not read"
	}
	total := 0.0
	for _, v := range calls {
		total += v
	}
	per := func(op string) float64 { return calls[op] / float64(n) }
	return fmt.Sprintf("%.0f in all, %.1f a pod (list_podsandbox %.1f, list_containers %.1f, podsandbox_status %.1f, container_status %.1f a pod)",
		total, total/float64(n), per("list_podsandbox"), per("list_containers"), per("podsandbox_status"), per("container_status"))
}

// pprofTable is pprof's -top output from its "Showing nodes" line on: the lines before
// (file, build ID, time) say nothing the bench does not.
func pprofTable(out string) string {
	if i := strings.Index(out, "Showing nodes"); i >= 0 {
		out = out[i:]
	}
	return strings.TrimRight(out, "\n")
}

// densityDown scales the Deployment to 0, waits until all its pods are gone, and deletes
// the Deployment.
func (b *bench) densityDown(ctx context.Context, k *kubelet, name string, keys []string) error {
	start := time.Now()
	if err := b.scaleDeployment(ctx, k, name, 0); err != nil {
		return err
	}
	at, err := b.tracker.waitAll(ctx, goneTimes, keys, densityTimeout(len(keys)), b.alive)
	if err != nil {
		return fmt.Errorf("%s: deployment %s scaled to 0: %w; see %s", k.name, name, err, k.logFile())
	}
	b.results.density.down[k.name] = append(b.results.density.down[k.name], at.Sub(start))
	progress(k, "scaled down", keys, start, at)
	return b.client.AppsV1().Deployments(k.namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
}

// densityRows are the table's rows of the density scenario.
func (b *bench) densityRows() []row {
	r := b.results.density
	n, rounds := b.o.densityPods, b.o.densityRounds
	med := func(m map[string][]time.Duration, name string) float64 { return median(m[name]).Seconds() }
	rss := func(name string) float64 { return medianRSS(r.rss[name]).rssMiB }
	anon := func(name string) float64 { return medianRSS(r.rss[name]).anonMiB }
	file := func(name string) float64 { return medianRSS(r.rss[name]).fileMiB }
	cpu := func(name string) float64 { return medianBudget(r.upBudget[name]).kubelet.Seconds() }
	idle := func(name string) float64 { return medianFloat(r.idleCPU[name]) }
	rows := []row{
		{what: fmt.Sprintf("density: kubelet RSS with %d pods (median)", n), n: rss("nodelet"), u: rss("upstream"), unit: "MiB", aim: 0.45},
		{what: "density: of which anonymous (heap, stacks)", n: anon("nodelet"), u: anon("upstream"), unit: "MiB"},
		{what: "density: of which file-backed (the binary's pages)", n: file("nodelet"), u: file("upstream"), unit: "MiB"},
		{what: fmt.Sprintf("density: %d pods, one Deployment scale-up → all Ready (median of %d)", n, rounds), n: med(r.up, "nodelet"), u: med(r.up, "upstream"), aim: 0.8, duration: true},
		{what: fmt.Sprintf("density: kubelet CPU-seconds to bring the %d up (median)", n), n: cpu("nodelet"), u: cpu("upstream"), aim: 0.5, duration: true},
		{what: fmt.Sprintf("density: idle CPU with %d pods (over %.0f s)", n, b.o.idle.Seconds()), n: idle("nodelet"), u: idle("upstream"), unit: "ms/s", aim: 0.3},
		{what: fmt.Sprintf("density: scaled to 0 → all %d gone (median of %d)", n, rounds), n: med(r.down, "nodelet"), u: med(r.down, "upstream"), duration: true},
	}
	if nu, ok := r.reclaimed["nodelet"]; ok {
		if uu, ok := r.reclaimed["upstream"]; ok {
			// After the RSS rows: what each holds without the code it ran once.
			rows = slices.Insert(rows, 3, row{what: "density: RSS after the kernel reclaimed the binary's pages (last round)", n: nu.rssMiB, u: uu.rssMiB, unit: "MiB"})
		}
	}
	return rows
}

func medianFloat(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// printDensityContext prints the floor, each kubelet's overhead above it, the CPU and RSS
// split of the density scenario and the heap profiles' tops.
func (b *bench) printDensityContext(out io.Writer) {
	r := b.results.density
	n := b.o.densityPods
	fmt.Fprintf(out, "\ndensity: one Deployment per kubelet and round (created with 0 replicas, then scaled to %d in one call), pods pinned with spec.nodeName; the other kubelet idle without pods\n", n)
	fmt.Fprintf(out, "  samples in round order (s): scale-up → all Ready nodelet %s | upstream %s; scale to 0 → all gone nodelet %s | upstream %s\n",
		seconds(r.up["nodelet"]), seconds(r.up["upstream"]), seconds(r.down["nodelet"]), seconds(r.down["upstream"]))
	fmt.Fprintf(out, "  the ReplicaSet controller's part, scale call → last pod in the API (median): nodelet %.2f s, upstream %.2f s\n",
		median(r.created["nodelet"]).Seconds(), median(r.created["upstream"]).Seconds())
	if len(r.floor) == 0 {
		fmt.Fprintf(out, "  containerd floor: none (the raw CRI run failed: %v)\n", r.floorErr)
	} else {
		floor := median(r.floor)
		fmt.Fprintf(out, "  containerd floor, %d pods at once by direct CRI calls on nodelet's rig (nodelet frozen): %.2f s (median of %d: %s)\n", n, floor.Seconds(), len(r.floor), seconds(r.floor))
		fmt.Fprintf(out, "  each kubelet's overhead above it (scale-up → all Ready, less the floor; counts the ReplicaSet controller's part): %s\n",
			overheadLine(median(r.up["nodelet"])-floor, median(r.up["upstream"])-floor, 0.5))
	}
	if len(r.pacedFloor) > 0 {
		floor := median(r.pacedFloor)
		fmt.Fprintf(out, "  containerd floor paced as the pods reached the API (each pod started when its rank's pod of the latest scale-up was created, the last at %.2f s): %.2f s (median of %d: %s)\n",
			r.arrivals[len(r.arrivals)-1].Seconds(), floor.Seconds(), len(r.pacedFloor), seconds(r.pacedFloor))
		fmt.Fprintf(out, "  each kubelet's own overhead, above the paced floor: %s\n",
			overheadLine(median(r.up["nodelet"])-floor, median(r.up["upstream"])-floor, 0.5))
	}
	for _, name := range []string{"nodelet", "upstream"} {
		rss, spent := medianRSS(r.rss[name]), medianBudget(r.upBudget[name])
		fmt.Fprintf(out, "  %-8s CPU to bring them up (median): kubelet %.2f s, its containerd %.2f s; RSS %.1f MiB = %.1f MiB anonymous (heap, stacks) + %.1f MiB file-backed (its binary); idle CPU per round %s ms/s\n",
			name, spent.kubelet.Seconds(), spent.containerd.Seconds(),
			rss.rssMiB, rss.anonMiB, rss.fileMiB, floats(r.idleCPU[name]))
	}
	for _, name := range []string{"nodelet", "upstream"} {
		if u, ok := r.reclaimed[name]; ok {
			fmt.Fprintf(out, "  %-8s RSS %.0f s after the kernel reclaimed its binary's pages (last round, median over %.0f s): %.1f MiB = %.1f anonymous + %.1f file-backed\n",
				name, reclaimSettle.Seconds(), reclaimWindow.Seconds(), u.rssMiB, u.anonMiB, u.fileMiB)
		}
	}
	printCPUBudgets(out, r)
	for _, name := range []string{"nodelet", "upstream"} {
		fmt.Fprintf(out, "  %-8s CRI calls to bring them up (last round): %s\n", name, criCallsLine(r.criCalls[name], n))
	}
	for _, name := range []string{"nodelet", "upstream"} {
		if line := phasesLine(r.phases[name], n); line != "" {
			fmt.Fprintf(out, "  %-8s start-up phases, mean of the %d pods (last round, nodelet_pod_startup_*): %s\n", name, n, line)
		}
	}
	for _, name := range []string{"nodelet", "upstream"} {
		fmt.Fprintf(out, "  heap profile of %s with %d pods, top 10 by inuse_space (%s):\n", name, n, orNone(r.heapFile[name], "kept with -keep-logs"))
		for _, line := range strings.Split(r.heap[name], "\n") {
			fmt.Fprintf(out, "    %s\n", line)
		}
	}
}

// overheadLine compares two kubelets' overheads above a floor, against an aim for their
// ratio. An overhead at or under the floor (noise) has no ratio.
func overheadLine(n, u time.Duration, aim float64) string {
	if n <= 0 || u <= 0 {
		return fmt.Sprintf("nodelet %+.2f s, upstream %+.2f s, ratio - (aim ≤ %.2f)", n.Seconds(), u.Seconds(), aim)
	}
	ratio := n.Seconds() / u.Seconds()
	return fmt.Sprintf("nodelet %+.2f s, upstream %+.2f s, ratio %.2f (aim ≤ %.2f %s)", n.Seconds(), u.Seconds(), ratio, aim, verdict(ratio, aim))
}

// verdict says whether a ratio meets an aim (at most aim).
func verdict(ratio, aim float64) string {
	if ratio > aim {
		return "MISSED"
	}
	return "met"
}

func floats(v []float64) string {
	s := make([]string, len(v))
	for i, f := range v {
		s[i] = fmt.Sprintf("%.1f", f)
	}
	return strings.Join(s, " ")
}

// orNone is what the file path part says: "saved to PATH, note", or that there is none.
func orNone(path, note string) string {
	if path == "" {
		return "none"
	}
	return "saved to " + path + ", " + note
}
