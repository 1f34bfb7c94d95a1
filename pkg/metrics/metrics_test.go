package metrics

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// upstreamMetric is a metric as upstream's kubelet v1.37.2 defines it
// (pkg/kubelet/metrics/metrics.go): the help text as exposed, with its stability prefix.
type upstreamMetric struct {
	c       prometheus.Collector
	name    string
	typ     dto.MetricType
	help    string
	labels  []string
	buckets []float64
}

var (
	counterT   = dto.MetricType_COUNTER
	gaugeT     = dto.MetricType_GAUGE
	histogramT = dto.MetricType_HISTOGRAM
	defBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	podStartup = []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}
)

// upstreamMetrics is the table the definitions are checked against, written from
// upstream's source.
var upstreamMetrics = []upstreamMetric{
	{NodeName, "kubelet_node_name", gaugeT, "[ALPHA] The node's name. The count is always 1.", []string{"node"}, nil},
	{ContainersPerPodCount, "kubelet_containers_per_pod_count", histogramT, "[ALPHA] The number of containers per pod.", nil, []float64{1, 2, 4, 8, 16}},
	{PodWorkerDuration, "kubelet_pod_worker_duration_seconds", histogramT, "[ALPHA] Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync", []string{"operation_type"}, defBuckets},
	{PodStartDuration, "kubelet_pod_start_duration_seconds", histogramT, "[ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run", nil, podStartup},
	{PodStartSLIDuration, "kubelet_pod_start_sli_duration_seconds", histogramT, "[ALPHA] Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch", nil, podStartup},
	{PodStartTotalDuration, "kubelet_pod_start_total_duration_seconds", histogramT, "[ALPHA] Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch", nil, podStartup},
	{FirstNetworkPodStartSLIDuration, "kubelet_first_network_pod_start_sli_duration_seconds", gaugeT, "[INTERNAL] Duration in seconds to start the first network pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch", nil, nil},
	{PodWorkerStartDuration, "kubelet_pod_worker_start_duration_seconds", histogramT, "[ALPHA] Duration in seconds from kubelet seeing a pod to starting a worker.", nil, defBuckets},
	{PodStatusSyncDuration, "kubelet_pod_status_sync_duration_seconds", histogramT, "[ALPHA] Duration in seconds to sync a pod status update. Measures time from detection of a change to pod status until the API is successfully updated for that pod, even if multiple intevening changes to pod status occur.", nil, []float64{0.010, 0.050, 0.100, 0.500, 1, 5, 10, 20, 30, 45, 60}},
	{PLEGRelistDuration, "kubelet_pleg_relist_duration_seconds", histogramT, "[ALPHA] Duration in seconds for relisting pods in PLEG.", nil, defBuckets},
	{PLEGDiscardEvents, "kubelet_pleg_discard_events", counterT, "[ALPHA] The number of discard events in PLEG.", nil, nil},
	{PLEGRelistInterval, "kubelet_pleg_relist_interval_seconds", histogramT, "[ALPHA] Interval in seconds between relisting in PLEG.", nil, defBuckets},
	{PLEGLastSeen, "kubelet_pleg_last_seen_seconds", gaugeT, "[ALPHA] Timestamp in seconds when PLEG was last seen active.", nil, nil},
	{Evictions, "kubelet_evictions", counterT, "[ALPHA] Cumulative number of pod evictions by eviction signal", []string{"eviction_signal"}, nil},
	{RunningPodCount, "kubelet_running_pods", gaugeT, "[ALPHA] Number of pods that have a running pod sandbox", nil, nil},
	{RunningContainerCount, "kubelet_running_containers", gaugeT, "[ALPHA] Number of containers currently running", []string{"container_state"}, nil},
	{DesiredPodCount, "kubelet_desired_pods", gaugeT, "[ALPHA] The number of pods the kubelet is being instructed to run. static is true if the pod is not from the apiserver.", []string{"static"}, nil},
	{ActivePodCount, "kubelet_active_pods", gaugeT, "[ALPHA] The number of pods the kubelet considers active and which are being considered when admitting new pods. static is true if the pod is not from the apiserver.", []string{"static"}, nil},
	{MirrorPodCount, "kubelet_mirror_pods", gaugeT, "[ALPHA] The number of mirror pods the kubelet will try to create (one per admitted static pod)", nil, nil},
	{OrphanedRuntimePodTotal, "kubelet_orphaned_runtime_pods_total", counterT, "[ALPHA] Number of pods that have been detected in the container runtime without being already known to the pod worker. This typically indicates the kubelet was restarted while a pod was force deleted in the API or in the local configuration, which is unusual.", nil, nil},
	{RestartedPodTotal, "kubelet_restarted_pods_total", counterT, "[ALPHA] Number of pods that have been restarted because they were deleted and recreated with the same UID while the kubelet was watching them (common for static pods, extremely uncommon for API pods)", []string{"static"}, nil},
	{ManagedEphemeralContainers, "kubelet_managed_ephemeral_containers", gaugeT, "[ALPHA] Current number of ephemeral containers in pods managed by this kubelet.", nil, nil},
	{StartedPodsTotal, "kubelet_started_pods_total", counterT, "[ALPHA] Cumulative number of pods started", nil, nil},
	{StartedPodsErrorsTotal, "kubelet_started_pods_errors_total", counterT, "[ALPHA] Cumulative number of errors when starting pods", nil, nil},
	{StartedContainersTotal, "kubelet_started_containers_total", counterT, "[ALPHA] Cumulative number of containers started", []string{"container_type"}, nil},
	{TerminatedContainersTotal, "kubelet_terminated_containers_total", counterT, "[ALPHA] Cumulative number of container terminations.", []string{"container_type", "exit_code", "reason"}, nil},
	{StartedContainersErrorsTotal, "kubelet_started_containers_errors_total", counterT, "[ALPHA] Cumulative number of errors when starting containers", []string{"container_type", "code"}, nil},
	{OrphanPodCleanedVolumes, "kubelet_orphan_pod_cleaned_volumes", gaugeT, "[ALPHA] The total number of orphaned Pods whose volumes were cleaned in the last periodic sweep.", nil, nil},
	{OrphanPodCleanedVolumesErrors, "kubelet_orphan_pod_cleaned_volumes_errors", gaugeT, "[ALPHA] The number of orphaned Pods whose volumes failed to be cleaned in the last periodic sweep.", nil, nil},
	{LifecycleHandlerHTTPFallbacks, "kubelet_lifecycle_handler_http_fallbacks_total", counterT, "[ALPHA] The number of times lifecycle handlers successfully fell back to http from https.", nil, nil},
	{LifecycleHandlerSleepTerminated, "kubelet_sleep_action_terminated_early_total", counterT, "[ALPHA] The number of times lifecycle sleep handler got terminated before it finishes", nil, nil},
	{ImagePullDuration, "kubelet_image_pull_duration_seconds", histogramT, "[ALPHA] Duration in seconds to pull an image.", []string{"image_size_in_bytes"}, []float64{1, 5, 10, 20, 30, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}},
	{CgroupVersion, "kubelet_cgroup_version", gaugeT, "[ALPHA] cgroup version on the hosts.", nil, nil},
	{AdmissionRejectionsTotal, "kubelet_admission_rejections_total", counterT, "[ALPHA] Cumulative number pod admission rejections by the Kubelet.", []string{"reason"}, nil},
	{ImageVolumeRequestedTotal, "kubelet_image_volume_requested_total", counterT, "[BETA] Number of requested image volumes.", nil, nil},
	{ImageVolumeMountedSucceedTotal, "kubelet_image_volume_mounted_succeed_total", counterT, "[BETA] Number of successful image volume mounts.", nil, nil},
	{ImageVolumeMountedErrorsTotal, "kubelet_image_volume_mounted_errors_total", counterT, "[BETA] Number of failed image volume mounts.", nil, nil},
	{WorkingPodCount, "kubelet_working_pods", gaugeT, "[ALPHA] Number of pods the kubelet is actually running, broken down by lifecycle phase, whether the pod is desired, orphaned, or runtime only (also orphaned), and whether the pod is static. An orphaned pod has been removed from local configuration or force deleted in the API and consumes resources that are not otherwise visible.", []string{"lifecycle", "config", "static"}, nil},
	{EvictionStatsAge, "kubelet_eviction_stats_age_seconds", histogramT, "[ALPHA] Time between when stats are collected, and when pod is evicted based on those stats by eviction signal", []string{"eviction_signal"}, defBuckets},
	{Preemptions, "kubelet_preemptions", counterT, "[ALPHA] Cumulative number of pod preemptions by preemption resource", []string{"preemption_signal"}, nil},
	{NodeStartupPreKubeletDuration, "kubelet_node_startup_pre_kubelet_duration_seconds", gaugeT, "[ALPHA] Duration in seconds of node startup before kubelet starts.", nil, nil},
	{NodeStartupPreRegistrationDuration, "kubelet_node_startup_pre_registration_duration_seconds", gaugeT, "[ALPHA] Duration in seconds of node startup before registration.", nil, nil},
	{NodeStartupRegistrationDuration, "kubelet_node_startup_registration_duration_seconds", gaugeT, "[ALPHA] Duration in seconds of node startup during registration.", nil, nil},
	{NodeStartupPostRegistrationDuration, "kubelet_node_startup_post_registration_duration_seconds", gaugeT, "[ALPHA] Duration in seconds of node startup after registration.", nil, nil},
	{NodeStartupDuration, "kubelet_node_startup_duration_seconds", gaugeT, "[ALPHA] Duration in seconds of node startup in total.", nil, nil},
	{StartedHostProcessContainersTotal, "kubelet_started_host_process_containers_total", counterT, "[ALPHA] Cumulative number of hostprocess containers started. This metric will only be collected on Windows.", []string{"container_type"}, nil},
	{StartedHostProcessContainersErrorsTotal, "kubelet_started_host_process_containers_errors_total", counterT, "[ALPHA] Cumulative number of errors when starting hostprocess containers. This metric will only be collected on Windows.", []string{"container_type", "code"}, nil},
	{StartedUserNamespacedPodsTotal, "kubelet_started_user_namespaced_pods_total", counterT, "[ALPHA] Cumulative number of pods with user namespaces started. This metric will only be collected on Linux.", nil, nil},
	{StartedUserNamespacedPodsErrorsTotal, "kubelet_started_user_namespaced_pods_errors_total", counterT, "[ALPHA] Cumulative number of errors when starting pods with user namespaces. This metric will only be collected on Linux.", nil, nil},
	{ContainerRequestedResizes, "kubelet_container_requested_resizes_total", counterT, "[ALPHA] Number of requested resizes, counted at the container level. Different resources on the same container are counted separately. The 'requirement' label refers to 'memory' or 'limits'; the 'operation' label can be one of 'add', 'remove', 'increase' or 'decrease'.", []string{"resource", "requirement", "operation"}, nil},
	{PodResizeDurationMilliseconds, "kubelet_pod_resize_duration_milliseconds", histogramT, "[ALPHA] Duration in milliseconds to actuate a pod resize", []string{"success"}, []float64{10, 50, 100, 500, 1000, 2000, 5000, 10000, 20000, 30000, 60000, 120000, 300000, 600000}},
	{PodPendingResizes, "kubelet_pod_pending_resizes", gaugeT, "[ALPHA] Number of pending resizes for pods. Label 'priority_bucket' classifies the pod priority (system-critical: >=2000000000, high: 100000..1999999999, medium: 1..99999, normal: 0/default, low: -999..-1, very-low: <=-1000, unknown: nil pod). Label 'reason' describes the state (deferred, infeasible).", []string{"reason", "priority_bucket"}, nil},
	{PodInfeasibleResizes, "kubelet_pod_infeasible_resizes_total", counterT, "[ALPHA] Number of infeasible resizes for pods.", []string{"reason_detail"}, nil},
	{PodInProgressResizes, "kubelet_pod_in_progress_resizes", gaugeT, "[ALPHA] Number of in-progress resizes for pods.", nil, nil},
	{PodDeferredAcceptedResizes, "kubelet_pod_deferred_accepted_resizes_total", counterT, "[ALPHA] Cumulative number of resizes that were accepted after being deferred.", []string{"retry_trigger"}, nil},
	{PodDeferredResizeDurationSeconds, "kubelet_pod_deferred_resize_duration_seconds", histogramT, "[ALPHA] Duration in seconds that a pod resize remains deferred before completion. Label 'priority_bucket' classifies the pod priority (system-critical: >=2000000000, high: 100000..1999999999, medium: 1..99999, normal: 0/default, low: -999..-1, very-low: <=-1000, unknown: nil pod). Label 'resolution' describes how the deferred resize was resolved (accepted, reverted, terminated).", []string{"resolution", "priority_bucket"}, []float64{5, 10, 15, 20, 30, 45, 60, 90, 120, 150, 180, 300, 600, 1200, 1800, 3600}},
}

// nodeletMetrics are nodelet's own (the start-up trace); they are checked for their
// shape only.
var nodeletMetrics = []upstreamMetric{
	{c: PodStartupPhaseDuration, name: "nodelet_pod_startup_phase_duration_seconds", typ: histogramT, labels: []string{"phase"}},
	{c: PodStartupDuration, name: "nodelet_pod_startup_duration_seconds", typ: histogramT},
}

// TestDefinitionsMatchUpstream gathers each metric (with one series, for vectors) and
// compares its name, type, help, labels and buckets with upstream's.
func TestDefinitionsMatchUpstream(t *testing.T) {
	for _, want := range append(slices.Clone(upstreamMetrics), nodeletMetrics...) {
		t.Run(want.name, func(t *testing.T) {
			mf := gatherOne(t, want.c, len(want.labels))
			if mf.GetName() != want.name || mf.GetType() != want.typ {
				t.Fatalf("got %s of type %v, want %s of type %v", mf.GetName(), mf.GetType(), want.name, want.typ)
			}
			if want.help != "" && mf.GetHelp() != want.help {
				t.Errorf("help:\n got %q\nwant %q", mf.GetHelp(), want.help)
			}
			m := mf.GetMetric()[0]
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
			}
			if !slices.Equal(labels, sortedCopy(want.labels)) {
				t.Errorf("labels %v, want %v", labels, want.labels)
			}
			if want.typ == histogramT && want.buckets != nil {
				var bounds []float64
				for _, b := range m.GetHistogram().GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
				}
				if !slices.Equal(bounds, want.buckets) {
					t.Errorf("buckets %v, want %v", bounds, want.buckets)
				}
			}
		})
	}
}

// TestEveryCollectorIsInTheTable keeps the table complete: each registered collector of
// this package has a row.
func TestEveryCollectorIsInTheTable(t *testing.T) {
	rows := map[prometheus.Collector]bool{}
	for _, m := range append(slices.Clone(upstreamMetrics), nodeletMetrics...) {
		rows[m.c] = true
	}
	for _, c := range kubeletCollectors() {
		if !rows[c] {
			t.Errorf("collector %v has no row in the table", describe(c))
		}
	}
	if len(rows) != len(kubeletCollectors()) {
		t.Errorf("%d rows for %d collectors", len(rows), len(kubeletCollectors()))
	}
}

// gatherOne registers c alone, gives a vector one series (removed afterwards) and
// gathers it.
func gatherOne(t *testing.T, c prometheus.Collector, nLabels int) *dto.MetricFamily {
	t.Helper()
	values := make([]string, nLabels)
	for i := range values {
		values[i] = "x"
	}
	switch v := c.(type) {
	case *prometheus.CounterVec:
		v.WithLabelValues(values...)
		t.Cleanup(func() { v.DeleteLabelValues(values...) })
	case *prometheus.GaugeVec:
		v.WithLabelValues(values...)
		t.Cleanup(func() { v.DeleteLabelValues(values...) })
	case *prometheus.HistogramVec:
		v.WithLabelValues(values...)
		t.Cleanup(func() { v.DeleteLabelValues(values...) })
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) == 0 {
		t.Fatalf("gathered %v (%v), want one family with a series", mfs, err)
	}
	return mfs[0]
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func describe(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc, 1)
	c.Describe(ch)
	return (<-ch).String()
}

func TestImageSizeBucket(t *testing.T) {
	for size, want := range map[uint64]string{
		0: "N/A", 1: "0-10MB", 10 << 20: "0-10MB", 10<<20 + 1: "10MB-100MB",
		700 << 20: "500MB-1GB", 3 << 30: "1GB-5GB", 200 << 30: "GT100GB",
	} {
		if got := ImageSizeBucket(size); got != want {
			t.Errorf("ImageSizeBucket(%d) = %q, want %q", size, got, want)
		}
	}
}

func TestRecordAdmissionRejection(t *testing.T) {
	for reason, label := range map[string]string{
		"OutOfcpu": "OutOfcpu", "OutOfnvidia.com/gpu": "OutOfExtendedResources",
		"NodeAffinity": "Other", "SysctlForbidden": "SysctlForbidden",
	} {
		c := AdmissionRejectionsTotal.WithLabelValues(label)
		before := counterValue(c)
		RecordAdmissionRejection(reason)
		if got := counterValue(c) - before; got != 1 {
			t.Errorf("reason %q: label %q counted %v times, want 1", reason, label, got)
		}
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}
