// Command standalone benchmarks nodelet as a whole, in standalone mode on a real
// containerd, and prints, side by side in one run:
//
//  1. manifest written → container running, median of N fresh pods, against the raw CRI
//     cost of the same pod (RunPodSandbox + CreateContainer + StartContainer), runs
//     alternating;
//  2. M manifests written at once → all running; then nodelet's RSS and the CPU seconds
//     it uses over an idle minute with those M pods.
//
// It starts its own nodelet (bin/nodelet) on the given runtime, which must not run pods
// of anyone else: a kubelet removes pods it does not own.
//
//	go run ./test/bench/standalone -endpoint unix:///run/nodelet-e2e/containerd.sock
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/cm"
	"github.com/nodelet/nodelet/pkg/cri"
	"github.com/nodelet/nodelet/pkg/criconfig"
)

const image = "docker.io/library/busybox:1.36"

type bench struct {
	rs        internalapi.RuntimeService
	node      string
	manifests string
	logsDir   string
	rootDir   string
	nodelet   *exec.Cmd
}

func main() {
	endpoint := flag.String("endpoint", "", "CRI endpoint nodelet and the raw runs use")
	bin := flag.String("nodelet", "bin/nodelet", "nodelet binary")
	runs := flag.Int("runs", 10, "fresh pods per method for the latency figure")
	many := flag.Int("pods", 30, "pods written at once for the scale figure")
	idle := flag.Duration("idle", time.Minute, "idle window for the CPU figure")
	flag.Parse()
	if err := run(*endpoint, *bin, *runs, *many, *idle); err != nil {
		fmt.Fprintln(os.Stderr, "standalone:", err)
		os.Exit(1)
	}
}

func run(endpoint, bin string, runs, many int, idle time.Duration) error {
	ctx := context.Background()
	rs, err := cri.NewRemoteRuntimeService(ctx, endpoint, 3*time.Second, 2*time.Minute)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "nodelet-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := &bench{rs: rs, node: "bench-" + string(uuid.NewUUID())[:6], manifests: filepath.Join(dir, "manifests"), logsDir: filepath.Join(dir, "logs"), rootDir: filepath.Join(dir, "root")}
	for _, d := range []string{b.manifests, b.logsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := b.startNodelet(bin, endpoint, dir); err != nil {
		return err
	}
	defer b.stopNodelet()
	time.Sleep(2 * time.Second) // sources seen, first relist done
	if err := b.latency(ctx, runs); err != nil {
		return err
	}
	return b.scale(ctx, many, idle)
}

func (b *bench) startNodelet(bin, endpoint, dir string) error {
	cfg := filepath.Join(dir, "config.yaml")
	body := fmt.Sprintf("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: %s\npodLogsDir: %s\ncgroupRoot: /%s\nhealthzPort: 0\n", b.manifests, b.logsDir, b.node)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(dir, "nodelet.log"))
	if err != nil {
		return err
	}
	b.nodelet = exec.Command(bin, "--config="+cfg, "--container-runtime-endpoint="+endpoint,
		"--root-dir="+b.rootDir, "--hostname-override="+b.node)
	b.nodelet.Stdout, b.nodelet.Stderr = log, log
	return b.nodelet.Start()
}

// stopNodelet stops nodelet, then removes every pod it ran.
func (b *bench) stopNodelet() {
	_ = b.nodelet.Process.Signal(syscall.SIGTERM)
	_ = b.nodelet.Wait()
	ctx := context.Background()
	sandboxes, _ := b.rs.ListPodSandbox(ctx, nil)
	for _, sb := range sandboxes {
		if strings.HasSuffix(sb.Labels[criconfig.PodNameLabel], "-"+b.node) || sb.Labels["bench"] == b.node {
			_ = b.rs.StopPodSandbox(ctx, sb.Id)
			_ = b.rs.RemovePodSandbox(ctx, sb.Id)
		}
	}
}

func manifest(name string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: %s\n    imagePullPolicy: IfNotPresent\n    command: [\"sleep\", \"3600\"]\n", name, image)
}

// writeManifest writes atomically, as editors and config tools do.
func (b *bench) writeManifest(name string) error {
	tmp := filepath.Join(b.manifests, "."+name)
	if err := os.WriteFile(tmp, []byte(manifest(name)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(b.manifests, name+".yaml"))
}

// running counts this node's running containers whose pod name starts with prefix.
func (b *bench) running(ctx context.Context, prefix string) (int, error) {
	cs, err := b.rs.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cs {
		name := c.Labels[criconfig.PodNameLabel]
		if strings.HasPrefix(name, prefix) && strings.HasSuffix(name, "-"+b.node) {
			n++
		}
	}
	return n, nil
}

// waitRunning polls containerd every 20 ms until want containers of prefix run. The
// polling only detects the end; latencies are read from the containers' StartedAt, so
// the poll period neither adds to them nor loads containerd during a start.
func (b *bench) waitRunning(ctx context.Context, prefix string, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		n, err := b.running(ctx, prefix)
		if err != nil {
			return err
		}
		if n >= want {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s: %d containers not running after %v", prefix, want, timeout)
}

// startedAt is when containerd started the newest container of a pod.
func (b *bench) startedAt(ctx context.Context, podName string) (time.Time, error) {
	cs, err := b.rs.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: map[string]string{criconfig.PodNameLabel: podName}})
	if err != nil || len(cs) == 0 {
		return time.Time{}, fmt.Errorf("no container for %s: %v", podName, err)
	}
	st, err := b.rs.ContainerStatus(ctx, cs[0].Id, false)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, st.Status.StartedAt), nil
}

func (b *bench) viaNodelet(ctx context.Context, i int) (time.Duration, error) {
	name := fmt.Sprintf("lat%d", i)
	start := time.Now()
	if err := b.writeManifest(name); err != nil {
		return 0, err
	}
	if err := b.waitRunning(ctx, name+"-", 1, 30*time.Second); err != nil {
		return 0, err
	}
	at, err := b.startedAt(ctx, name+"-"+b.node)
	return at.Sub(start), err
}

// viaCRI runs the same pod with three direct CRI calls (configs made before the clock).
// nodelet is frozen (SIGSTOP) meanwhile: it would rightly kill a pod nobody asked it for.
func (b *bench) viaCRI(ctx context.Context, i int) (time.Duration, error) {
	if err := b.nodelet.Process.Signal(syscall.SIGSTOP); err != nil {
		return 0, err
	}
	defer b.nodelet.Process.Signal(syscall.SIGCONT)
	d, sandboxID, err := b.rawPod(ctx, i)
	if sandboxID != "" {
		_ = b.rs.StopPodSandbox(ctx, sandboxID)
		_ = b.rs.RemovePodSandbox(ctx, sandboxID)
	}
	return d, err
}

func (b *bench) rawPod(ctx context.Context, i int) (time.Duration, string, error) {
	// The same pod nodelet runs, with the configs nodelet would generate for it (cgroup
	// parent under the same cgroup root, labels, log paths, termination-message mount).
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("raw%d", i), Namespace: "bench", UID: uuid.NewUUID(), Labels: map[string]string{"bench": b.node}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: image, Command: []string{"sleep", "3600"},
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: v1.TerminationMessageReadFile}}},
	}
	sb, err := criconfig.GeneratePodSandboxConfig(pod, 0, criconfig.SandboxOptions{
		PodLogsDir: b.logsDir, CgroupParent: cm.NewPodCgroups("/"+b.node, true).Parent(pod)})
	if err != nil {
		return 0, "", err
	}
	cc, _, err := criconfig.GenerateContainerConfig(ctx, &pod.Spec.Containers[0], pod, 0, criconfig.ContainerOptions{
		ImageRef: image, PodDir: filepath.Join(b.rootDir, "pods", string(pod.UID)), PodLogsDir: b.logsDir, CPUCFSQuota: true})
	if err != nil {
		return 0, "", err
	}
	start := time.Now()
	id, err := b.rs.RunPodSandbox(ctx, sb, "")
	if err != nil {
		return 0, "", err
	}
	cid, err := b.rs.CreateContainer(ctx, id, cc, sb)
	if err != nil {
		return 0, id, err
	}
	if err := b.rs.StartContainer(ctx, cid); err != nil {
		return 0, id, err
	}
	at, err := b.startedAt(ctx, pod.Name)
	return at.Sub(start), id, err
}

func (b *bench) latency(ctx context.Context, runs int) error {
	var viaNodelet, viaCRI []time.Duration
	measure := func(f func(context.Context, int) (time.Duration, error), i int, into *[]time.Duration) error {
		d, err := f(ctx, i)
		*into = append(*into, d)
		return err
	}
	for i := 0; i < runs; i++ {
		var err error
		if i%2 == 0 {
			err = errors.Join(measure(b.viaNodelet, i, &viaNodelet), measure(b.viaCRI, i, &viaCRI))
		} else {
			err = errors.Join(measure(b.viaCRI, i, &viaCRI), measure(b.viaNodelet, i, &viaNodelet))
		}
		if err != nil {
			return err
		}
	}
	n, r := median(viaNodelet), median(viaCRI)
	fmt.Printf("manifest written → container started (containerd's StartedAt), one busybox container, median of %d (alternating)\n", runs)
	fmt.Printf("  raw CRI (RunPodSandbox+CreateContainer+StartContainer): %7.1f ms\n", ms(r))
	fmt.Printf("  nodelet (file → running):                              %7.1f ms\n", ms(n))
	fmt.Printf("  difference: %+.1f ms, ratio nodelet/raw: %.2f\n", ms(n-r), float64(n)/float64(r))
	return nil
}

func (b *bench) scale(ctx context.Context, many int, idle time.Duration) error {
	latencyPods, _ := b.running(ctx, "lat")
	start := time.Now()
	for i := 0; i < many; i++ {
		if err := b.writeManifest(fmt.Sprintf("many%d", i)); err != nil {
			return err
		}
	}
	if err := b.waitRunning(ctx, "many", many, 5*time.Minute); err != nil {
		return err
	}
	allUp := time.Since(start)
	time.Sleep(5 * time.Second) // let the start-up burst settle
	cpu0, err := cpuSeconds(b.nodelet.Process.Pid)
	if err != nil {
		return err
	}
	time.Sleep(idle)
	cpu1, _ := cpuSeconds(b.nodelet.Process.Pid)
	rss, _ := rssMiB(b.nodelet.Process.Pid)
	fmt.Printf("%d manifests written at once → all running: %.2f s\n", many, allUp.Seconds())
	fmt.Printf("  nodelet with %d pods (and %d from the latency runs): RSS %.1f MiB, CPU %.2f s over %v idle (%.2f CPU-s per minute)\n",
		many, latencyPods, rss, cpu1-cpu0, idle, (cpu1-cpu0)*float64(time.Minute)/float64(idle))
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

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
