// Package metrics defines the kubelet_* metrics nodelet exposes on /metrics, with
// upstream's names, help texts (stability prefix included), labels and buckets, so that
// existing dashboards and alerts keep working, and builds the /metrics and
// /metrics/probes registries and handlers.
//
// The metrics are package-wide, as upstream's are: there is one kubelet per process, and
// the packages that observe them (pod workers, PLEG, runtime manager, status manager, the
// loop) then need no wiring. The runtime client (pkg/runtime/cri), the prober (pkg/pod/prober) and
// the client certificate (pkg/api/kubeclient) keep their own metrics and register them on the
// registries built here.
package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

const kubeletSubsystem = "kubelet"

// Label values of container_type, as upstream.
const (
	Container          = "container"
	InitContainer      = "init_container"
	EphemeralContainer = "ephemeral_container"
)

// alpha, stable and internal prefix a help text with its stability level, as upstream's
// component-base metrics do when they are registered.
func alpha(help string) string    { return "[ALPHA] " + help }
func beta(help string) string     { return "[BETA] " + help }
func stable(help string) string   { return "[STABLE] " + help }
func internal(help string) string { return "[INTERNAL] " + help }

var (
	// podStartupDurationBuckets are upstream's hand-picked pod start-up buckets.
	podStartupDurationBuckets = []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}
	imagePullDurationBuckets  = []float64{1, 5, 10, 20, 30, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}
	podStatusSyncBuckets      = []float64{0.010, 0.050, 0.100, 0.500, 1, 5, 10, 20, 30, 45, 60}
	// podResizeDurationBuckets (milliseconds) and podDeferredResizeDurationBuckets
	// (seconds) are upstream's in-place resize buckets.
	podResizeDurationBuckets         = []float64{10, 50, 100, 500, 1000, 2000, 5000, 10000, 20000, 30000, 60000, 120000, 300000, 600000}
	podDeferredResizeDurationBuckets = []float64{5, 10, 15, 20, 30, 45, 60, 90, 120, 150, 180, 300, 600, 1200, 1800, 3600}
)

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Subsystem: kubeletSubsystem, Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: kubeletSubsystem, Name: name, Help: help}, labels)
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: kubeletSubsystem, Name: name, Help: help})
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: kubeletSubsystem, Name: name, Help: help}, labels)
}

func histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: kubeletSubsystem, Name: name, Help: help, Buckets: buckets})
}

func histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: kubeletSubsystem, Name: name, Help: help, Buckets: buckets}, labels)
}

// The pod workers and the loop (upstream's pod_workers.go and kubelet.go).
var (
	NodeName = gaugeVec("node_name", alpha("The node's name. The count is always 1."), "node")

	ContainersPerPodCount = histogram("containers_per_pod_count",
		alpha("The number of containers per pod."), prometheus.ExponentialBuckets(1, 2, 5))

	PodWorkerDuration = histogramVec("pod_worker_duration_seconds",
		alpha("Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync"),
		prometheus.DefBuckets, "operation_type")

	PodWorkerStartDuration = histogram("pod_worker_start_duration_seconds",
		alpha("Duration in seconds from kubelet seeing a pod to starting a worker."), prometheus.DefBuckets)

	PodStartDuration = histogram("pod_start_duration_seconds",
		alpha("Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run"),
		podStartupDurationBuckets)

	// PodStartSLIDuration and PodStartTotalDuration are vectors without labels, as upstream:
	// they show no series until the first API pod has started.
	PodStartSLIDuration = histogramVec("pod_start_sli_duration_seconds",
		alpha("Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch"),
		podStartupDurationBuckets)

	PodStartTotalDuration = histogramVec("pod_start_total_duration_seconds",
		alpha("Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch"),
		podStartupDurationBuckets)

	FirstNetworkPodStartSLIDuration = gauge("first_network_pod_start_sli_duration_seconds",
		internal("Duration in seconds to start the first network pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch"))

	AdmissionRejectionsTotal = counterVec("admission_rejections_total",
		alpha("Cumulative number pod admission rejections by the Kubelet."), "reason")
)

// Housekeeping (upstream's HandlePodCleanups and pod manager).
var (
	DesiredPodCount = gaugeVec("desired_pods",
		alpha("The number of pods the kubelet is being instructed to run. static is true if the pod is not from the apiserver."), "static")

	ActivePodCount = gaugeVec("active_pods",
		alpha("The number of pods the kubelet considers active and which are being considered when admitting new pods. static is true if the pod is not from the apiserver."), "static")

	MirrorPodCount = gauge("mirror_pods",
		alpha("The number of mirror pods the kubelet will try to create (one per admitted static pod)"))

	OrphanedRuntimePodTotal = counter("orphaned_runtime_pods_total",
		alpha("Number of pods that have been detected in the container runtime without being already known to the pod worker. This typically indicates the kubelet was restarted while a pod was force deleted in the API or in the local configuration, which is unusual."))

	RestartedPodTotal = counterVec("restarted_pods_total",
		alpha("Number of pods that have been restarted because they were deleted and recreated with the same UID while the kubelet was watching them (common for static pods, extremely uncommon for API pods)"), "static")

	ManagedEphemeralContainers = gauge("managed_ephemeral_containers",
		alpha("Current number of ephemeral containers in pods managed by this kubelet."))

	// WorkingPodCount is set by housekeeping from the pod workers (RecordWorkingPods).
	WorkingPodCount = gaugeVec("working_pods",
		alpha("Number of pods the kubelet is actually running, broken down by lifecycle phase, whether the pod is desired, orphaned, or runtime only (also orphaned), and whether the pod is static. An orphaned pod has been removed from local configuration or force deleted in the API and consumes resources that are not otherwise visible."),
		"lifecycle", "config", "static")

	OrphanPodCleanedVolumes = gauge("orphan_pod_cleaned_volumes",
		alpha("The total number of orphaned Pods whose volumes were cleaned in the last periodic sweep."))

	OrphanPodCleanedVolumesErrors = gauge("orphan_pod_cleaned_volumes_errors",
		alpha("The number of orphaned Pods whose volumes failed to be cleaned in the last periodic sweep."))
)

// The PLEG (upstream's pleg/generic.go).
var (
	PLEGRelistDuration = histogram("pleg_relist_duration_seconds",
		alpha("Duration in seconds for relisting pods in PLEG."), prometheus.DefBuckets)

	PLEGDiscardEvents = counter("pleg_discard_events", alpha("The number of discard events in PLEG."))

	PLEGRelistInterval = histogram("pleg_relist_interval_seconds",
		alpha("Interval in seconds between relisting in PLEG."), prometheus.DefBuckets)

	PLEGLastSeen = gauge("pleg_last_seen_seconds", alpha("Timestamp in seconds when PLEG was last seen active."))

	RunningPodCount = gauge("running_pods", alpha("Number of pods that have a running pod sandbox"))

	RunningContainerCount = gaugeVec("running_containers", alpha("Number of containers currently running"), "container_state")
)

// The runtime manager and the image manager (upstream's kuberuntime, lifecycle, images).
var (
	StartedPodsTotal = counter("started_pods_total", alpha("Cumulative number of pods started"))

	StartedPodsErrorsTotal = counter("started_pods_errors_total", alpha("Cumulative number of errors when starting pods"))

	StartedContainersTotal = counterVec("started_containers_total",
		alpha("Cumulative number of containers started"), "container_type")

	StartedContainersErrorsTotal = counterVec("started_containers_errors_total",
		alpha("Cumulative number of errors when starting containers"), "container_type", "code")

	// StartedHostProcessContainersTotal and StartedHostProcessContainersErrorsTotal count
	// Windows HostProcess containers: upstream registers them on Linux too and never
	// counts them there, and so does nodelet.
	StartedHostProcessContainersTotal = counterVec("started_host_process_containers_total",
		alpha("Cumulative number of hostprocess containers started. This metric will only be collected on Windows."), "container_type")

	StartedHostProcessContainersErrorsTotal = counterVec("started_host_process_containers_errors_total",
		alpha("Cumulative number of errors when starting hostprocess containers. This metric will only be collected on Windows."), "container_type", "code")

	// StartedUserNamespacedPodsTotal and StartedUserNamespacedPodsErrorsTotal count the
	// sandboxes created for pods with hostUsers: false, and those of their syncs that
	// failed (RecordUserNamespacedPodStart). Upstream registers them with
	// UserNamespacesSupport, GA and locked on in v1.37.
	StartedUserNamespacedPodsTotal = counter("started_user_namespaced_pods_total",
		alpha("Cumulative number of pods with user namespaces started. This metric will only be collected on Linux."))

	StartedUserNamespacedPodsErrorsTotal = counter("started_user_namespaced_pods_errors_total",
		alpha("Cumulative number of errors when starting pods with user namespaces. This metric will only be collected on Linux."))

	LifecycleHandlerHTTPFallbacks = counter("lifecycle_handler_http_fallbacks_total",
		alpha("The number of times lifecycle handlers successfully fell back to http from https."))

	LifecycleHandlerSleepTerminated = counter("sleep_action_terminated_early_total",
		alpha("The number of times lifecycle sleep handler got terminated before it finishes"))

	ImagePullDuration = histogramVec("image_pull_duration_seconds",
		alpha("Duration in seconds to pull an image."), imagePullDurationBuckets, "image_size_in_bytes")

	// ImageVolumeRequestedTotal, ImageVolumeMountedSucceedTotal and
	// ImageVolumeMountedErrorsTotal count image volumes (KEP-4639) as containers start;
	// upstream registers them with ImageVolume, GA and locked on in v1.37.
	ImageVolumeRequestedTotal = counter("image_volume_requested_total", beta("Number of requested image volumes."))

	ImageVolumeMountedSucceedTotal = counter("image_volume_mounted_succeed_total",
		beta("Number of successful image volume mounts."))

	ImageVolumeMountedErrorsTotal = counter("image_volume_mounted_errors_total",
		beta("Number of failed image volume mounts."))
)

// The status manager (upstream's status_manager.go).
var (
	PodStatusSyncDuration = histogram("pod_status_sync_duration_seconds",
		alpha("Duration in seconds to sync a pod status update. Measures time from detection of a change to pod status until the API is successfully updated for that pod, even if multiple intevening changes to pod status occur."),
		podStatusSyncBuckets)

	TerminatedContainersTotal = counterVec("terminated_containers_total",
		alpha("Cumulative number of container terminations."), "container_type", "exit_code", "reason")
)

// The node.
var (
	CgroupVersion = gauge("cgroup_version", alpha("cgroup version on the hosts."))

	// Evictions is observed by the eviction manager; like upstream it is always registered
	// and shows no series until a pod has been evicted.
	Evictions = counterVec("evictions", alpha("Cumulative number of pod evictions by eviction signal"), "eviction_signal")

	// EvictionStatsAge is observed by the eviction manager when it is about to evict: for
	// each threshold met, how old the stats it is acting on are.
	EvictionStatsAge = histogramVec("eviction_stats_age_seconds",
		alpha("Time between when stats are collected, and when pod is evicted based on those stats by eviction signal"),
		prometheus.DefBuckets, "eviction_signal")

	// Preemptions counts upstream's admission preemptions (pods evicted to make room for a
	// critical pod). nodelet does not preempt: pkg/pod/admission keeps a critical pod's
	// resource failure instead. The family is registered all the same, as upstream
	// registers it, and has no series.
	Preemptions = counterVec("preemptions",
		alpha("Cumulative number of pod preemptions by preemption resource"), "preemption_signal")

	// The node start-up durations are set once, by the node status controller's
	// registration (NodeStartupTracker).
	NodeStartupPreKubeletDuration = gauge("node_startup_pre_kubelet_duration_seconds",
		alpha("Duration in seconds of node startup before kubelet starts."))
	NodeStartupPreRegistrationDuration = gauge("node_startup_pre_registration_duration_seconds",
		alpha("Duration in seconds of node startup before registration."))
	NodeStartupRegistrationDuration = gauge("node_startup_registration_duration_seconds",
		alpha("Duration in seconds of node startup during registration."))
	NodeStartupPostRegistrationDuration = gauge("node_startup_post_registration_duration_seconds",
		alpha("Duration in seconds of node startup after registration."))
	NodeStartupDuration = gauge("node_startup_duration_seconds",
		alpha("Duration in seconds of node startup in total."))
)

// In-place pod resize (upstream's kubelet.go, allocation and status managers, runtime
// manager). Upstream registers them with InPlacePodVerticalScaling, GA and locked on.
var (
	// ContainerRequestedResizes counts, when an admitted pod's spec changes, each CPU and
	// memory request and limit of a container that changed.
	ContainerRequestedResizes = counterVec("container_requested_resizes_total",
		alpha("Number of requested resizes, counted at the container level. Different resources on the same container are counted separately. The 'requirement' label refers to 'memory' or 'limits'; the 'operation' label can be one of 'add', 'remove', 'increase' or 'decrease'."),
		"resource", "requirement", "operation")

	// PodResizeDurationMilliseconds is observed by the runtime manager around actuating a
	// resize (ObservePodResize).
	PodResizeDurationMilliseconds = histogramVec("pod_resize_duration_milliseconds",
		alpha("Duration in milliseconds to actuate a pod resize"), podResizeDurationBuckets, "success")

	PodPendingResizes = gaugeVec("pod_pending_resizes",
		alpha("Number of pending resizes for pods. Label 'priority_bucket' classifies the pod priority (system-critical: >=2000000000, high: 100000..1999999999, medium: 1..99999, normal: 0/default, low: -999..-1, very-low: <=-1000, unknown: nil pod). Label 'reason' describes the state (deferred, infeasible)."),
		"reason", "priority_bucket")

	PodInfeasibleResizes = counterVec("pod_infeasible_resizes_total",
		alpha("Number of infeasible resizes for pods."), "reason_detail")

	PodInProgressResizes = gauge("pod_in_progress_resizes", alpha("Number of in-progress resizes for pods."))

	PodDeferredAcceptedResizes = counterVec("pod_deferred_accepted_resizes_total",
		alpha("Cumulative number of resizes that were accepted after being deferred."), "retry_trigger")

	PodDeferredResizeDurationSeconds = histogramVec("pod_deferred_resize_duration_seconds",
		alpha("Duration in seconds that a pod resize remains deferred before completion. Label 'priority_bucket' classifies the pod priority (system-critical: >=2000000000, high: 100000..1999999999, medium: 1..99999, normal: 0/default, low: -999..-1, very-low: <=-1000, unknown: nil pod). Label 'resolution' describes how the deferred resize was resolved (accepted, reverted, terminated)."),
		podDeferredResizeDurationBuckets, "resolution", "priority_bucket")
)

// nodelet's per-pod start-up trace (pkg/metrics/podstartup); not upstream's.
var (
	PodStartupPhaseDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "nodelet", Name: "pod_startup_phase_duration_seconds",
		Help: "Time in seconds a pod's start-up spent in each phase (admission, volumes, sandbox, " +
			"image_pull, container_create, container_start, init_containers, readiness), for pods whose sandbox nodelet created.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 16),
	}, []string{"phase"})

	PodStartupDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "nodelet", Name: "pod_startup_duration_seconds",
		Help: "Duration in seconds from nodelet first seeing a pod to the pod being ready (or finished " +
			"without becoming ready), for pods whose sandbox nodelet created.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 16),
	})
)

// kubeletCollectors are the metrics above, in upstream's registration order.
func kubeletCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		FirstNetworkPodStartSLIDuration, NodeName, PodWorkerDuration, PodStartDuration,
		PodStartSLIDuration, PodStartTotalDuration, ImagePullDuration,
		NodeStartupPreKubeletDuration, NodeStartupPreRegistrationDuration, NodeStartupRegistrationDuration,
		NodeStartupPostRegistrationDuration, NodeStartupDuration,
		PodWorkerStartDuration, PodStatusSyncDuration, ContainersPerPodCount,
		PLEGRelistDuration, PLEGDiscardEvents, PLEGRelistInterval, PLEGLastSeen,
		Evictions, EvictionStatsAge, Preemptions, RunningContainerCount, RunningPodCount,
		DesiredPodCount, ActivePodCount, MirrorPodCount, WorkingPodCount, OrphanedRuntimePodTotal, RestartedPodTotal,
		ManagedEphemeralContainers,
		StartedUserNamespacedPodsTotal, StartedUserNamespacedPodsErrorsTotal,
		StartedPodsTotal, StartedPodsErrorsTotal, StartedContainersTotal, TerminatedContainersTotal,
		StartedContainersErrorsTotal, StartedHostProcessContainersTotal, StartedHostProcessContainersErrorsTotal,
		OrphanPodCleanedVolumes, OrphanPodCleanedVolumesErrors,
		LifecycleHandlerHTTPFallbacks, LifecycleHandlerSleepTerminated, CgroupVersion,
		AdmissionRejectionsTotal,
		ImageVolumeRequestedTotal, ImageVolumeMountedSucceedTotal, ImageVolumeMountedErrorsTotal,
		ContainerRequestedResizes, PodResizeDurationMilliseconds, PodPendingResizes, PodInfeasibleResizes,
		PodInProgressResizes, PodDeferredAcceptedResizes, PodDeferredResizeDurationSeconds,
		PodStartupPhaseDuration, PodStartupDuration,
	}
}

// imageSizeBuckets label kubelet_image_pull_duration_seconds by image size (upstream's
// GetImageSizeBucket): the label of the highest lower bound the size exceeds.
var imageSizeBuckets = []struct {
	lowerBound uint64
	label      string
}{
	{0, "0-10MB"},
	{10 << 20, "10MB-100MB"},
	{100 << 20, "100MB-500MB"},
	{500 << 20, "500MB-1GB"},
	{1 << 30, "1GB-5GB"},
	{5 << 30, "5GB-10GB"},
	{10 << 30, "10GB-20GB"},
	{20 << 30, "20GB-30GB"},
	{30 << 30, "30GB-40GB"},
	{40 << 30, "40GB-60GB"},
	{60 << 30, "60GB-100GB"},
	{100 << 30, "GT100GB"},
}

// ImageSizeBucket is the image_size_in_bytes label for an image of size bytes ("N/A"
// when the size is unknown).
func ImageSizeBucket(size uint64) string {
	if size == 0 {
		return "N/A"
	}
	for i := len(imageSizeBuckets) - 1; i >= 0; i-- {
		if size > imageSizeBuckets[i].lowerBound {
			return imageSizeBuckets[i].label
		}
	}
	return ""
}

// StaticLabel is the value of the static label: "true" for pods that do not come from the
// API server, "" for those that do.
func StaticLabel(static bool) string {
	if static {
		return "true"
	}
	return ""
}

// admissionRejectionReasons are the reasons kubelet_admission_rejections_total names;
// others count as OutOfExtendedResources ("OutOf…") or Other, as upstream keeps the
// label's cardinality bounded.
var admissionRejectionReasons = map[string]bool{
	"AppArmor": true, "PodOSSelectorNodeLabelDoesNotMatch": true, "PodOSNotSupported": true,
	"InvalidNodeInfo": true, "InitContainerRestartPolicyForbidden": true,
	"SupplementalGroupsPolicyNotSupported": true, "UnexpectedAdmissionError": true,
	"UnknownReason": true, "UnexpectedPredicateFailureType": true,
	"OutOfcpu": true, "OutOfmemory": true, "OutOfephemeral-storage": true, "OutOfpods": true,
	"PodLevelResourcesNotSupported": true, "PodFeatureUnsupported": true,
	"node(s) had taints that the pod didn't tolerate": true, "Evicted": true,
	"SysctlForbidden": true, "TopologyAffinityError": true, "NodeShutdown": true,
	"VolumeAttachmentLimitExceeded": true,
}

// RecordAdmissionRejection counts a pod refused by admission with reason.
func RecordAdmissionRejection(reason string) {
	switch {
	case admissionRejectionReasons[reason]:
	case strings.HasPrefix(reason, "OutOf"):
		reason = "OutOfExtendedResources"
	default:
		reason = "Other"
	}
	AdmissionRejectionsTotal.WithLabelValues(reason).Inc()
}
