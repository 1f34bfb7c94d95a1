// Command syncpod measures, side by side in one run, how long nodelet's runtime manager
// takes to get a one-container pod running (GetPodStatus, the kubelet's volume set-up, then
// SyncPod) against the same CRI calls made directly (RunPodSandbox + CreateContainer +
// StartContainer), and prints the medians and their ratio. Runs alternate so machine noise
// hits both alike.
//
//	go run ./test/bench/syncpod -endpoint unix:///run/nodelet-dev/containerd.sock -runs 10
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/pkg/node/volumes"
	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/pkg/runtime/images"
	"github.com/nodelet/nodelet/pkg/runtime/kuberuntime"
)

func main() {
	endpoint := flag.String("endpoint", os.Getenv("CONTAINER_RUNTIME_ENDPOINT"), "CRI endpoint")
	runs := flag.Int("runs", 10, "pods per method")
	flag.Parse()
	if err := run(*endpoint, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "syncpod:", err)
		os.Exit(1)
	}
}

type bench struct {
	rs      internalapi.RuntimeService
	m       *kuberuntime.Manager
	volumes *volumes.Manager
	logsDir string
}

func run(endpoint string, runs int) error {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	metrics, err := cri.NewMetrics(reg)
	if err != nil {
		return err
	}
	rs, err := cri.NewRemoteRuntimeService(ctx, endpoint, 3*time.Second, 2*time.Minute)
	if err != nil {
		return err
	}
	is, err := cri.NewRemoteImageService(ctx, endpoint, 3*time.Second, 2*time.Minute)
	if err != nil {
		return err
	}
	// The runtime manager's calls are counted, to show what SyncPod adds to the raw three.
	managerRS := cri.NewInstrumentedRuntimeService(rs, metrics)
	managerIS := cri.NewInstrumentedImageService(is, metrics)
	root, err := os.MkdirTemp("", "nodelet-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	b := &bench{rs: rs, volumes: volumes.NewManager(root), logsDir: root + "/logs"}
	if err := os.MkdirAll(root+"/containers", 0o755); err != nil {
		return err
	}
	b.m, err = kuberuntime.NewManager(ctx, kuberuntime.Options{
		RuntimeService: managerRS, ImageService: managerIS, Recorder: record.NewFakeRecorder(10000),
		Volumes: b.volumes, RootDir: root, PodLogsDir: b.logsDir, LegacyLogSymlinkDir: root + "/containers", NodeName: "bench",
		CPUCFSQuota: true, ImageOptions: images.Options{SerializeImagePulls: true},
	})
	if err != nil {
		return err
	}
	// One warm-up of each so image metadata and snapshots are cached for both.
	if _, err := b.raw(ctx); err != nil {
		return fmt.Errorf("raw warm-up: %w", err)
	}
	if _, err := b.sync(ctx); err != nil {
		return fmt.Errorf("SyncPod warm-up: %w", err)
	}
	var raw, synced []time.Duration
	measure := func(f func(context.Context) (time.Duration, error), into *[]time.Duration) error {
		d, err := f(ctx)
		*into = append(*into, d)
		return err
	}
	for i := 0; i < runs; i++ {
		// ABBA order, so whatever the previous pod's teardown leaves running in containerd
		// weighs on both methods alike.
		var err error
		if i%2 == 0 {
			err = errors.Join(measure(b.raw, &raw), measure(b.sync, &synced))
		} else {
			err = errors.Join(measure(b.sync, &synced), measure(b.raw, &raw))
		}
		if err != nil {
			return err
		}
	}
	mr, ms := median(raw), median(synced)
	fmt.Printf("pod start-up, one busybox container, median of %d (alternating runs)\n", runs)
	fmt.Printf("  raw CRI (RunPodSandbox+CreateContainer+StartContainer): %7.1f ms\n", ms2(mr))
	fmt.Printf("  nodelet GetPodStatus+SyncPod:                          %7.1f ms\n", ms2(ms))
	fmt.Printf("  overhead: %+.1f ms, ratio SyncPod/raw: %.2f\n", ms2(ms-mr), float64(ms)/float64(mr))
	return printCalls(reg, runs+1)
}

// printCalls shows the CRI calls the runtime manager made per pod and their mean time.
func printCalls(reg *prometheus.Registry, pods int) error {
	families, err := reg.Gather()
	if err != nil {
		return err
	}
	fmt.Println("  CRI calls per GetPodStatus+SyncPod (count, mean ms):")
	for _, f := range families {
		if f.GetName() != "kubelet_runtime_operations_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			op := m.GetLabel()[0].GetValue()
			fmt.Printf("    %-22s %4.1f  %6.2f\n", op, float64(h.GetSampleCount())/float64(pods), 1000*h.GetSampleSum()/float64(h.GetSampleCount()))
		}
	}
	return nil
}

func newPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-" + string(uuid.NewUUID())[:8], Namespace: "bench", UID: uuid.NewUUID()},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []v1.Container{{
				Name: "app", Image: "docker.io/library/busybox:1.36", Command: []string{"sleep", "3600"},
				ImagePullPolicy: v1.PullIfNotPresent, TerminationMessagePolicy: v1.TerminationMessageReadFile,
			}},
		},
	}
}

// raw makes the three CRI calls directly; config generation happens before the clock starts.
func (b *bench) raw(ctx context.Context) (time.Duration, error) {
	pod := newPod()
	sbConfig, err := criconfig.GeneratePodSandboxConfig(pod, 0, criconfig.SandboxOptions{PodLogsDir: b.logsDir})
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(sbConfig.LogDirectory, 0o755); err != nil {
		return 0, err
	}
	cConfig := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:1.36"},
		Command:  []string{"sleep", "3600"},
		LogPath:  "app/0.log",
		Labels:   criconfig.NewContainerLabels(&pod.Spec.Containers[0], pod),
		Linux:    &runtimeapi.LinuxContainerConfig{},
	}
	defer b.remove(ctx, pod)
	start := time.Now()
	sbID, err := b.rs.RunPodSandbox(ctx, sbConfig, "")
	if err != nil {
		return 0, err
	}
	cID, err := b.rs.CreateContainer(ctx, sbID, cConfig, sbConfig)
	if err != nil {
		return 0, err
	}
	if err := b.rs.StartContainer(ctx, cID); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// sync is what a pod worker does for a new pod: read its (empty) status, set its volumes
// up (the kubelet's part: the pod's directory), then SyncPod.
func (b *bench) sync(ctx context.Context) (time.Duration, error) {
	pod := newPod()
	defer b.remove(ctx, pod)
	start := time.Now()
	status, err := b.m.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
	if err != nil {
		return 0, err
	}
	if err := b.volumes.SetUpPod(ctx, pod); err != nil {
		return 0, err
	}
	result := b.m.SyncPod(ctx, pod, status, nil, flowcontrol.NewBackOff(10*time.Second, 300*time.Second))
	if err := result.Error(); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func (b *bench) remove(ctx context.Context, pod *v1.Pod) {
	sandboxes, _ := b.rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{criconfig.PodUIDLabel: string(pod.UID)}})
	for _, sb := range sandboxes {
		_ = b.rs.StopPodSandbox(ctx, sb.Id)
		_ = b.rs.RemovePodSandbox(ctx, sb.Id)
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms2(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
