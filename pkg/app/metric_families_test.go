package app

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/pkg/node/deviceplugin"
	"github.com/nodelet/nodelet/pkg/node/nodestatus"
	"github.com/nodelet/nodelet/pkg/node/pluginwatcher"
	"github.com/nodelet/nodelet/pkg/node/volumes/csi"
)

// upstreamFamiliesFile lists the metric families upstream's kubelet v1.37.2 registers on
// /metrics; its first line says how the list was derived.
const upstreamFamiliesFile = "testdata/upstream-kubelet-v1.37.2-metric-families.txt"

// Why a family is on one side only.
const (
	noPodsAPI         = "nodelet serves no PodsAPI gRPC endpoint (upstream's pods API for node-local clients)"
	noResourceAlign   = "nodelet aligns no compute resources (no CPU, memory or topology manager)"
	noPodCertificates = "nodelet does not project pod certificates (podCertificate volume sources)"
	noVolumeManager   = "nodelet sets volumes up in the pod's sync, without upstream's volume manager, " +
		"operation executor, reconstruction or SELinux mount checks: nothing feeds these"
	noPullIntents     = "nodelet's image manager keeps no pull intents or pulled-image records and does not count image requests yet"
	noCgroupTiming    = "nodelet's container manager does not time its cgroup operations yet"
	noPodRelistTiming = "nodelet's PLEG does not time the relisting of a single pod yet"
	noMemoryQoSGauges = "nodelet applies MemoryQoS but does not sum memory.min/memory.low over the node's pods yet"
	noPodLevelAdmit   = "nodelet does not count admitted pods by resource configuration yet"
	noVolumeTiming    = "nodelet's stats provider does not time its volume usage walks yet"
	noMetricsProvider = "nodelet's stats come neither from cAdvisor nor from CRI stats alone, the two values upstream's gauge names"
	noWebSocketCount  = "nodelet's streaming handlers do not count WebSocket requests yet"
	noStabilityFrame  = "component-base's metrics stability framework bookkeeping: nodelet registers plain client_golang " +
		"collectors, with no --disabled-metrics or --show-hidden-metrics-for-version to count"
	noComponentBase   = "component-base's build information, feature-gate and compatibility-version registries, which nodelet does not link"
	noClientGoMetrics = "client-go's request and transport metrics: nodelet does not install component-base's client-go metrics adapter"
	noWorkqueues      = "nodelet uses no client-go workqueue"
	apiserverLinked   = "registered by k8s.io/apiserver packages (generic server, admission, audit, storage, egress selector, " +
		"validation) that upstream's kubelet binary links and nodelet does not: they never count anything in a kubelet"
	ownAuth = "nodelet's kubelet API authenticates and authorizes with its own TokenReview/SubjectAccessReview clients " +
		"(pkg/api/kubeletserver), which do not report these apiserver authn/authz metrics"
	nodeletOwn = "nodelet's own per-pod start-up trace (pkg/metrics/podstartup), not upstream's"
)

// familyExceptions are the families that may be on one side only, each with its reason.
var familyExceptions = exceptions(
	except(noPodsAPI, "kubelet_pod_watch_events_dropped_total", "kubelet_pod_requests_total", "kubelet_pod_requests_list_total",
		"kubelet_pod_requests_get_total", "kubelet_pod_requests_watch_total"),
	except(noResourceAlign, "kubelet_container_aligned_compute_resources_count", "kubelet_container_aligned_compute_resources_failure_count"),
	except(noPodCertificates, "kubelet_podcertificate_states"),
	except(noVolumeManager, "volume_manager_total_volumes", "reconstruct_volume_operations_total",
		"reconstruct_volume_operations_errors_total", "force_cleaned_failed_volume_operations_total",
		"force_cleaned_failed_volume_operation_errors_total", "volume_manager_selinux_container_errors_total",
		"volume_manager_selinux_container_warnings_total", "volume_manager_selinux_pod_context_mismatch_errors_total",
		"volume_manager_selinux_pod_context_mismatch_warnings_total", "volume_manager_selinux_volume_context_mismatch_errors_total",
		"volume_manager_selinux_volume_context_mismatch_warnings_total", "volume_manager_selinux_volumes_admitted_total",
		"storage_operation_duration_seconds", "volume_operation_total_seconds"),
	except(noPullIntents, "kubelet_image_manager_ensure_image_requests_total", "kubelet_imagemanager_ondisk_pullintents",
		"kubelet_imagemanager_ondisk_pulledrecords", "kubelet_imagemanager_inmemory_pullintents_usage_percent",
		"kubelet_imagemanager_inmemory_pulledrecords_usage_percent", "kubelet_imagemanager_image_mustpull_checks_total"),
	except(noCgroupTiming, "kubelet_cgroup_manager_duration_seconds"),
	except(noPodRelistTiming, "kubelet_pleg_pod_relist_duration_seconds"),
	except(noMemoryQoSGauges, "kubelet_memory_qos_node_memory_min_bytes", "kubelet_memory_qos_node_memory_low_bytes"),
	except(noPodLevelAdmit, "kubelet_pod_level_resources_admission_total"),
	except(noVolumeTiming, "kubelet_volume_metric_collection_duration_seconds"),
	except(noMetricsProvider, "kubelet_metrics_provider"),
	except(noWebSocketCount, "kubelet_websocket_streaming_requests_total"),
	except(noStabilityFrame, "registered_metrics_total", "disabled_metrics_total", "hidden_metrics_total",
		"cardinality_enforcement_unexpected_categorizations_total"),
	except(noComponentBase, "kubernetes_build_info", "kubernetes_feature_enabled", "version_info"),
	except(noClientGoMetrics, "rest_client_exec_plugin_call_total", "rest_client_exec_plugin_certificate_rotation_age",
		"rest_client_exec_plugin_ttl_seconds", "rest_client_rate_limiter_duration_seconds", "rest_client_request_duration_seconds",
		"rest_client_request_retries_total", "rest_client_request_size_bytes", "rest_client_requests_total",
		"rest_client_response_size_bytes", "rest_client_transport_ca_reload_total", "rest_client_transport_cache_entries",
		"rest_client_transport_cache_gc_calls_total", "rest_client_transport_cert_rotation_gc_calls_total",
		"rest_client_transport_create_calls_total"),
	except(noWorkqueues, "workqueue_adds_total", "workqueue_depth", "workqueue_longest_running_processor_seconds",
		"workqueue_queue_duration_seconds", "workqueue_retries_total", "workqueue_unfinished_work_seconds",
		"workqueue_work_duration_seconds"),
	except(apiserverLinked, "aggregator_discovery_aggregation_count_total",
		"apiserver_admission_controller_admission_duration_seconds", "apiserver_admission_match_condition_evaluation_errors_total",
		"apiserver_admission_match_condition_evaluation_seconds", "apiserver_admission_match_condition_exclusions_total",
		"apiserver_admission_step_admission_duration_seconds", "apiserver_admission_step_admission_duration_seconds_summary",
		"apiserver_admission_webhook_admission_duration_seconds", "apiserver_admission_webhook_fail_open_count",
		"apiserver_admission_webhook_rejection_count", "apiserver_admission_webhook_request_total",
		"apiserver_audit_error_total", "apiserver_audit_event_total", "apiserver_audit_level_total",
		"apiserver_audit_requests_rejected_total", "apiserver_egress_dialer_dial_duration_seconds",
		"apiserver_egress_dialer_dial_failure_count", "apiserver_egress_dialer_dial_start_total",
		"apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds",
		"apiserver_encryption_config_controller_automatic_reloads_total", "apiserver_encryption_config_controller_last_config_info",
		"apiserver_envelope_encryption_dek_cache_fill_percent", "apiserver_envelope_encryption_dek_cache_inter_arrival_time_seconds",
		"apiserver_envelope_encryption_dek_source_cache_size", "apiserver_envelope_encryption_invalid_key_id_from_status_total",
		"apiserver_envelope_encryption_key_id_hash_last_timestamp_seconds",
		"apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds", "apiserver_envelope_encryption_key_id_hash_total",
		"apiserver_envelope_encryption_kms_operations_latency_seconds", "apiserver_mutating_admission_policy_check_duration_seconds",
		"apiserver_mutating_admission_policy_check_total", "apiserver_storage_data_key_generation_duration_seconds",
		"apiserver_storage_data_key_generation_failures_total", "apiserver_storage_envelope_transformation_cache_misses_total",
		"apiserver_storage_transformation_duration_seconds", "apiserver_storage_transformation_operations_total",
		"apiserver_validating_admission_policy_check_duration_seconds", "apiserver_validating_admission_policy_check_total",
		"apiserver_validation_declarative_validation_mismatch_total", "apiserver_validation_declarative_validation_panic_total",
		"apiserver_validation_declarative_validation_panics_total",
		"apiserver_validation_declarative_validation_parity_discrepancies_total",
		"apiserver_validation_duplicate_validation_error_total", "apiserver_webhooks_x509_insecure_sha1_total",
		"apiserver_webhooks_x509_missing_san_total", "grpc_client_handled_total", "grpc_client_msg_received_total",
		"grpc_client_msg_sent_total", "grpc_client_started_total", "konnectivity_network_proxy_client_client_connections",
		"konnectivity_network_proxy_client_dial_failure_total", "konnectivity_network_proxy_client_stream_errors_total",
		"konnectivity_network_proxy_client_stream_packets_total"),
	except(ownAuth, "apiserver_client_certificate_expiration_seconds", "apiserver_delegated_authn_request_duration_seconds",
		"apiserver_delegated_authn_request_total", "apiserver_delegated_authz_request_duration_seconds",
		"apiserver_delegated_authz_request_total", "authentication_token_cache_active_fetch_count",
		"authentication_token_cache_fetch_total", "authentication_token_cache_request_duration_seconds",
		"authentication_token_cache_request_total"),
	except(nodeletOwn, "nodelet_pod_startup_duration_seconds", "nodelet_pod_startup_phase_duration_seconds"),
)

type exception struct {
	reason string
	names  []string
}

func except(reason string, names ...string) exception { return exception{reason, names} }

func exceptions(es ...exception) map[string]string {
	out := map[string]string{}
	for _, e := range es {
		for _, n := range e.names {
			out[n] = e.reason
		}
	}
	return out
}

// TestMetricFamiliesMatchUpstream builds the /metrics registry as Run does at start
// (newRegistries; the certificate metrics come later, with rotation only, as upstream's)
// and compares the families it can expose with upstream's kubelet's, both ways: every
// family on one side only must be an exception, with its reason, and every exception
// must still be on one side only.
// registerManagerFamilies registers, as startPodLoop does, the families of the managers
// built with the pod loop (DRA, topology, CPU and memory managers, the plugin watcher),
// at their defaults.
func registerManagerFamilies(t *testing.T, reg prometheus.Registerer) {
	t.Helper()
	opts := defaultOptions(t)
	if _, err := newDRA(opts.RootDirectory, "node-a", nil, reg); err != nil {
		t.Fatal(err)
	}
	devices, err := deviceplugin.New(deviceplugin.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	capacity := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi")}
	if _, err := newResourceManagers(opts, nodestatus.Options{}, capacity, devices, nil, reg); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(pluginwatcher.New(t.TempDir()).Collector()); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(csi.Collector()); err != nil {
		t.Fatal(err)
	}
}

func TestMetricFamiliesMatchUpstream(t *testing.T) {
	r, err := newRegistries("node-a")
	if err != nil {
		t.Fatal(err)
	}
	registerManagerFamilies(t, r.Kubelet)
	nodelet := map[string]bool{}
	for _, name := range r.Kubelet.FamilyNames() {
		nodelet[name] = true
	}
	upstream := readFamilies(t, upstreamFamiliesFile)

	var missing, extra, stale []string
	for name := range upstream {
		if !nodelet[name] && familyExceptions[name] == "" {
			missing = append(missing, name)
		}
	}
	for name := range nodelet {
		if !upstream[name] && familyExceptions[name] == "" {
			extra = append(extra, name)
		}
	}
	for name := range familyExceptions {
		if upstream[name] == nodelet[name] {
			stale = append(stale, name)
		}
	}
	for _, l := range []struct {
		names []string
		what  string
	}{
		{missing, "upstream's kubelet registers %d families nodelet's /metrics lacks (add them, or an exception with its reason): %s"},
		{extra, "nodelet's /metrics has %d families upstream's kubelet does not (add an exception with its reason): %s"},
		{stale, "%d exceptions are no longer differences (remove them): %s"},
	} {
		if len(l.names) > 0 {
			slices.Sort(l.names)
			t.Errorf(l.what, len(l.names), strings.Join(l.names, ", "))
		}
	}
}

// readFamilies reads a list of family names, one a line; # starts a comment.
func readFamilies(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if out[line] {
			t.Errorf("%s lists %s twice", path, line)
		}
		out[line] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s lists no families", path)
	}
	return out
}
