// Command standalone benchmarks nodelet as a whole, in standalone mode on a real
// containerd, against the raw CRI calls and, when given its binary, against upstream's
// kubelet on a containerd of its own. It prints, side by side in one run:
//
//  1. manifest written (with a rename) → container running, median of N fresh pods per
//     method, runs alternating: as containerd's StartedAt says, and as seen by polling
//     the runtime's container list every 10 ms (what `crictl ps` in a loop shows);
//  2. M manifests written at once → all running, for each kubelet in turn;
//  3. each kubelet's RSS and the CPU seconds it uses over an idle window with its pods.
//
// Each kubelet gets its own runtime (a kubelet removes pods it does not own), node name and
// cgroup root. Upstream's kubelet changes kernel tunables and adds iptables chains; the
// bench records them first and undoes its changes once upstream has stopped.
//
//	go run ./test/bench/standalone -endpoint unix:///run/nodelet-e2e/containerd.sock \
//	  -upstream /var/cache/nodelet/k8s-v1.37.2/bin/kubelet \
//	  -upstream-endpoint unix:///run/nodelet-bench-up/containerd.sock
package main

import (
	"github.com/nodelet/nodelet/test/internal/host"

	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/nodelet/nodelet/pkg/node/cm"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

const (
	image = "docker.io/library/busybox:1.36"
	// settle lets the kubelet that just started a pod finish its follow-up work (status,
	// relist) before the next measurement, which may be another kubelet's: they share the
	// machine's CPUs.
	settle = time.Second
	// rawPodLabel marks the pods the bench runs itself, by node name.
	rawPodLabel = "bench"
)

var (
	// pollPeriod is how often the runtime is asked whether a container runs.
	pollPeriod time.Duration
	// crictl, when set, is the crictl binary the latency figure polls with.
	crictl string
)

type options struct {
	endpoint, nodeletBin          string
	upstreamBin, upstreamEndpoint string
	runs, many                    int
	idle                          time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.endpoint, "endpoint", "", "CRI endpoint for nodelet and the raw runs")
	flag.StringVar(&o.nodeletBin, "nodelet", "bin/nodelet", "nodelet binary")
	flag.StringVar(&o.upstreamBin, "upstream", "", "upstream kubelet binary; empty: no upstream column")
	flag.StringVar(&o.upstreamEndpoint, "upstream-endpoint", "", "CRI endpoint for upstream's kubelet (not nodelet's)")
	flag.DurationVar(&pollPeriod, "poll", 10*time.Millisecond, "how often the runtime is asked whether a container runs")
	flag.StringVar(&crictl, "crictl", "", "poll with this crictl binary (`crictl ps` in a loop) instead of CRI calls, for the latency figure")
	flag.IntVar(&o.runs, "runs", 10, "fresh pods per method for the latency figure")
	flag.IntVar(&o.many, "pods", 20, "pods written at once for the scale figure (0: skip)")
	flag.DurationVar(&o.idle, "idle", time.Minute, "idle window for the CPU figure (0: skip)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "standalone:", err)
		os.Exit(1)
	}
}

type bench struct {
	nodelet  *kubelet
	upstream *kubelet // nil without -upstream
}

func (b *bench) kubelets() []*kubelet {
	if b.upstream == nil {
		return []*kubelet{b.nodelet}
	}
	return []*kubelet{b.nodelet, b.upstream}
}

func run(ctx context.Context, o options) (err error) {
	if o.upstreamBin != "" && (o.upstreamEndpoint == "" || o.upstreamEndpoint == o.endpoint) {
		return errors.New("-upstream needs an -upstream-endpoint of its own")
	}
	dir, err := os.MkdirTemp("", "nodelet-bench-")
	if err != nil {
		return err
	}
	// Removed last, once the kubelets have stopped and their mounts are gone.
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	b := &bench{}
	if b.nodelet, err = newKubelet(ctx, "nodelet", o.endpoint, dir); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.nodelet.stop()) }()
	if err := b.startNodelet(o.nodeletBin); err != nil {
		return err
	}
	if o.upstreamBin != "" {
		state, err := host.RecordUpstreamKubeletState()
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, state.Restore()) }() // after upstream has stopped
		if b.upstream, err = newKubelet(ctx, "upstream", o.upstreamEndpoint, dir); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, b.upstream.stop()) }()
		if err := b.startUpstream(o.upstreamBin); err != nil {
			return err
		}
	}
	if err := b.warmUp(ctx); err != nil {
		return err
	}
	if err := b.latency(ctx, o.runs); err != nil {
		return err
	}
	if o.many > 0 {
		if err := b.scale(ctx, o.many); err != nil {
			return err
		}
	}
	if o.idle > 0 {
		return b.idleCost(ctx, o.idle)
	}
	return nil
}

func (b *bench) startNodelet(bin string) error {
	k := b.nodelet
	cfg := filepath.Join(k.dir, "config.yaml")
	body := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %s
staticPodPath: %s
podLogsDir: %s
cgroupRoot: /%s
healthzPort: 0
`, k.endpoint, k.manifests(), k.logsDir(), k.cgroupRoot)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		return err
	}
	return k.start(bin, "--config="+cfg, "--root-dir="+k.rootDir(), "--hostname-override="+k.node)
}

// startUpstream runs upstream's kubelet in standalone mode with what it needs on this
// kind of machine (cgroup v1, swap on, no systemd) and without its servers, so that it
// binds no port.
func (b *bench) startUpstream(bin string) error {
	k := b.upstream
	cfg := filepath.Join(k.dir, "config.yaml")
	body := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: %s
staticPodPath: %s
podLogsDir: %s
cgroupRoot: /%s
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
enableServer: false
healthzPort: 0
readOnlyPort: 0
volumePluginDir: %s
authentication:
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
`, k.endpoint, k.manifests(), k.logsDir(), k.cgroupRoot, filepath.Join(k.rootDir(), "volume-plugins"))
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		return err
	}
	return k.start(bin, "--config="+cfg, "--root-dir="+k.rootDir(),
		"--cert-dir="+filepath.Join(k.rootDir(), "pki"), "--hostname-override="+k.node)
}

// warmUp runs one pod on each kubelet first: it waits until each syncs pods at all, and
// the first pod's one-time costs (QoS cgroups, caches) stay out of the figures.
func (b *bench) warmUp(ctx context.Context) error {
	for _, k := range b.kubelets() {
		if err := k.writeManifest("warm"); err != nil {
			return err
		}
	}
	for _, k := range b.kubelets() {
		if _, err := k.waitRunning(ctx, "warm-", 1, time.Minute); err != nil {
			return err
		}
	}
	time.Sleep(settle)
	return nil
}

func manifest(name string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: %s\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n", name, image)
}

// sample is one pod start: until containerd's StartedAt, and until a poll saw it running;
// and the phases of the first: from the manifest (or the first CRI call) to the sandbox's
// creation, from there to the container's creation, and on to its start, as containerd
// timed them.
type sample struct {
	started, seen                            time.Duration
	toSandbox, sandboxToContainer, toStarted time.Duration
}

func newSample(start time.Time, tl timeline, seen time.Time) sample {
	return sample{started: tl.started.Sub(start), seen: seen.Sub(start), toSandbox: tl.sandboxCreated.Sub(start),
		sandboxToContainer: tl.containerCreated.Sub(tl.sandboxCreated), toStarted: tl.started.Sub(tl.containerCreated)}
}

type method struct {
	name string
	run  func(ctx context.Context, i int) (sample, error)
}

// viaKubelet writes a manifest and waits for its container.
func viaKubelet(k *kubelet) func(context.Context, int) (sample, error) {
	return func(ctx context.Context, i int) (sample, error) {
		name := fmt.Sprintf("lat%d", i)
		start := time.Now()
		if err := k.writeManifest(name); err != nil {
			return sample{}, err
		}
		waitRunning := k.waitRunning
		if crictl != "" {
			waitRunning = k.waitRunningCrictl
		}
		seen, err := waitRunning(ctx, name+"-", 1, 30*time.Second)
		if err != nil {
			return sample{}, err
		}
		tl, err := podTimeline(ctx, k.rs, k.podName(name))
		return newSample(start, tl, seen), err
	}
}

// viaCRI runs the same pod with three direct CRI calls on nodelet's runtime (configs made
// before the clock). nodelet is frozen meanwhile: it would rightly kill a pod nobody asked
// it for.
func (b *bench) viaCRI(ctx context.Context, i int) (sample, error) {
	k := b.nodelet
	resume, err := k.freeze()
	if err != nil {
		return sample{}, err
	}
	defer resume()
	s, sandboxID, err := b.rawPod(ctx, i)
	if sandboxID != "" {
		_ = k.rs.StopPodSandbox(ctx, sandboxID)
		_ = k.rs.RemovePodSandbox(ctx, sandboxID)
	}
	return s, err
}

func (b *bench) rawPod(ctx context.Context, i int) (sample, string, error) {
	k := b.nodelet
	// The same pod nodelet runs, with the configs nodelet would generate for it (cgroup
	// parent under the same cgroup root, labels, log paths, termination-message mount).
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("raw%d", i), Namespace: "bench", UID: uuid.NewUUID(), Labels: map[string]string{rawPodLabel: k.node}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: image, Command: []string{"sleep", "3600"},
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: v1.TerminationMessageReadFile}}},
	}
	sb, err := criconfig.GeneratePodSandboxConfig(pod, 0, criconfig.SandboxOptions{
		PodLogsDir: k.logsDir(), CgroupParent: cm.NewPodCgroups("/"+k.cgroupRoot, true).Parent(pod)})
	if err != nil {
		return sample{}, "", err
	}
	cc, _, err := criconfig.GenerateContainerConfig(ctx, &pod.Spec.Containers[0], pod, 0, criconfig.ContainerOptions{
		ImageRef: image, PodDir: filepath.Join(k.rootDir(), "pods", string(pod.UID)), PodLogsDir: k.logsDir(), CPUCFSQuota: true})
	if err != nil {
		return sample{}, "", err
	}
	start := time.Now()
	id, err := k.rs.RunPodSandbox(ctx, sb, "")
	if err != nil {
		return sample{}, "", err
	}
	cid, err := k.rs.CreateContainer(ctx, id, cc, sb)
	if err != nil {
		return sample{}, id, err
	}
	if err := k.rs.StartContainer(ctx, cid); err != nil {
		return sample{}, id, err
	}
	done := time.Now()
	tl, err := podTimeline(ctx, k.rs, pod.Name)
	return newSample(start, tl, done), id, err
}

// latency measures every method once per run, in an order that rotates from run to run
// so that machine noise and the previous method's follow-up work hit them all alike.
func (b *bench) latency(ctx context.Context, runs int) error {
	methods := []method{{"raw CRI (RunPodSandbox+CreateContainer+StartContainer)", b.viaCRI}}
	if b.upstream != nil {
		methods = append(methods, method{"upstream kubelet (file → running)", viaKubelet(b.upstream)})
	}
	methods = append(methods, method{"nodelet (file → running)", viaKubelet(b.nodelet)})
	samples := make([][]sample, len(methods))
	for i := 0; i < runs; i++ {
		for j := range methods {
			m := (i + j) % len(methods)
			s, err := methods[m].run(ctx, i)
			if err != nil {
				return fmt.Errorf("%s: %w", methods[m].name, err)
			}
			samples[m] = append(samples[m], s)
			time.Sleep(settle)
		}
	}
	fmt.Printf("manifest written → container running, one busybox container, median of %d (alternating)\n", runs)
	fmt.Printf("  %-56s %10s %10s\n", "", "StartedAt", "polled")
	med := make([]sample, len(methods))
	for m := range methods {
		med[m] = medianSample(samples[m])
		fmt.Printf("  %-56s %7.1f ms %7.1f ms\n", methods[m].name+":", ms(med[m].started), ms(med[m].seen))
	}
	fmt.Printf("  phases as containerd timed them (medians): manifest or first call → sandbox created → container created → started\n")
	for m := range methods {
		fmt.Printf("  %-56s %7.1f ms %7.1f ms %7.1f ms\n", methods[m].name+":", ms(med[m].toSandbox), ms(med[m].sandboxToContainer), ms(med[m].toStarted))
	}
	raw, nodelet := med[0], med[len(methods)-1]
	fmt.Printf("  nodelet − raw: %+.1f ms, ratio nodelet/raw: %.2f\n", ms(nodelet.started-raw.started), ratio(nodelet.started, raw.started))
	if b.upstream != nil {
		up := med[1]
		fmt.Printf("  ratio nodelet/upstream: %.2f (StartedAt), %.2f (polled); nodelet − upstream: %+.1f ms\n",
			ratio(nodelet.started, up.started), ratio(nodelet.seen, up.seen), ms(nodelet.started-up.started))
		fmt.Printf("  median of the runs' own ratios nodelet/upstream (each run measures both within seconds): %.2f (StartedAt)\n",
			medianRatio(samples[len(methods)-1], samples[1]))
	}
	return nil
}

// medianRatio is the median over runs of a[i].started / b[i].started.
func medianRatio(a, b []sample) float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = ratio(a[i].started, b[i].started)
	}
	sort.Float64s(r)
	if n := len(r); n%2 == 0 {
		return (r[n/2-1] + r[n/2]) / 2
	}
	return r[len(r)/2]
}

// scale writes many manifests at once to each kubelet in turn and waits for them all.
func (b *bench) scale(ctx context.Context, many int) error {
	fmt.Printf("%d manifests written at once → all running\n", many)
	took := map[string]sample{}
	for _, k := range b.kubelets() {
		s, err := scaleOne(ctx, k, many)
		if err != nil {
			return err
		}
		took[k.name] = s
		fmt.Printf("  %-10s %6.2f s (last StartedAt), %6.2f s (polled)\n", k.name+":", s.started.Seconds(), s.seen.Seconds())
		time.Sleep(5 * time.Second) // let the start-up burst settle
	}
	if b.upstream != nil {
		n, u := took["nodelet"], took["upstream"]
		fmt.Printf("  ratio nodelet/upstream: %.2f (StartedAt), %.2f (polled)\n", ratio(n.started, u.started), ratio(n.seen, u.seen))
	}
	return nil
}

func scaleOne(ctx context.Context, k *kubelet, many int) (sample, error) {
	names := make([]string, many)
	start := time.Now()
	for i := range names {
		names[i] = fmt.Sprintf("many%d", i)
		if err := k.writeManifest(names[i]); err != nil {
			return sample{}, err
		}
	}
	seen, err := k.waitRunning(ctx, "many", many, 5*time.Minute)
	if err != nil {
		return sample{}, err
	}
	for i := range names {
		names[i] = k.podName(names[i])
	}
	last, err := lastStartedAt(ctx, k.rs, names...)
	return sample{started: last.Sub(start), seen: seen.Sub(start)}, err
}

// idleCost measures every kubelet's CPU over the same idle window, then its RSS.
func (b *bench) idleCost(ctx context.Context, idle time.Duration) error {
	before := map[string]float64{}
	for _, k := range b.kubelets() {
		cpu, err := cpuSeconds(k.cmd.Process.Pid)
		if err != nil {
			return err
		}
		before[k.name] = cpu
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(idle):
	}
	fmt.Printf("idle, with the pods above running, over %v\n", idle)
	perMin := map[string]float64{}
	rss := map[string]float64{}
	for _, k := range b.kubelets() {
		cpu, _ := cpuSeconds(k.cmd.Process.Pid)
		pods, _ := k.running(ctx, "")
		rss[k.name], _ = rssMiB(k.cmd.Process.Pid)
		perMin[k.name] = (cpu - before[k.name]) * float64(time.Minute) / float64(idle)
		fmt.Printf("  %-10s %d pods: RSS %.1f MiB, %.2f CPU-s per minute\n", k.name+":", pods, rss[k.name], perMin[k.name])
	}
	if b.upstream != nil {
		fmt.Printf("  ratio nodelet/upstream: RSS %.2f, CPU %.2f\n", rss["nodelet"]/rss["upstream"], perMin["nodelet"]/perMin["upstream"])
	}
	return nil
}

// cpuSeconds reads utime+stime of a process from /proc.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may contain spaces.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	const clockTicks = 100 // USER_HZ on Linux
	return (utime + stime) / clockTicks, nil
}

func rssMiB(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.Fields(rest)[0], 64)
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS")
}

// medianSample takes the median of each figure on its own.
func medianSample(s []sample) sample {
	of := func(f func(sample) time.Duration) time.Duration {
		d := make([]time.Duration, len(s))
		for i := range s {
			d[i] = f(s[i])
		}
		return median(d)
	}
	return sample{
		started:            of(func(s sample) time.Duration { return s.started }),
		seen:               of(func(s sample) time.Duration { return s.seen }),
		toSandbox:          of(func(s sample) time.Duration { return s.toSandbox }),
		sandboxToContainer: of(func(s sample) time.Duration { return s.sandboxToContainer }),
		toStarted:          of(func(s sample) time.Duration { return s.toStarted }),
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	n := len(s)
	if n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[n/2]
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
