package metrics

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func TestRegistryFamilyNames(t *testing.T) {
	r, err := NewRegistries("node-a")
	if err != nil {
		t.Fatal(err)
	}
	names := r.Kubelet.FamilyNames()
	for _, want := range []string{
		"kubelet_working_pods", "kubelet_volume_stats_used_bytes", "kubelet_container_log_filesystem_used_bytes",
		"kubelet_preemptions", "kubelet_node_startup_duration_seconds", "process_start_time_seconds", "go_goroutines",
		"nodelet_pod_startup_duration_seconds",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("FamilyNames lacks %s", want)
		}
	}
	if !slices.IsSorted(names) {
		t.Error("FamilyNames are not sorted")
	}
	// Families registered later (the runtime client's, say) are named too, and forgotten
	// when unregistered.
	c := prometheus.NewCounter(prometheus.CounterOpts{Subsystem: "kubelet", Name: "test_total", Help: "test"})
	r.Kubelet.MustRegister(c)
	if !slices.Contains(r.Kubelet.FamilyNames(), "kubelet_test_total") {
		t.Error("a collector registered later is not named")
	}
	if err := r.Kubelet.Register(c); err == nil {
		t.Error("registering the same collector twice succeeded")
	}
	r.Kubelet.Unregister(c)
	if slices.Contains(r.Kubelet.FamilyNames(), "kubelet_test_total") {
		t.Error("an unregistered collector is still named")
	}
}

func u64(v uint64) *uint64 { return &v }

func volumeStats(name string, pvc *statsapi.PVCReference, used uint64) statsapi.VolumeStats {
	return statsapi.VolumeStats{Name: name, PVCRef: pvc, FsStats: statsapi.FsStats{
		CapacityBytes: u64(1000), AvailableBytes: u64(1000 - used), UsedBytes: u64(used),
		Inodes: u64(100), InodesFree: u64(90), InodesUsed: u64(10),
	}}
}

// The volume stats and log collectors report, from the pods' stats, every claim once and
// every container's log usage, with upstream's names, help texts and labels.
func TestPodStatsCollectors(t *testing.T) {
	r, err := NewRegistries("node-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { SetPodStats(nil) })
	claim := &statsapi.PVCReference{Name: "data", Namespace: "ns"}
	calls := 0
	SetPodStats(func(context.Context) ([]statsapi.PodStats, error) {
		calls++
		return []statsapi.PodStats{
			{
				PodRef: statsapi.PodReference{Name: "web", Namespace: "ns", UID: "u1"},
				Containers: []statsapi.ContainerStats{
					{Name: "app", Logs: &statsapi.FsStats{UsedBytes: u64(4096)}},
					{Name: "nolog"},
				},
				VolumeStats: []statsapi.VolumeStats{volumeStats("cache", nil, 5), volumeStats("data", claim, 300)},
			},
			// a second pod of the same claim: reported once, from the first pod
			{PodRef: statsapi.PodReference{Name: "web2", Namespace: "ns", UID: "u2"},
				VolumeStats: []statsapi.VolumeStats{volumeStats("data", claim, 999)}},
		}, nil
	})
	want := `
# HELP kubelet_container_log_filesystem_used_bytes [ALPHA] Bytes used by the container's logs on the filesystem.
# TYPE kubelet_container_log_filesystem_used_bytes gauge
kubelet_container_log_filesystem_used_bytes{container="app",namespace="ns",pod="web",uid="u1"} 4096
# HELP kubelet_volume_stats_available_bytes [ALPHA] Number of available bytes in the volume
# TYPE kubelet_volume_stats_available_bytes gauge
kubelet_volume_stats_available_bytes{namespace="ns",persistentvolumeclaim="data"} 700
# HELP kubelet_volume_stats_capacity_bytes [ALPHA] Capacity in bytes of the volume
# TYPE kubelet_volume_stats_capacity_bytes gauge
kubelet_volume_stats_capacity_bytes{namespace="ns",persistentvolumeclaim="data"} 1000
# HELP kubelet_volume_stats_inodes [ALPHA] Maximum number of inodes in the volume
# TYPE kubelet_volume_stats_inodes gauge
kubelet_volume_stats_inodes{namespace="ns",persistentvolumeclaim="data"} 100
# HELP kubelet_volume_stats_inodes_free [ALPHA] Number of free inodes in the volume
# TYPE kubelet_volume_stats_inodes_free gauge
kubelet_volume_stats_inodes_free{namespace="ns",persistentvolumeclaim="data"} 90
# HELP kubelet_volume_stats_inodes_used [ALPHA] Number of used inodes in the volume
# TYPE kubelet_volume_stats_inodes_used gauge
kubelet_volume_stats_inodes_used{namespace="ns",persistentvolumeclaim="data"} 10
# HELP kubelet_volume_stats_used_bytes [ALPHA] Number of used bytes in the volume
# TYPE kubelet_volume_stats_used_bytes gauge
kubelet_volume_stats_used_bytes{namespace="ns",persistentvolumeclaim="data"} 300
`
	families := []string{"kubelet_container_log_filesystem_used_bytes", "kubelet_volume_stats_available_bytes",
		"kubelet_volume_stats_capacity_bytes", "kubelet_volume_stats_inodes", "kubelet_volume_stats_inodes_free",
		"kubelet_volume_stats_inodes_used", "kubelet_volume_stats_used_bytes"}
	if err := testutil.GatherAndCompare(r.Kubelet, strings.NewReader(want), families...); err != nil {
		t.Error(err)
	}
	if calls != 1 {
		t.Errorf("one scrape listed the pods' stats %d times, want once for both collectors", calls)
	}

	// A failed listing reports nothing, as upstream.
	SetPodStats(func(context.Context) ([]statsapi.PodStats, error) { return nil, errors.New("runtime down") })
	if n, err := testutil.GatherAndCount(r.Kubelet, families...); err != nil || n != 0 {
		t.Errorf("with the listing failing: %d series (%v), want none", n, err)
	}
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	_ = g.Write(&m)
	return m.GetGauge().GetValue()
}

// kubelet_working_pods has upstream's fifteen series, zero included.
func TestRecordWorkingPods(t *testing.T) {
	RecordWorkingPods([]WorkingPod{
		{Lifecycle: "sync", HasConfig: true},
		{Lifecycle: "sync", HasConfig: true},
		{Lifecycle: "sync", HasConfig: true, Static: true},
		{Lifecycle: "terminating", Orphan: true, HasConfig: true},
		{Lifecycle: "terminating", Orphan: true},
		{Lifecycle: "terminated", Orphan: true, Static: true}, // runtime only: static unknown
	})
	for labels, want := range map[[3]string]float64{
		{"sync", "desired", ""}:                    2,
		{"sync", "desired", "true"}:                1,
		{"terminating", "orphan", ""}:              1,
		{"terminating", "runtime_only", "unknown"}: 1,
		{"terminated", "runtime_only", "unknown"}:  1,
		{"terminated", "orphan", "true"}:           0,
	} {
		if got := gaugeValue(WorkingPodCount.WithLabelValues(labels[0], labels[1], labels[2])); got != want {
			t.Errorf("kubelet_working_pods%v = %v, want %v", labels, got, want)
		}
	}
	if n := testutil.CollectAndCount(WorkingPodCount); n != 15 {
		t.Errorf("%d series, want upstream's 15", n)
	}
}

func TestNodeStartupTracker(t *testing.T) {
	boot := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := boot.Add(100 * time.Second)
	tr := NewNodeStartupTracker(boot, boot.Add(30*time.Second), func() time.Time { return now })

	// Before an attempt, neither a creation nor Ready counts (or the durations below
	// would start from them).
	tr.RecordNodeReady()
	tr.RecordRegisteredNewNode()
	tr.RecordAttemptRegisterNode()
	now = now.Add(5 * time.Second)
	tr.RecordAttemptRegisterNode() // only the first attempt counts
	tr.RecordRegisteredNewNode()
	now = now.Add(20 * time.Second)
	tr.RecordNodeReady()
	now = now.Add(time.Hour)
	tr.RecordNodeReady() // only the first Ready counts
	for _, c := range []struct {
		g    prometheus.Gauge
		want float64
	}{
		{NodeStartupPreKubeletDuration, 30},
		{NodeStartupPreRegistrationDuration, 70},
		{NodeStartupRegistrationDuration, 5},
		{NodeStartupPostRegistrationDuration, 20},
		{NodeStartupDuration, 125},
	} {
		if got := gaugeValue(c.g); got != c.want {
			t.Errorf("%s = %v, want %v", describe(c.g), got, c.want)
		}
	}
}

func TestPriorityBucket(t *testing.T) {
	prio := func(p int32) *v1.Pod { return &v1.Pod{Spec: v1.PodSpec{Priority: &p}} }
	for pod, want := range map[*v1.Pod]string{
		nil: "unknown", {}: "normal", prio(0): "normal", prio(2000001000): "system-critical",
		prio(100000): "high", prio(99999): "medium", prio(1): "medium", prio(-1): "low", prio(-999): "low",
		prio(-1000): "very-low",
	} {
		if got := PriorityBucket(pod); got != want {
			t.Errorf("PriorityBucket(%v) = %q, want %q", pod, got, want)
		}
	}
}

func counterOf(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

func TestRecordContainerRequestedResizes(t *testing.T) {
	res := func(kv ...string) v1.ResourceList {
		l := v1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			l[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return l
	}
	old := &v1.Pod{Spec: v1.PodSpec{
		InitContainers: []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Requests: res("cpu", "100m")}}},
		Containers: []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{
			Requests: res("cpu", "1", "memory", "1Gi"), Limits: res("memory", "2Gi")}}},
	}}
	pod := old.DeepCopy()
	pod.Spec.InitContainers[0].Resources.Requests = res("cpu", "200m")
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: res("cpu", "500m", "memory", "1Gi"), Limits: res("cpu", "2")}
	counters := map[[3]string]prometheus.Counter{}
	before := map[[3]string]float64{}
	for _, l := range [][3]string{{"cpu", "requests", "increase"}, {"cpu", "requests", "decrease"},
		{"cpu", "limits", "add"}, {"memory", "limits", "remove"}, {"memory", "requests", "increase"}} {
		counters[l] = ContainerRequestedResizes.WithLabelValues(l[0], l[1], l[2])
		before[l] = counterOf(counters[l])
	}
	if !RecordContainerRequestedResizes(old, pod) {
		t.Fatal("no resize recorded")
	}
	for l, want := range map[[3]string]float64{
		{"cpu", "requests", "increase"}: 1, {"cpu", "requests", "decrease"}: 1, {"cpu", "limits", "add"}: 1,
		{"memory", "limits", "remove"}: 1, {"memory", "requests", "increase"}: 0,
	} {
		if got := counterOf(counters[l]) - before[l]; got != want {
			t.Errorf("%v counted %v, want %v", l, got, want)
		}
	}
	if RecordContainerRequestedResizes(pod, pod) || RecordContainerRequestedResizes(nil, pod) {
		t.Error("an unchanged pod, or one without a previous version, recorded a resize")
	}
}

func TestResizeGaugesAndDurations(t *testing.T) {
	high := int32(100000)
	pod := &v1.Pod{Spec: v1.PodSpec{Priority: &high}}
	SetPendingResizes([]PendingResize{{Reason: "Deferred", Pod: pod}, {Reason: "Deferred", Pod: pod}, {Reason: "Infeasible"}})
	if got := gaugeValue(PodPendingResizes.WithLabelValues("deferred", "high")); got != 2 {
		t.Errorf("deferred/high = %v, want 2", got)
	}
	if got := gaugeValue(PodPendingResizes.WithLabelValues("infeasible", "unknown")); got != 1 {
		t.Errorf("infeasible/unknown = %v, want 1", got)
	}
	SetPendingResizes(nil)
	if n := testutil.CollectAndCount(PodPendingResizes); n != 0 {
		t.Errorf("%d pending series left after all resizes went", n)
	}

	h := PodDeferredResizeDurationSeconds.WithLabelValues(ResizeAccepted, "high").(prometheus.Metric)
	count := func() uint64 {
		var m dto.Metric
		_ = h.Write(&m)
		return m.GetHistogram().GetSampleCount()
	}
	before := count()
	since := time.Now().Add(-time.Minute)
	deferred := &v1.PodCondition{Reason: v1.PodReasonDeferred, LastTransitionTime: metav1.NewTime(since)}
	ObserveDeferredResize(&v1.PodCondition{Reason: v1.PodReasonInfeasible, LastTransitionTime: metav1.NewTime(since)}, pod, ResizeAccepted, time.Now())
	ObserveDeferredResize(nil, pod, ResizeAccepted, time.Now())
	ObserveDeferredResize(deferred, pod, ResizeAccepted, time.Now())
	if got := count() - before; got != 1 {
		t.Errorf("%d deferred durations observed, want 1 (the Deferred condition only)", got)
	}

	ok := PodResizeDurationMilliseconds.WithLabelValues("true")
	okBefore := histogramCount(ok)
	ObservePodResize(time.Now().Add(-50*time.Millisecond), true)
	if got := histogramCount(ok) - okBefore; got != 1 {
		t.Errorf("%d successful resizes observed, want 1", got)
	}
}

func histogramCount(o prometheus.Observer) uint64 {
	var m dto.Metric
	_ = o.(prometheus.Metric).Write(&m)
	return m.GetHistogram().GetSampleCount()
}

func TestRecordUserNamespacedPodStart(t *testing.T) {
	total, errs := counterOf(StartedUserNamespacedPodsTotal), counterOf(StartedUserNamespacedPodsErrorsTotal)
	RecordUserNamespacedPodStart(false)
	RecordUserNamespacedPodStart(true)
	if got := counterOf(StartedUserNamespacedPodsTotal) - total; got != 2 {
		t.Errorf("started %v, want 2", got)
	}
	if got := counterOf(StartedUserNamespacedPodsErrorsTotal) - errs; got != 1 {
		t.Errorf("errors %v, want 1", got)
	}
}
