// Command scale measures what N kubelet nodes cost the control plane, nodelet against
// upstream's kubelet v1.37.2, in one run: for each N of -nodes (1,3,5), N nodelet nodes and
// then N upstream nodes (the order alternates with N) are started with hack/nodes.sh, each
// on its own containerd, each given -pods pods (pinned with spec.nodeName); once all are
// Ready and a settle pause has passed, an idle window of -window measures
//
//   - the kubelets' API requests, counted from the control plane's audit log (hack/
//     controlplane.sh records the requests of group system:nodes) and itemised by verb and
//     resource: list/watch, lease and status update rates;
//   - the CPU the control plane (etcd, kube-apiserver, kube-controller-manager,
//     kube-scheduler) used, and the kubelets' own.
//
// Before each set, half a window with no bench node running gives the control plane's
// own idle CPU, which the figures are taken above.
// Each set is taken down (nodes, rigs, cgroups; upstream's sysctls and KUBE-* chains
// restored) before the next starts.
//
//	go run ./test/bench/scale -nodelet bin/nodelet -lock /run/nodelet-shared.lock
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/internal/audit"
	"github.com/nodelet/nodelet/test/internal/host"
	"github.com/nodelet/nodelet/test/internal/testpods"
)

type options struct {
	repo, nodeletBin, upstreamBin, lock, cpDir string
	nodes                                      []int
	pods                                       int
	settle, window                             time.Duration
}

// agent is one kind of kubelet and the hack/nodes.sh settings that keep its set apart.
type agent struct {
	name, bin, prefix, subnet, config string
	port                              int
}

// measurement is one set's idle window.
type measurement struct {
	nodes int
	// requests are all the set's nodes' requests in the window.
	requests          audit.Counts
	cpCPU, kubeletCPU float64 // seconds over the window
	// cpIdle is the control plane's CPU share with no bench node, measured just before.
	cpIdle               float64
	window               time.Duration
	readyIn              time.Duration
	podsPerNode, running int
}

func main() {
	var o options
	nodes := flag.String("nodes", "1,3,5", "comma-separated node counts")
	flag.StringVar(&o.repo, "repo", ".", "repository root (for hack/*.sh)")
	flag.StringVar(&o.nodeletBin, "nodelet", "bin/nodelet", "nodelet binary")
	flag.StringVar(&o.upstreamBin, "upstream", "/var/cache/nodelet/k8s-v1.37.2/bin/kubelet", "upstream kubelet binary")
	flag.StringVar(&o.lock, "lock", "", "flock this file while the nodes use the shared control plane")
	flag.StringVar(&o.cpDir, "cp-dir", "/var/lib/nodelet-cp", "the control plane's state dir (PIDs, audit log)")
	flag.IntVar(&o.pods, "pods", 20, "pods per node")
	// Past a pod's first periodic sync (1 min and its jitter, then the status manager's
	// batch: up to ~90 s after the start), whose status patch adds the resources read back
	// from its cgroup, once: both kubelets do it; it is not idle traffic.
	flag.DurationVar(&o.settle, "settle", 2*time.Minute, "pause between the pods being Ready and the window")
	flag.DurationVar(&o.window, "window", time.Minute, "idle window")
	flag.Parse()
	for _, f := range strings.Split(*nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 20 {
			fmt.Fprintf(os.Stderr, "scale: -nodes: %q is not a node count from 1 to 20\n", f)
			os.Exit(2)
		}
		o.nodes = append(o.nodes, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	for _, p := range []*string{&o.repo, &o.nodeletBin, &o.upstreamBin} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	release, err := host.SharedLock(ctx, o.lock)
	if err != nil {
		return err
	}
	defer release()
	client, err := adminClient(ctx, o.repo)
	if err != nil {
		return err
	}
	agents := []agent{
		{name: "nodelet", bin: o.nodeletBin, prefix: "scale-nodelet", subnet: "10.122", port: 13000},
		// Upstream refuses cgroup v1 unless told; nodelet reads the same field and ignores it.
		{name: "upstream", bin: o.upstreamBin, prefix: "scale-upstream", subnet: "10.123", port: 14000, config: "failCgroupV1: false"},
	}
	results := map[string][]measurement{}
	for i, n := range o.nodes {
		order := agents
		if i%2 == 1 {
			order = []agent{agents[1], agents[0]}
		}
		for _, a := range order {
			m, err := o.measureSet(ctx, client, a, n)
			if err != nil {
				return fmt.Errorf("%s, %d nodes: %w", a.name, n, err)
			}
			results[a.name] = append(results[a.name], m)
			fmt.Fprintf(os.Stderr, "scale: %s × %d: %.0f requests/min, control plane %.1f%% CPU (%.1f%% idle before)\n",
				a.name, n, perMinute(m.requests.Total(), m.window), 100*m.cpCPU/m.window.Seconds(), 100*m.cpIdle)
		}
	}
	printResults(o, results["nodelet"], results["upstream"])
	return nil
}

// controlPlaneIdle is the control plane's CPU share over d with no bench node.
func (o options) controlPlaneIdle(ctx context.Context, d time.Duration) (float64, error) {
	before, err := o.controlPlaneCPU()
	if err != nil {
		return 0, err
	}
	if err := host.Sleep(ctx, d); err != nil {
		return 0, err
	}
	after, err := o.controlPlaneCPU()
	return (after - before) / d.Seconds(), err
}

// measureSet starts n nodes of agent a, gives each o.pods pods, and measures an idle window.
func (o options) measureSet(ctx context.Context, client kubernetes.Interface, a agent, n int) (m measurement, err error) {
	m.nodes, m.podsPerNode, m.window = n, o.pods, o.window
	// The control plane's own load drifts (its controllers' periodic work, what other
	// tests left): its idle share is taken again before each set.
	if m.cpIdle, err = o.controlPlaneIdle(ctx, o.window/2); err != nil {
		return m, err
	}
	if a.name == "upstream" {
		state, err := host.RecordUpstreamKubeletState()
		if err != nil {
			return m, err
		}
		defer func() { err = errors.Join(err, state.Restore()) }()
	}
	defer func() {
		_, downErr := o.nodesScript(ctx, a, "down")
		err = errors.Join(err, downErr)
	}()
	out, err := o.nodesScript(ctx, a, "up", strconv.Itoa(n))
	if err != nil {
		return m, err
	}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			names = append(names, f[0])
		}
	}
	ns := a.prefix + "-" + string(uuid.NewUUID())[:6]
	defer func() { err = errors.Join(err, deleteNamespace(client, ns)) }()
	start := time.Now()
	if err := createPods(ctx, client, ns, names, o.pods); err != nil {
		return m, err
	}
	if m.running, err = waitReady(ctx, client, ns, len(names)*o.pods); err != nil {
		return m, err
	}
	m.readyIn = time.Since(start)
	if err := host.Sleep(ctx, o.settle); err != nil {
		return m, err
	}
	return m, o.measureWindow(ctx, a, names, &m)
}

// measureWindow measures one idle window of the nodes in names.
func (o options) measureWindow(ctx context.Context, a agent, names []string, m *measurement) error {
	pids, err := o.kubeletPIDs(ctx, a)
	if err != nil {
		return err
	}
	tail, err := audit.OpenTail(filepath.Join(o.cpDir, "logs", "audit.log"))
	if err != nil {
		return err
	}
	defer tail.Close()
	start := time.Now()
	cp0, err := o.controlPlaneCPU()
	if err != nil {
		return err
	}
	k0 := host.CPUSecondsOf(pids)
	if err := host.Sleep(ctx, o.window); err != nil {
		return err
	}
	cp1, err := o.controlPlaneCPU()
	if err != nil {
		return err
	}
	end := time.Now()
	m.kubeletCPU = host.CPUSecondsOf(pids) - k0
	m.cpCPU = cp1 - cp0
	// The API server logs a request once it has answered it.
	if err := host.Sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	events, err := tail.Read()
	if err != nil {
		return err
	}
	m.requests = audit.Counts{}
	for _, n := range names {
		for k, v := range audit.Tally(events, "system:node:"+n, start, end) {
			m.requests[k] += v
		}
	}
	return nil
}

func perMinute(n int, d time.Duration) float64 { return float64(n) / d.Minutes() }

// nodesScript runs hack/nodes.sh for agent a's set.
func (o options) nodesScript(ctx context.Context, a agent, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(o.repo, "hack", "nodes.sh"), args...)
	cmd.Env = append(os.Environ(), "NODELET_NODES_PREFIX="+a.prefix, "NODELET_NODES_DIR=/var/lib/nodelet-"+a.prefix,
		"NODELET_NODES_RUN=/run/nodelet-"+a.prefix, "NODELET_NODES_SUBNET="+a.subnet,
		"NODELET_NODES_PORT="+strconv.Itoa(a.port), "NODELET_BIN="+a.bin, "NODELET_NODES_CONFIG="+a.config)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/nodes.sh %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// kubeletPIDs are the running kubelets of a's set (hack/nodes.sh status: NAME STATE PID).
func (o options) kubeletPIDs(ctx context.Context, a agent) ([]int, error) {
	out, err := o.nodesScript(ctx, a, "status")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[1] != "running" {
			return nil, fmt.Errorf("hack/nodes.sh status: %q: a node is not running", line)
		}
		pid, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, err
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// controlPlaneCPU is the CPU-seconds the four components have used so far.
func (o options) controlPlaneCPU() (float64, error) {
	pids, err := host.ControlPlanePIDs(o.cpDir)
	if err != nil {
		return 0, fmt.Errorf("%w (is the control plane up?)", err)
	}
	return host.CPUSecondsOf(pids), nil
}

func adminClient(ctx context.Context, repo string) (kubernetes.Interface, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "hack", "controlplane.sh"), "up")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("hack/controlplane.sh up: %w", err)
	}
	path, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "KUBECONFIG=")
	if !ok {
		return nil, fmt.Errorf("hack/controlplane.sh up printed %q", out)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 100, 200
	return kubernetes.NewForConfig(cfg)
}

// createPods creates the namespace and perNode sleeping pods on each node.
func createPods(ctx context.Context, client kubernetes.Interface, ns string, nodes []string, perNode int) error {
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := waitDefaultServiceAccount(ctx, client, ns); err != nil {
		return err
	}
	for _, node := range nodes {
		for i := range perNode {
			if _, err := client.CoreV1().Pods(ns).Create(ctx, idlePod(node, i), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	return nil
}

func waitDefaultServiceAccount(ctx context.Context, client kubernetes.Interface, ns string) error {
	for start := time.Now(); time.Since(start) < time.Minute; {
		if _, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return nil
		}
		if err := host.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("namespace %s: no default service account within a minute", ns)
}

// idlePod is a sleeping pod with its service account token mounted, as any pod: the
// token's projected volume also holds the namespace's kube-root-ca.crt config map, which
// each kubelet reads at every pod sync (from a watch, with the default change-detection
// strategy). The token itself is renewed only at 80 % of its hour, outside the window.
func idlePod(node string, i int) *v1.Pod {
	pod := testpods.Sleeper("", fmt.Sprintf("%s-%d", node, i), node, nil)
	pod.Spec.AutomountServiceAccountToken = nil
	return pod
}

// waitReady polls until want pods of ns are Ready and returns how many are.
func waitReady(ctx context.Context, client kubernetes.Interface, ns string, want int) (int, error) {
	ready := 0
	for start := time.Now(); time.Since(start) < 5*time.Minute; {
		list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		ready = 0
		for _, p := range list.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
					ready++
				}
			}
		}
		if ready == want {
			return ready, nil
		}
		if err := host.Sleep(ctx, time.Second); err != nil {
			return ready, err
		}
	}
	return ready, fmt.Errorf("%d of %d pods Ready within 5 minutes", ready, want)
}

// deleteNamespace removes ns and its pods at once (the kubelets are about to go).
func deleteNamespace(client kubernetes.Interface, ns string) error {
	ctx := context.Background()
	err := client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	return errors.Join(err, client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
}
