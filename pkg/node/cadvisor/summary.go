package cadvisor

import (
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	kubelettypes "k8s.io/kubelet/pkg/types"
)

// The labels upstream's kubelet gives cAdvisor's container metrics: the container's,
// pod's and namespace's names, and cAdvisor's id, name and image. Here id and name are
// both the runtime's container ID (cAdvisor's id is the cgroup path, its name the
// runtime's ID), and image is the image the pod spec names, as containerd 2's pod
// sandbox metrics report it.
var baseLabels = []string{"container", "id", "image", "name", "namespace", "pod"}

func newDesc(name, help string, extraLabels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(slices.Clone(baseLabels), extraLabels...), nil)
}

// cAdvisor's names and help of the metrics the summary has figures for.
var (
	cpuUsageDesc   = newDesc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", "cpu")
	memUsageDesc   = newDesc("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed")
	workingSetDesc = newDesc("container_memory_working_set_bytes", "Current working set in bytes.")
	rssDesc        = newDesc("container_memory_rss", "Size of RSS in bytes.")
	swapDesc       = newDesc("container_memory_swap", "Container swap usage in bytes.")
	failuresDesc   = newDesc("container_memory_failures_total", "Cumulative count of memory allocation failures.", "failure_type", "scope")
	startTimeDesc  = newDesc("container_start_time_seconds", "Start time of the container since unix epoch in seconds.")
	lastSeenDesc   = newDesc("container_last_seen", "Last time a container was seen by the exporter")
	rxBytesDesc    = newDesc("container_network_receive_bytes_total", "Cumulative count of bytes received", "interface")
	rxErrorsDesc   = newDesc("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving", "interface")
	txBytesDesc    = newDesc("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", "interface")
	txErrorsDesc   = newDesc("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting", "interface")
)

// summaryMetrics computes cAdvisor's container metrics from the stats summary, for
// runtimes without pod sandbox metrics: per container its CPU, memory and start time,
// per pod its network (labelled with the sandbox's ID and no container, as cAdvisor
// reports it on the pod's sandbox).
type summaryMetrics struct {
	summary Summary
	runtime Runtime
	pods    func() []*v1.Pod
	now     func() time.Time
}

// podContainer names a container of a pod.
type podContainer struct{ podUID, name string }

func (s *summaryMetrics) collect(ctx context.Context) ([]prometheus.Metric, error) {
	summary, err := s.summary.Get(ctx)
	if err != nil {
		return nil, err
	}
	running, err := s.runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		return nil, err
	}
	b := &summaryBuilder{now: s.now(), containers: map[podContainer]*runtimeapi.Container{}, sandboxes: map[string]string{}, images: s.specImages()}
	for _, c := range running {
		uid := c.GetLabels()[kubelettypes.KubernetesPodUIDLabel]
		b.containers[podContainer{uid, c.GetMetadata().GetName()}] = c
		b.sandboxes[uid] = c.GetPodSandboxId()
	}
	for i := range summary.Pods {
		b.addPod(&summary.Pods[i])
	}
	return b.out, nil
}

// specImages maps the kubelet's containers to the images their pod specs name.
func (s *summaryMetrics) specImages() map[podContainer]string {
	out := map[podContainer]string{}
	if s.pods == nil {
		return out
	}
	for _, pod := range s.pods() {
		uid := string(pod.UID)
		for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for _, c := range cs {
				out[podContainer{uid, c.Name}] = c.Image
			}
		}
		for _, c := range pod.Spec.EphemeralContainers {
			out[podContainer{uid, c.Name}] = c.Image
		}
	}
	return out
}

// summaryBuilder turns one summary into metrics.
type summaryBuilder struct {
	now        time.Time
	containers map[podContainer]*runtimeapi.Container // running, from the runtime
	sandboxes  map[string]string                      // pod UID → sandbox ID
	images     map[podContainer]string                // from the pod specs
	out        []prometheus.Metric
}

func (b *summaryBuilder) addPod(pod *statsapi.PodStats) {
	ref := pod.PodRef
	sandbox := b.sandboxes[ref.UID]
	b.addNetwork(pod.Network, []string{"", sandbox, "", sandbox, ref.Namespace, ref.Name})
	for i := range pod.Containers {
		c := &pod.Containers[i]
		key := podContainer{ref.UID, c.Name}
		var id, image string
		if rc := b.containers[key]; rc != nil {
			id, image = rc.GetId(), rc.GetImage().GetImage()
		}
		if spec, ok := b.images[key]; ok {
			image = spec
		}
		b.addContainer(c, []string{c.Name, id, image, id, ref.Namespace, ref.Name})
	}
}

func (b *summaryBuilder) addContainer(c *statsapi.ContainerStats, labels []string) {
	b.add(startTimeDesc, prometheus.GaugeValue, float64(c.StartTime.Unix()), metav1.Time{}, labels)
	b.add(lastSeenDesc, prometheus.GaugeValue, float64(b.now.Unix()), metav1.NewTime(b.now), labels)
	if cpu := c.CPU; cpu != nil && cpu.UsageCoreNanoSeconds != nil {
		b.add(cpuUsageDesc, prometheus.CounterValue, float64(*cpu.UsageCoreNanoSeconds)/1e9, cpu.Time, labels, "total")
	}
	if m := c.Memory; m != nil {
		b.addUint(memUsageDesc, prometheus.GaugeValue, m.UsageBytes, m.Time, labels)
		b.addUint(workingSetDesc, prometheus.GaugeValue, m.WorkingSetBytes, m.Time, labels)
		b.addUint(rssDesc, prometheus.GaugeValue, m.RSSBytes, m.Time, labels)
		// cAdvisor reports the same figures for the container and its hierarchy.
		for _, scope := range []string{"container", "hierarchy"} {
			b.addUint(failuresDesc, prometheus.CounterValue, m.PageFaults, m.Time, labels, "pgfault", scope)
			b.addUint(failuresDesc, prometheus.CounterValue, m.MajorPageFaults, m.Time, labels, "pgmajfault", scope)
		}
	}
	if s := c.Swap; s != nil {
		b.addUint(swapDesc, prometheus.GaugeValue, s.SwapUsageBytes, s.Time, labels)
	}
}

func (b *summaryBuilder) addNetwork(n *statsapi.NetworkStats, labels []string) {
	if n == nil {
		return
	}
	ifaces := n.Interfaces
	if len(ifaces) == 0 && n.Name != "" {
		ifaces = []statsapi.InterfaceStats{n.InterfaceStats}
	}
	for _, i := range ifaces {
		b.addUint(rxBytesDesc, prometheus.CounterValue, i.RxBytes, n.Time, labels, i.Name)
		b.addUint(rxErrorsDesc, prometheus.CounterValue, i.RxErrors, n.Time, labels, i.Name)
		b.addUint(txBytesDesc, prometheus.CounterValue, i.TxBytes, n.Time, labels, i.Name)
		b.addUint(txErrorsDesc, prometheus.CounterValue, i.TxErrors, n.Time, labels, i.Name)
	}
}

// addUint adds a figure the summary may lack.
func (b *summaryBuilder) addUint(desc *prometheus.Desc, t prometheus.ValueType, v *uint64, ts metav1.Time, labels []string, extra ...string) {
	if v != nil {
		b.add(desc, t, float64(*v), ts, labels, extra...)
	}
}

// add adds a sample stamped with the time the figure was taken, as cAdvisor stamps its
// own (none when ts is zero).
func (b *summaryBuilder) add(desc *prometheus.Desc, t prometheus.ValueType, v float64, ts metav1.Time, labels []string, extra ...string) {
	m := prometheus.MustNewConstMetric(desc, t, v, append(slices.Clone(labels), extra...)...)
	if !ts.IsZero() {
		m = prometheus.NewMetricWithTimestamp(ts.Time, m)
	}
	b.out = append(b.out, m)
}
