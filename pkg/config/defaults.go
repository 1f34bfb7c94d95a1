package config

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	kc "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// Defaults that other packages need by name.
const (
	DefaultRuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	DefaultPodLogsDir      = "/var/log/pods"
	DefaultRootDir         = "/var/lib/kubelet"
	DefaultVolumePluginDir = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"
	DefaultResolvConf      = "/etc/resolv.conf"
	DefaultKubeletPort     = 10250
	DefaultHealthzPort     = 10248
	// kubeletOOMScoreAdj keeps the kubelet alive longer than any pod under memory pressure.
	kubeletOOMScoreAdj = -999
)

// DefaultEvictionHard is upstream's Linux hard-eviction default.
func DefaultEvictionHard() map[string]string {
	return map[string]string{
		"memory.available":   "100Mi",
		"nodefs.available":   "10%",
		"nodefs.inodesFree":  "5%",
		"imagefs.available":  "15%",
		"imagefs.inodesFree": "5%",
	}
}

// setDuration fills d with v when it is unset.
func setDuration(d *metav1.Duration, v time.Duration) {
	if d.Duration == 0 {
		d.Duration = v
	}
}

// setDefault fills *p with v when it is nil.
func setDefault[T any](p **T, v T) {
	if *p == nil {
		*p = ptr.To(v)
	}
}

// setZero fills *p with v when it holds the zero value.
func setZero[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// SetDefaults fills every unset field with upstream kubelet's v1beta1 default, so that a
// config file written for upstream behaves the same here.
func SetDefaults(c *kc.KubeletConfiguration) {
	setDefaultsServer(c)
	setDefaultsFrequencies(c)
	setDefaultsImages(c)
	setDefaultsResources(c)
	setDefaultsLogs(c)
	setDefaultsMisc(c)
}

func setDefaultsServer(c *kc.KubeletConfiguration) {
	setDefault(&c.EnableServer, true)
	setZero(&c.Address, "0.0.0.0")
	setZero(&c.Port, int32(DefaultKubeletPort))
	setDefault(&c.Authentication.Anonymous.Enabled, false)
	setDefault(&c.Authentication.Webhook.Enabled, true)
	setDuration(&c.Authentication.Webhook.CacheTTL, 2*time.Minute)
	setZero(&c.Authorization.Mode, kc.KubeletAuthorizationModeWebhook)
	setDuration(&c.Authorization.Webhook.CacheAuthorizedTTL, 5*time.Minute)
	setDuration(&c.Authorization.Webhook.CacheUnauthorizedTTL, 30*time.Second)
	setDefault(&c.EnableDebuggingHandlers, true)
	setDefault(&c.HealthzPort, int32(DefaultHealthzPort))
	setZero(&c.HealthzBindAddress, "127.0.0.1")
	setDuration(&c.StreamingConnectionIdleTimeout, 4*time.Hour)
	setDefault(&c.EnableSystemLogHandler, true)
	setDefault(&c.EnableProfilingHandler, true)
	setDefault(&c.EnableDebugFlagsHandler, true)
	setZero(&c.ContentType, "application/vnd.kubernetes.protobuf")
	setDefault(&c.KubeAPIQPS, int32(50))
	setZero(&c.KubeAPIBurst, int32(100))
	setDefault(&c.EventRecordQPS, int32(50))
	setZero(&c.EventBurst, int32(100))
	setDefault(&c.RegisterNode, true)
}

func setDefaultsFrequencies(c *kc.KubeletConfiguration) {
	setDuration(&c.SyncFrequency, time.Minute)
	setDuration(&c.FileCheckFrequency, 20*time.Second)
	setDuration(&c.HTTPCheckFrequency, 20*time.Second)
	// An explicitly set update frequency also becomes the report frequency, as upstream
	// does for backward compatibility.
	if c.NodeStatusReportFrequency.Duration == 0 {
		if c.NodeStatusUpdateFrequency.Duration == 0 {
			c.NodeStatusReportFrequency.Duration = 5 * time.Minute
		} else {
			c.NodeStatusReportFrequency = c.NodeStatusUpdateFrequency
		}
	}
	setDuration(&c.NodeStatusUpdateFrequency, 10*time.Second)
	setZero(&c.NodeLeaseDurationSeconds, int32(40))
	setDuration(&c.RuntimeRequestTimeout, 2*time.Minute)
	setDuration(&c.VolumeStatsAggPeriod, time.Minute)
	setDuration(&c.CPUManagerReconcilePeriod, 10*time.Second)
	setDuration(&c.EvictionPressureTransitionPeriod, 5*time.Minute)
}

func setDefaultsImages(c *kc.KubeletConfiguration) {
	setDefault(&c.RegistryPullQPS, int32(5))
	setZero(&c.RegistryBurst, int32(10))
	setDuration(&c.ImageMinimumGCAge, 2*time.Minute)
	setDefault(&c.ImageGCHighThresholdPercent, int32(85))
	setDefault(&c.ImageGCLowThresholdPercent, int32(80))
	setDefault(&c.NodeStatusMaxImages, int32(50))
	// Pulls are serialized unless the user asked for parallel pulls.
	if c.SerializeImagePulls == nil {
		parallel := c.MaxParallelImagePulls != nil && *c.MaxParallelImagePulls >= 2
		c.SerializeImagePulls = ptr.To(!parallel)
	}
}

func setDefaultsResources(c *kc.KubeletConfiguration) {
	setDefault(&c.CgroupsPerQOS, true)
	setZero(&c.CgroupDriver, "cgroupfs")
	setZero(&c.CPUManagerPolicy, "none")
	setZero(&c.MemoryManagerPolicy, kc.NoneMemoryManagerPolicy)
	setZero(&c.TopologyManagerPolicy, kc.NoneTopologyManagerPolicy)
	setZero(&c.TopologyManagerScope, kc.ContainerTopologyManagerScope)
	setZero(&c.HairpinMode, kc.PromiscuousBridge)
	setZero(&c.MaxPods, int32(110))
	if c.PodPidsLimit == nil || *c.PodPidsLimit < 0 {
		c.PodPidsLimit = ptr.To[int64](-1)
	}
	setDefault(&c.ResolverConfig, DefaultResolvConf)
	setDefault(&c.CPUCFSQuota, true)
	setDefault(&c.CPUCFSQuotaPeriod, metav1.Duration{Duration: 100 * time.Millisecond})
	setZero(&c.MaxOpenFiles, int64(1000000))
	setDefault(&c.OOMScoreAdj, int32(kubeletOOMScoreAdj))
	if c.EvictionHard == nil {
		c.EvictionHard = DefaultEvictionHard()
	}
	setDefault(&c.MergeDefaultEvictionSettings, false)
	if c.EnforceNodeAllocatable == nil {
		c.EnforceNodeAllocatable = []string{"pods"}
	}
	setDefault(&c.FailSwapOn, true)
	setDefault(&c.FailCgroupV1, false)
	setDefault(&c.MemoryThrottlingFactor, 0.9)
	setDefault(&c.LocalStorageCapacityIsolation, true)
	setDefault(&c.SeccompDefault, false)
}

func setDefaultsLogs(c *kc.KubeletConfiguration) {
	setZero(&c.ContainerLogMaxSize, "10Mi")
	setDefault(&c.ContainerLogMaxFiles, int32(5))
	setDefault(&c.ContainerLogMaxWorkers, int32(1))
	setDefault(&c.ContainerLogMonitorInterval, metav1.Duration{Duration: 10 * time.Second})
	setZero(&c.PodLogsDir, DefaultPodLogsDir)
	logsapi.SetRecommendedLoggingConfiguration(&c.Logging)
}

func setDefaultsMisc(c *kc.KubeletConfiguration) {
	setDefault(&c.EnableControllerAttachDetach, true)
	setDefault(&c.MakeIPTablesUtilChains, true)
	setDefault(&c.IPTablesMasqueradeBit, int32(14))
	setDefault(&c.IPTablesDropBit, int32(15))
	setZero(&c.ConfigMapAndSecretChangeDetectionStrategy, kc.WatchChangeDetectionStrategy)
	setZero(&c.VolumePluginDir, DefaultVolumePluginDir)
	setZero(&c.ContainerRuntimeEndpoint, DefaultRuntimeEndpoint)
}
