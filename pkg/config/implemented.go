package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	kc "k8s.io/kubelet/config/v1beta1"
)

// implementedFields are the configuration fields (top-level JSON names) that nodelet acts
// on today. A flag or config-file setting for any other field is accepted with a warning.
// TestImplementedFieldsFollowTheCode keeps the list true: it fails when code outside this
// package reads a field that is not listed, or when nothing reads a listed one. When a
// feature starts reading a field, add the field here (one line each, any order).
var implementedFields = map[string]bool{
	"containerRuntimeEndpoint":                  true,
	"imageServiceEndpoint":                      true,
	"runtimeRequestTimeout":                     true,
	"healthzPort":                               true,
	"healthzBindAddress":                        true,
	"podLogsDir":                                true,
	"staticPodPath":                             true,
	"staticPodURL":                              true,
	"staticPodURLHeader":                        true,
	"fileCheckFrequency":                        true,
	"httpCheckFrequency":                        true,
	"syncFrequency":                             true,
	"maxPods":                                   true,
	"cgroupRoot":                                true,
	"cgroupsPerQOS":                             true,
	"enforceNodeAllocatable":                    true,
	"failCgroupV1":                              true,
	"kubeReservedCgroup":                        true,
	"systemReservedCgroup":                      true,
	"memoryThrottlingFactor":                    true,
	"singleProcessOOMKill":                      true,
	"podPidsLimit":                              true,
	"evictionHard":                              true,
	"evictionSoft":                              true,
	"evictionSoftGracePeriod":                   true,
	"evictionMinimumReclaim":                    true,
	"evictionPressureTransitionPeriod":          true,
	"evictionMaxPodGracePeriod":                 true,
	"kernelMemcgNotification":                   true,
	"imageGCHighThresholdPercent":               true,
	"imageGCLowThresholdPercent":                true,
	"imageMinimumGCAge":                         true,
	"imageMaximumGCAge":                         true,
	"userNamespaces":                            true,
	"cgroupDriver":                              true,
	"configMapAndSecretChangeDetectionStrategy": true,
	"clusterDNS":                                true,
	"clusterDomain":                             true,
	"resolvConf":                                true,
	"serializeImagePulls":                       true,
	"maxParallelImagePulls":                     true,
	"registryPullQPS":                           true,
	"registryBurst":                             true,
	"cpuCFSQuota":                               true,
	"cpuCFSQuotaPeriod":                         true,
	"seccompDefault":                            true,
	"containerLogMaxSize":                       true,
	"containerLogMaxFiles":                      true,
	"containerLogMonitorInterval":               true,
	"failSwapOn":                                true,
	"oomScoreAdj":                               true,
	"maxOpenFiles":                              true,
	// Cluster mode.
	"kubeAPIQPS":                    true,
	"kubeAPIBurst":                  true,
	"contentType":                   true,
	"eventRecordQPS":                true,
	"eventBurst":                    true,
	"rotateCertificates":            true,
	"nodeStatusUpdateFrequency":     true,
	"nodeStatusReportFrequency":     true,
	"nodeStatusMaxImages":           true,
	"nodeLeaseDurationSeconds":      true,
	"registerNode":                  true,
	"registerWithTaints":            true,
	"providerID":                    true,
	"podsPerCore":                   true,
	"enableControllerAttachDetach":  true,
	"localStorageCapacityIsolation": true,
	"allowedUnsafeSysctls":          true,
	// The kubelet API server (pkg/api/kubeletserver).
	"enableServer":              true,
	"volumeStatsAggPeriod":      true,
	"port":                      true,
	"address":                   true,
	"readOnlyPort":              true,
	"tlsCertFile":               true,
	"tlsPrivateKeyFile":         true,
	"tlsCipherSuites":           true,
	"tlsMinVersion":             true,
	"tlsCurvePreferences":       true,
	"serverTLSBootstrap":        true,
	"authentication":            true,
	"authorization":             true,
	"enableDebuggingHandlers":   true,
	"enableContentionProfiling": true,
	"enableProfilingHandler":    true,
	"enableDebugFlagsHandler":   true,
	"enableSystemLogHandler":    true,
	"enableSystemLogQuery":      true,
	// Reserved resources shape the node's allocatable, as upstream (enforcement on cgroups
	// is enforceNodeAllocatable's, which nodelet does not act on yet).
	"kubeReserved":   true,
	"systemReserved": true,
}

// partlyImplemented are fields nodelet reads for part of what they do; setting one still
// warns, naming what is missing.
var partlyImplemented = map[string]string{
	"kubeletCgroups": "only reported as a system container in /stats/summary; nodelet does not move itself into it",
	"systemCgroups":  "only reported as a system container in /stats/summary; nodelet does not move processes into it",
	"featureGates":   "nodelet acts on ExtendWebSocketsToKubelet, ContainerCheckpoint, PodLogsQuerySplitStreams, EventedPLEG (default on when the runtime streams container events) and MemoryQoS only",
}

// implementedCommandFlags are the command-only flags nodelet acts on today.
var implementedCommandFlags = map[string]bool{
	"root-dir":                              true,
	"lock-file":                             true,
	"exit-on-lock-contention":               true,
	"hostname-override":                     true,
	"node-ip":                               true,
	"node-labels":                           true,
	"kubeconfig":                            true,
	"bootstrap-kubeconfig":                  true,
	"cert-dir":                              true,
	"runtime-cgroups":                       true,
	"minimum-container-ttl-duration":        true,
	"maximum-dead-containers-per-container": true,
	"maximum-dead-containers":               true,
	"v":                                     true,
	"vmodule":                               true,
}

func implementedFlag(spec flagSpec) bool {
	if spec.Kind == configFlag {
		return implementedFields[spec.Field]
	}
	return implementedCommandFlags[spec.Name]
}

// partlyImplementedNote is how a flag or field nodelet only partly acts on is described in
// its warning ("" for the others).
func partlyImplementedNote(field string) string {
	if note, ok := partlyImplemented[field]; ok {
		return " (" + note + ")"
	}
	return ""
}

// unimplementedFileFields names, in one line, the fields the config files set to something
// other than the default that nodelet does not act on yet; "" when there are none. Fields
// left at their default need no warning: nodelet behaves as the default says.
func unimplementedFileFields(doc map[string]any, cfg *kc.KubeletConfiguration) string {
	defaults := &kc.KubeletConfiguration{}
	SetDefaults(defaults)
	got, want := toGeneric(cfg), toGeneric(defaults)
	var names []string
	for _, k := range sortedKeys(doc) {
		if k == "apiVersion" || k == "kind" || implementedFields[k] {
			continue
		}
		if !reflect.DeepEqual(got[k], want[k]) {
			names = append(names, k+partlyImplementedNote(k))
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("Config fields accepted for compatibility but not implemented by nodelet yet; they have no effect: %s", strings.Join(names, ", "))
}

func toGeneric(cfg *kc.KubeletConfiguration) map[string]any {
	data, _ := json.Marshal(cfg)
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	return out
}
