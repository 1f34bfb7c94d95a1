// Command cluster benchmarks nodelet in cluster mode side by side with upstream's kubelet
// v1.37.2, in one run, against the project's control plane (hack/controlplane.sh) and
// prints each figure as a ratio nodelet/upstream:
//
//  1. API create → pod Ready (one pod), median of -rounds;
//  2. -pods pods created at once → all Ready, and deleted at once → all gone from the API,
//     medians of -batch-rounds;
//  3. each kubelet's RSS and CPU over an idle window with -pods pods running;
//  4. with -api-pods pods on each node, the kubelet API: requests per second and p50/p99
//     latency of GET /pods and GET /stats/summary (-api-clients clients for -api-window,
//     -api-rounds times, straight to the kubelet's HTTPS port with the control plane's
//     apiserver-kubelet-client certificate), and the `kubectl exec POD -- true` round trip
//     through the API server, median and p90 of -exec-runs (see api.go);
//  5. volumes: a pod with a configMap, a secret and the default projected service-account
//     token, API create → Ready, median of -volume-rounds; and each kubelet's RSS with
//     -volume-pods such pods (see volumes.go);
//  6. requests: the API requests a kubelet makes per pod lifecycle (create → Ready →
//     delete → gone, -requests-pods pods at once), counted in the API server's audit log,
//     less its background over an idle window of the same length, itemised by verb and
//     resource, and that background per minute (see audit.go);
//  7. density: -density-pods pods (110, a full node) by one Deployment scale-up → all
//     Ready, the kubelet's CPU-seconds over it, then with the pods up its RSS (anonymous
//     and file-backed), idle CPU over -idle and heap profile top 10, and scale to 0 → all
//     gone, -density-rounds rounds; with the containerd floor for as many pods and each
//     kubelet's overhead above it (see density.go);
//  8. churn: -churn-live pods live while -churn-rate pods a second are created and as many
//     of the oldest deleted for -churn-duration: create → Ready p50/p90/p99/max, pods
//     never Ready ranked as infinitely slow and counted, and the CPU over the window, with
//     the containerd floor for the same churn (see churn.go, churnfloor.go).
//
// -scenarios picks which run: pods (1-3), api (4), volumes (5), requests (6), density
// (7), churn (8); all by default. Density, requests and churn measure one kubelet at a
// time, the other idle without pods.
//
// For context it also prints the containerd floor (the same pods started by direct CRI
// calls, which no kubelet can beat), each kubelet's share above it, the CPU each kubelet
// and its containerd use per batch, and how RSS splits into anonymous and file-backed.
//
// Each kubelet runs on its own containerd (hack/runtime.sh rigs the bench brings up with
// state, bridge and subnet of their own), with its own cgroup root, root directory, node
// name and namespace, and both read the same KubeletConfiguration. Rounds alternate which
// kubelet goes first, one kubelet at a time, so the noise of a shared 2-core machine hits
// both alike. Pods are pinned with spec.nodeName (the scheduler is not in the path) and
// have no probes: Ready follows the container's start. Times run from the API call to the
// event seen through a watch.
//
// The bench leaves the control plane up and removes everything else it made: pods,
// namespaces, nodes, leases, the rigs it started, cgroups, and upstream's kernel tunables
// and KUBE-* iptables chains (recorded before it starts).
//
//	go run ./test/bench/cluster -nodelet bin/nodelet -lock /run/nodelet-shared.lock
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/test/internal/host"
)

type options struct {
	repo, nodeletBin, upstreamBin, kubectlBin, lock, nodeletArgs string
	runtime                                                      string
	rounds, batchRounds, pods, verbosity                         int
	apiPods, apiClients, apiRounds, execRuns                     int
	settle, idleSettle, idle, apiWindow                          time.Duration
	volumeRounds, volumePods                                     int
	volumeWindow                                                 time.Duration
	densityPods, densityRounds, requestsPods, churnLive          int
	requestsWindow, churnDuration, churnFloorDuration            time.Duration
	churnRate                                                    float64
	// auditLog is the control plane's audit log (empty: logs/audit.log next to the
	// admin kubeconfig).
	auditLog         string
	server, keepLogs bool
	// scenarios are the parts of the bench that run (scenarioPods, ...).
	scenarios map[string]bool
}

// The scenarios -scenarios selects from, in the order they run.
const (
	scenarioPods     = "pods"
	scenarioAPI      = "api"
	scenarioVolumes  = "volumes"
	scenarioRequests = "requests"
	scenarioDensity  = "density"
	scenarioChurn    = "churn"
)

// The requests scenario runs first of the new ones, on the quietest node.
var allScenarios = []string{scenarioPods, scenarioAPI, scenarioVolumes, scenarioRequests, scenarioDensity, scenarioChurn}

func (o options) runs(scenario string) bool { return o.scenarios[scenario] }

// scenarioList is the selected scenarios in the order they run.
func (o options) scenarioList() []string {
	var list []string
	for _, s := range allScenarios {
		if o.runs(s) {
			list = append(list, s)
		}
	}
	return list
}

// parseScenarios reads -scenarios: a comma-separated list of scenarios, or "all".
func parseScenarios(list string) (map[string]bool, error) {
	set := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		switch {
		case s == "all":
			for _, a := range allScenarios {
				set[a] = true
			}
		case slices.Contains(allScenarios, s):
			set[s] = true
		default:
			return nil, fmt.Errorf("-scenarios: unknown scenario %q (want %s or all)", s, strings.Join(allScenarios, ", "))
		}
	}
	return set, nil
}

// The rigs: state, run dirs, bridges and subnets no other rig on these machines uses.
var (
	nodeletRig  = rig{stateDir: "/var/lib/nodelet-bench-a", runDir: "/run/nodelet-bench-a", bridge: "nodeletba", podCIDR: "10.93.0.0/24"}
	upstreamRig = rig{stateDir: "/var/lib/nodelet-bench-b", runDir: "/run/nodelet-bench-b", bridge: "nodeletbb", podCIDR: "10.94.0.0/24"}
	// With -runtime containerd2: a state dir holds one flavour at a time, so others.
	nodeletRig2  = rig{stateDir: "/var/lib/nodelet-bench-a2", runDir: "/run/nodelet-bench-a2", bridge: "nodeletba2", podCIDR: "10.95.0.0/24", flavour: "containerd2"}
	upstreamRig2 = rig{stateDir: "/var/lib/nodelet-bench-b2", runDir: "/run/nodelet-bench-b2", bridge: "nodeletbb2", podCIDR: "10.114.0.0/24", flavour: "containerd2"}
)

func main() {
	var o options
	flag.StringVar(&o.repo, "repo", ".", "repository root (for hack/*.sh)")
	flag.StringVar(&o.nodeletBin, "nodelet", "bin/nodelet", "nodelet binary")
	flag.StringVar(&o.upstreamBin, "upstream", "/var/cache/nodelet/k8s-v1.37.2/bin/kubelet", "upstream kubelet binary (built by hack/controlplane.sh build when missing)")
	flag.StringVar(&o.lock, "lock", "", "flock this file while the kubelets use the shared control plane (e.g. /run/nodelet-shared.lock)")
	flag.StringVar(&o.nodeletArgs, "nodelet-args", "", "extra nodelet flags, space separated (profiling)")
	flag.IntVar(&o.rounds, "rounds", 7, "single-pod rounds per kubelet")
	flag.IntVar(&o.batchRounds, "batch-rounds", 5, "batch rounds per kubelet")
	flag.IntVar(&o.pods, "pods", 20, "pods per batch and for the idle figures")
	flag.IntVar(&o.verbosity, "v", 0, "log verbosity of both kubelets")
	flag.DurationVar(&o.settle, "settle", 3*time.Second, "pause after each step, so one kubelet's clean-up does not overlap the other's measurement")
	flag.DurationVar(&o.idleSettle, "idle-settle", 20*time.Second, "pause between the idle pods being Ready and the idle window")
	flag.DurationVar(&o.idle, "idle", time.Minute, "idle window for CPU and RSS")
	flag.StringVar(&o.kubectlBin, "kubectl", "/var/cache/nodelet/k8s-v1.37.2/bin/kubectl", "kubectl for the exec round trips")
	flag.IntVar(&o.apiPods, "api-pods", 100, "pods on each node for the kubelet API figures (0: no API figures)")
	flag.IntVar(&o.apiClients, "api-clients", 4, "concurrent clients of each kubelet API window")
	flag.IntVar(&o.apiRounds, "api-rounds", 2, "windows per kubelet and endpoint (alternating which kubelet goes first)")
	flag.DurationVar(&o.apiWindow, "api-window", 10*time.Second, "length of one kubelet API window")
	flag.IntVar(&o.execRuns, "exec-runs", 11, "kubectl exec round trips per kubelet")
	flag.StringVar(&o.runtime, "runtime", "containerd", "both rigs' containerd: containerd (Debian's 1.6) or containerd2 (2.x: it streams container events, so nodelet's PLEG is evented; upstream's stays relisting, its default)")
	scenarios := flag.String("scenarios", "all", "comma-separated scenarios to run: "+strings.Join(allScenarios, ", ")+", or all")
	flag.IntVar(&o.volumeRounds, "volume-rounds", 7, "volumes scenario: single-pod rounds per kubelet")
	flag.IntVar(&o.volumePods, "volume-pods", 100, "volumes scenario: pods on each node for the RSS figure")
	flag.DurationVar(&o.volumeWindow, "volume-window", 15*time.Second, "volumes scenario: window over which RSS is sampled (every 5 s) with -volume-pods pods")
	flag.IntVar(&o.densityPods, "density-pods", maxPods, "density scenario: pods of the Deployment scale-up (at most maxPods, 110)")
	flag.IntVar(&o.densityRounds, "density-rounds", 1, "density scenario: rounds per kubelet (alternating which goes first)")
	flag.IntVar(&o.requestsPods, "requests-pods", 20, "requests scenario: pods of the lifecycle whose API requests are counted")
	flag.DurationVar(&o.requestsWindow, "requests-window", time.Minute, "requests scenario: length of the idle window and of the lifecycle window (longer if the lifecycle outruns it)")
	flag.StringVar(&o.auditLog, "audit-log", "", "requests scenario: the API server's audit log (default: logs/audit.log next to the admin kubeconfig)")
	flag.IntVar(&o.churnLive, "churn-live", 100, "churn scenario: pods live on the node (terminating ones count towards maxPods too)")
	flag.Float64Var(&o.churnRate, "churn-rate", 2, "churn scenario: pods created, and as many deleted, per second")
	flag.DurationVar(&o.churnDuration, "churn-duration", 5*time.Minute, "churn scenario: length of the churn window")
	flag.DurationVar(&o.churnFloorDuration, "churn-floor-duration", 2*time.Minute, "churn scenario: length of the containerd floor's churn window (direct CRI calls, nodelet frozen); 0: no floor")
	flag.BoolVar(&o.server, "server", true, "enableServer for both: each serves its kubelet API on a free port (needed for the API figures)")
	flag.BoolVar(&o.keepLogs, "keep-logs", false, "keep the kubelets' logs and configs (always kept after a failure)")
	flag.Parse()
	var err error
	if o.scenarios, err = parseScenarios(*scenarios); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// bench is one run: the admin client, the pod tracker and the two kubelets.
type bench struct {
	o     options
	runID string
	// kubeconfig is the control plane's admin kubeconfig; pki its certificates (ca.crt,
	// apiserver-kubelet-client.crt, ...), next to it.
	kubeconfig, pki string
	client          kubernetes.Interface
	tracker         *tracker
	nodelet         *kubelet
	upstream        *kubelet
	// hostState is what upstream's kubelet may change on the host, recorded before it ran.
	hostState *host.UpstreamKubeletState
	results   results
	// releaseLock releases the shared control plane lock; nil until it is taken.
	releaseLock func()
	// rawRuntime is nodelet's rig, for the raw CRI runs.
	rawRuntime internalapi.RuntimeService
}

func (b *bench) kubelets() []*kubelet { return []*kubelet{b.nodelet, b.upstream} }

// checkNewScenarios checks the flags of the density, requests and churn scenarios.
func (o options) checkNewScenarios() error {
	if o.runs(scenarioDensity) && (o.densityPods < 1 || o.densityPods > maxPods || o.densityRounds < 1) {
		return fmt.Errorf("-density-pods must be 1 to %d (maxPods), -density-rounds at least 1", maxPods)
	}
	if o.runs(scenarioRequests) && (o.requestsPods < 1 || o.requestsPods > maxPods || o.requestsWindow <= 0) {
		return fmt.Errorf("-requests-pods must be 1 to %d (maxPods), -requests-window above 0", maxPods)
	}
	if o.runs(scenarioChurn) && (o.churnLive < 1 || o.churnLive >= maxPods || o.churnRate <= 0 || o.churnDuration <= 0 || o.churnFloorDuration < 0) {
		return fmt.Errorf("-churn-live must be 1 to %d (terminating pods need room under maxPods), -churn-rate and -churn-duration above 0, -churn-floor-duration 0 or above", maxPods-1)
	}
	return nil
}

func run(ctx context.Context, o options) (err error) {
	if o.runtime != "containerd" && o.runtime != "containerd2" {
		return fmt.Errorf("-runtime %q: want containerd or containerd2", o.runtime)
	}
	if o.apiPods == 0 {
		delete(o.scenarios, scenarioAPI)
	}
	if len(o.scenarios) == 0 {
		return errors.New("no scenario to run")
	}
	if o.runs(scenarioPods) && (o.rounds < 1 || o.batchRounds < 1 || o.pods < 1) {
		return errors.New("-rounds, -batch-rounds and -pods must be at least 1")
	}
	if o.runs(scenarioVolumes) && (o.volumeRounds < 1 || o.volumePods < 1 || o.volumeWindow <= 0) {
		return errors.New("-volume-rounds, -volume-pods and -volume-window must be above 0")
	}
	if err := o.checkNewScenarios(); err != nil {
		return err
	}
	if o.runs(scenarioAPI) && (!o.server || o.apiClients < 1 || o.apiRounds < 1 || o.execRuns < 1 || o.apiWindow <= 0) {
		return errors.New("the API figures (-api-pods > 0) need -server, and -api-clients, -api-rounds, -exec-runs and -api-window above 0")
	}
	for _, p := range []*string{&o.repo, &o.nodeletBin, &o.upstreamBin, &o.kubectlBin} {
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
	}
	if err := ensureUpstreamKubelet(ctx, o.repo, o.upstreamBin); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "nodelet-cluster-bench-")
	if err != nil {
		return err
	}
	b := &bench{o: o, runID: string(uuid.NewUUID())[:6], results: newResults()}
	b.nodelet = &kubelet{name: "nodelet", bin: o.nodeletBin, node: "bench-nodelet", rig: &nodeletRig}
	b.upstream = &kubelet{name: "upstream", bin: o.upstreamBin, node: "bench-upstream", rig: &upstreamRig}
	if o.runtime == "containerd2" {
		b.nodelet.rig, b.upstream.rig = &nodeletRig2, &upstreamRig2
	}
	for _, k := range b.kubelets() {
		k.namespace = k.node + "-" + b.runID
		k.cgroupRoot = k.node + "-" + b.runID
		k.dir = filepath.Join(dir, k.name)
	}
	defer func() { err = errors.Join(err, b.cleanUp(dir, err != nil)) }()
	for _, k := range b.kubelets() {
		if err := k.rig.up(ctx, o.repo); err != nil {
			return err
		}
	}
	// cleanUp releases it once the kubelets are stopped and their API objects removed.
	if b.releaseLock, err = host.SharedLock(ctx, o.lock); err != nil {
		return err
	}
	if err := b.connect(ctx); err != nil {
		return err
	}
	if err := b.startKubelets(ctx); err != nil {
		return err
	}
	return b.measure(ctx)
}

// connect brings up the control plane, makes the admin client and the node credentials,
// and creates the namespaces.
func (b *bench) connect(ctx context.Context) error {
	path, err := controlPlaneUp(ctx, b.o.repo)
	if err != nil {
		return err
	}
	b.kubeconfig, b.pki = path, filepath.Join(filepath.Dir(path), "pki")
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return err
	}
	// Twenty creates at once must not queue in client-go's default limiter (5 qps).
	cfg.QPS, cfg.Burst = 200, 400
	if b.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	for _, k := range b.kubelets() {
		if err := os.MkdirAll(k.dir, 0o755); err != nil {
			return err
		}
		if _, err := runScript(ctx, b.o.repo, os.Environ(), "controlplane.sh", "node-kubeconfig", k.node, k.kubeconfig()); err != nil {
			return err
		}
		// A Node left by an interrupted run would carry its old status into this one, and
		// its pods, bound to the same node name, would run on this run's kubelet.
		if err := b.deleteNode(ctx, k.node); err != nil {
			return err
		}
		if err := b.deleteStaleNamespaces(ctx, k.node+"-"); err != nil {
			return err
		}
		if err := b.createNamespace(ctx, k.namespace); err != nil {
			return err
		}
	}
	b.tracker, err = startTracker(ctx, b.client, b.runID)
	return err
}

// createNamespace creates ns and waits for its default service account, without which
// the ServiceAccount admission plugin refuses pods.
func (b *bench) createNamespace(ctx context.Context, ns string) error {
	if _, err := b.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for start := time.Now(); time.Since(start) < time.Minute; time.Sleep(100 * time.Millisecond) {
		if _, err := b.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return nil
		}
	}
	return fmt.Errorf("namespace %s: no default service account within a minute (is kube-controller-manager up?)", ns)
}

func (b *bench) deleteNode(ctx context.Context, node string) error {
	err := b.client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	err = b.client.CoordinationV1().Leases(v1.NamespaceNodeLease).Delete(ctx, node, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// startKubelets starts nodelet, then upstream's kubelet, each once the other is Ready
// (their start-ups would compete for the CPUs), and records how long each took.
func (b *bench) startKubelets(ctx context.Context) error {
	state, err := host.RecordUpstreamKubeletState()
	if err != nil {
		return err
	}
	b.hostState = state
	for _, k := range b.kubelets() {
		start := time.Now()
		if err := k.start(b.o.server, filepath.Join(b.pki, "ca.crt"), b.o.verbosity, b.extraArgs(k)); err != nil {
			return err
		}
		if err := b.waitNodeReady(ctx, k); err != nil {
			return err
		}
		b.results.nodeReady[k.name] = time.Since(start)
	}
	return nil
}

func (b *bench) extraArgs(k *kubelet) []string {
	if k != b.nodelet {
		return nil
	}
	return strings.Fields(b.o.nodeletArgs)
}

// waitNodeReady polls the Node every 50 ms until it is Ready.
func (b *bench) waitNodeReady(ctx context.Context, k *kubelet) error {
	for start := time.Now(); time.Since(start) < 2*time.Minute; {
		n, err := b.client.CoreV1().Nodes().Get(ctx, k.node, metav1.GetOptions{})
		if err == nil && nodeReady(n) {
			return nil
		}
		if err := b.sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("node %s not Ready within 2 minutes; see %s", k.node, k.logFile())
}

func nodeReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// sleep waits d, failing early if the context ends or a kubelet exits.
func (b *bench) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-b.nodelet.done:
		return b.nodelet.exited()
	case <-b.upstream.done:
		return b.upstream.exited()
	case <-t.C:
		return nil
	}
}

// cleanUp stops the kubelets, removes their API objects, pods, rigs, cgroups and mounts,
// and restores what upstream changed on the host. After a failure the logs are kept.
func (b *bench) cleanUp(dir string, failed bool) error {
	ctx := context.Background()
	var errs []error
	for _, k := range b.kubelets() {
		k.stop()
	}
	if b.client != nil {
		for _, k := range b.kubelets() {
			errs = append(errs, b.deleteAPIObjects(ctx, k))
		}
	}
	if b.releaseLock != nil {
		b.releaseLock()
	}
	for _, k := range b.kubelets() {
		errs = append(errs, removeRuntimePods(ctx, k), k.rig.down(b.o.repo), host.RemoveCgroupRoot(k.cgroupRoot), host.UnmountUnder(k.dir, syscall.MNT_DETACH))
	}
	errs = append(errs, host.RemoveCgroupRoot(b.rawCgroupRoot()))
	if b.hostState != nil {
		errs = append(errs, b.hostState.Restore())
	}
	if failed || b.o.keepLogs {
		fmt.Fprintf(os.Stderr, "bench: logs and configs kept in %s\n", dir)
	} else {
		errs = append(errs, os.RemoveAll(dir))
	}
	return errors.Join(errs...)
}

// deleteAPIObjects removes a stopped kubelet's namespace, Node and Lease.
func (b *bench) deleteAPIObjects(ctx context.Context, k *kubelet) error {
	return errors.Join(b.deleteNamespace(ctx, k.namespace), b.deleteNode(ctx, k.node))
}

// deleteStaleNamespaces removes the namespaces of earlier runs (prefix and another run's
// ID) that did not clean up. The shared lock keeps any other run from using them now.
func (b *bench) deleteStaleNamespaces(ctx context.Context, prefix string) error {
	list, err := b.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range list.Items {
		if strings.HasPrefix(ns.Name, prefix) && ns.Name != prefix+b.runID {
			fmt.Fprintf(os.Stderr, "bench: removing namespace %s, left by an interrupted run\n", ns.Name)
			errs = append(errs, b.deleteNamespace(ctx, ns.Name))
		}
	}
	return errors.Join(errs...)
}

// deleteNamespace removes ns with its pods, these at once: no kubelet will finish a
// graceful deletion.
func (b *bench) deleteNamespace(ctx context.Context, ns string) error {
	var errs []error
	pods, err := b.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, p := range pods.Items {
			errs = append(errs, ignoreNotFound(b.client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})))
		}
	}
	errs = append(errs, ignoreNotFound(b.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})))
	return errors.Join(errs...)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// removeRuntimePods stops and removes the kubelet's pods from its rig, for a rig the bench
// did not start (one it started goes down whole).
func removeRuntimePods(ctx context.Context, k *kubelet) error {
	if k.rig.endpoint == "" || k.rig.startedHere {
		return nil
	}
	rs, err := cri.NewRemoteRuntimeService(ctx, k.rig.endpoint, 3*time.Second, time.Minute)
	if err != nil {
		return err
	}
	defer rs.Close(ctx)
	sandboxes, err := rs.ListPodSandbox(ctx, nil)
	if err != nil {
		return err
	}
	var errs []error
	for _, sb := range sandboxes {
		if sb.Labels[criconfig.PodNamespaceLabel] == k.namespace {
			errs = append(errs, rs.StopPodSandbox(ctx, sb.Id), rs.RemovePodSandbox(ctx, sb.Id))
		}
	}
	return errors.Join(errs...)
}
