// Command probes measures what exec probes cost nodelet: it starts pods × containers
// busybox containers through the runtime manager, gives each a 1 s exec readiness probe,
// lets the probe manager run for a while, and prints this process's CPU time (from
// /proc/self/stat) per probe executed. The probe workers read a fixed pod status, as they
// read the status manager's cache in nodelet, so the figure is the prober's own cost: the
// workers, the exec calls over CRI, results, metrics. containerd's CPU is printed beside it,
// for scale: an exec is far dearer on the runtime's side.
//
//	go run ./test/bench/probes -endpoint unix:///run/nodelet-dev/containerd.sock
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/node/volumes"
	"github.com/nodelet/nodelet/pkg/pod/prober"
	"github.com/nodelet/nodelet/pkg/pod/prober/results"
	"github.com/nodelet/nodelet/pkg/pod/status"
	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/pkg/runtime/images"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
	"github.com/nodelet/nodelet/test/internal/host"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const userHZ = 100

type options struct {
	endpoint             string
	pods, containers     int
	duration, warmUp     time.Duration
	containerdPIDFile    string
	cpuProfile           string
	startTimeout         time.Duration
	periodSeconds, tSecs int32
}

func main() {
	var o options
	flag.StringVar(&o.endpoint, "endpoint", os.Getenv("CONTAINER_RUNTIME_ENDPOINT"), "CRI endpoint")
	flag.IntVar(&o.pods, "pods", 10, "pods")
	flag.IntVar(&o.containers, "containers", 10, "busybox containers per pod, each with an exec readiness probe")
	flag.DurationVar(&o.duration, "duration", 30*time.Second, "measuring time")
	flag.DurationVar(&o.warmUp, "warm-up", 5*time.Second, "probing before measuring (first probes are spread over a period)")
	flag.DurationVar(&o.startTimeout, "start-timeout", 3*time.Minute, "time allowed to get every container running")
	flag.StringVar(&o.containerdPIDFile, "containerd-pid-file", "/run/nodelet-dev/containerd.pid", "containerd's pid file, to show its CPU for scale (\"\" to skip)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measuring window to this file")
	flag.Parse()
	o.periodSeconds, o.tSecs = 1, 1
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "probes:", err)
		os.Exit(1)
	}
}

type bench struct {
	o       options
	rs      internalapi.RuntimeService
	m       *kuberuntime.Manager
	volumes *volumes.Manager
	pm      prober.Manager
	reg     *prometheus.Registry

	mu       sync.Mutex
	statuses map[types.UID]v1.PodStatus
}

// GetPodStatus makes bench the probe manager's StatusProvider.
func (b *bench) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.statuses[uid]
	return s, ok
}

func run(o options) error {
	// Interrupted, it still removes its pods.
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	b := &bench{o: o, reg: prometheus.NewRegistry(), statuses: map[types.UID]v1.PodStatus{}}
	if err := b.setUp(ctx); err != nil {
		return err
	}
	pods := make([]*v1.Pod, o.pods)
	for i := range pods {
		pods[i] = b.newPod(i)
	}
	defer b.removeAll(pods)
	start := time.Now()
	if err := b.startAll(ctx, pods); err != nil {
		return err
	}
	fmt.Printf("%d pods × %d containers running after %v\n", o.pods, o.containers, time.Since(start).Round(time.Millisecond))

	liveness, readiness, startup := results.NewManager(), results.NewManager(), results.NewManager()
	stop := drainUpdates(liveness, readiness, startup)
	defer close(stop)
	b.pm = prober.NewManager(b.m, liveness, readiness, startup, record.NewFakeRecorder(100), b, b.reg)
	for _, pod := range pods {
		b.pm.AddPod(pod)
		if err := b.readStatus(ctx, pod); err != nil {
			return err
		}
	}
	defer func() {
		for _, pod := range pods {
			b.pm.RemovePod(pod)
		}
	}()
	if err := host.Sleep(ctx, o.warmUp); err != nil {
		return err
	}
	return b.measure(ctx)
}

func (b *bench) setUp(ctx context.Context) error {
	var err error
	b.rs, err = cri.NewRemoteRuntimeService(ctx, b.o.endpoint, 3*time.Second, 2*time.Minute)
	if err != nil {
		return err
	}
	is, err := cri.NewRemoteImageService(ctx, b.o.endpoint, 3*time.Second, 2*time.Minute)
	if err != nil {
		return err
	}
	root, err := os.MkdirTemp("", "nodelet-bench-probes-")
	if err != nil {
		return err
	}
	b.volumes = volumes.NewManager(root)
	b.m, err = kuberuntime.NewManager(ctx, kuberuntime.Options{
		RuntimeService: b.rs, ImageService: is, Recorder: record.NewFakeRecorder(10000),
		Volumes: b.volumes, RootDir: root, PodLogsDir: root + "/logs",
		LegacyLogSymlinkDir: root + "/containers", NodeName: "bench",
		CPUCFSQuota: true, ImageOptions: images.Options{SerializeImagePulls: true},
	})
	return err
}

// newPod has o.containers busybox containers, each probed by `true` every second.
func (b *bench) newPod(i int) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-probes-%d-%s", i, uuid.NewUUID()[:8]), Namespace: "bench", UID: uuid.NewUUID()},
		Spec:       v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, TerminationGracePeriodSeconds: ptr.To[int64](0)},
	}
	for j := 0; j < b.o.containers; j++ {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
			Name: fmt.Sprintf("c%d", j), Image: "docker.io/library/busybox:1.36", Command: []string{"sleep", "3600"},
			ImagePullPolicy: v1.PullIfNotPresent, TerminationMessagePolicy: v1.TerminationMessageReadFile,
			ReadinessProbe: &v1.Probe{
				ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
				PeriodSeconds: b.o.periodSeconds, TimeoutSeconds: b.o.tSecs, SuccessThreshold: 1, FailureThreshold: 3,
			},
		})
	}
	return pod
}

// startAll syncs every pod until all its containers run.
func (b *bench) startAll(ctx context.Context, pods []*v1.Pod) error {
	deadline := time.Now().Add(b.o.startTimeout)
	backOff := flowcontrol.NewBackOff(time.Second, 10*time.Second)
	for _, pod := range pods {
		for {
			ps, err := b.m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
			if err != nil {
				return err
			}
			if len(ps.RunningContainerStatuses()) == len(pod.Spec.Containers) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pod %s not running after %v", pod.Name, b.o.startTimeout)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := b.syncPod(ctx, pod, ps, backOff); err != nil {
				fmt.Fprintf(os.Stderr, "SyncPod %s: %v (retrying)\n", pod.Name, err)
			}
		}
	}
	return nil
}

// syncPod is one pod sync as the kubelet does it: volumes set up, then SyncPod.
func (b *bench) syncPod(ctx context.Context, pod *v1.Pod, ps *container.PodStatus, backOff *flowcontrol.Backoff) error {
	if err := b.volumes.SetUpPod(ctx, pod); err != nil {
		return err
	}
	res := b.m.SyncPod(ctx, pod, ps, nil, backOff)
	return res.Error()
}

// readStatus stores the pod's API status once: the containers run for the whole test.
func (b *bench) readStatus(ctx context.Context, pod *v1.Pod) error {
	ps, err := b.m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return err
	}
	// Started: true (no startup probes); Ready is not read.
	s := status.GenerateAPIPodStatus(pod, ps, pod.Status, status.GenerateOptions{HostIPs: []string{"127.0.0.1"}})
	b.mu.Lock()
	defer b.mu.Unlock()
	b.statuses[pod.UID] = s
	return nil
}

func drainUpdates(ms ...results.Manager) chan struct{} {
	stop := make(chan struct{})
	for _, m := range ms {
		go func() {
			for {
				select {
				case <-m.Updates():
				case <-stop:
					return
				}
			}
		}()
	}
	return stop
}

// measure samples CPU and probe counts around the measuring window and prints the result.
func (b *bench) measure(ctx context.Context) error {
	cpu0, err := cpuTime("self")
	if err != nil {
		return err
	}
	probes0, err := b.probesRun()
	if err != nil {
		return err
	}
	ctrd0, ctrdErr := b.containerdCPU()
	stopProfile, err := startProfile(b.o.cpuProfile)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := host.Sleep(ctx, b.o.duration); err != nil {
		return err
	}
	stopProfile()
	elapsed := time.Since(start)
	cpu1, err := cpuTime("self")
	if err != nil {
		return err
	}
	probes1, err := b.probesRun()
	if err != nil {
		return err
	}
	ctrd1, ctrdErr2 := b.containerdCPU()

	n := probes1 - probes0
	if n == 0 {
		return errors.New("no probes ran")
	}
	cpu := cpu1 - cpu0
	want := float64(b.o.pods*b.o.containers) * elapsed.Seconds() / float64(b.o.periodSeconds)
	fmt.Printf("probed for %v: %.0f probes (%.1f/s, %.0f%% of the %d/s configured)\n",
		elapsed.Round(time.Millisecond), n, n/elapsed.Seconds(), 100*n/want, b.o.pods*b.o.containers/int(b.o.periodSeconds))
	fmt.Printf("nodelet CPU: %v in all, %.1f%% of one core, %.0f µs per probe\n",
		cpu.Round(time.Millisecond), 100*cpu.Seconds()/elapsed.Seconds(), float64(cpu.Microseconds())/n)
	if ctrdErr == nil && ctrdErr2 == nil {
		c := ctrd1 - ctrd0
		fmt.Printf("containerd CPU (for scale, without shims and runc): %v, %.0f µs per probe\n", c.Round(time.Millisecond), float64(c.Microseconds())/n)
	}
	return nil
}

// probesRun sums prober_probe_total over all results.
func (b *bench) probesRun() (float64, error) {
	families, err := b.reg.Gather()
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, f := range families {
		if f.GetName() == "prober_probe_total" {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum, nil
}

func (b *bench) containerdCPU() (time.Duration, error) {
	if b.o.containerdPIDFile == "" {
		return 0, errors.New("skipped")
	}
	pid, err := os.ReadFile(b.o.containerdPIDFile)
	if err != nil {
		return 0, err
	}
	return cpuTime(strings.TrimSpace(string(pid)))
}

// cpuTime is utime+stime of /proc/<pid>/stat.
func cpuTime(pid string) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after its ')' are fixed.
	rest := string(data)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	fields := strings.Fields(rest) // fields[0] is field 3 (state)
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/%s/stat", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// removeAll stops and removes every sandbox of the pods (and so their containers).
func (b *bench) removeAll(pods []*v1.Pod) {
	ctx := context.Background()
	for _, pod := range pods {
		sandboxes, _ := b.rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{criconfig.PodUIDLabel: string(pod.UID)}})
		for _, sb := range sandboxes {
			_ = b.rs.StopPodSandbox(ctx, sb.Id)
			_ = b.rs.RemovePodSandbox(ctx, sb.Id)
		}
	}
}

// startProfile starts a CPU profile into file, if one is asked for.
func startProfile(file string) (stop func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
