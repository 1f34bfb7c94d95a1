package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	kc "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"
)

// validator collects configuration errors so the user sees all of them at once.
type validator struct{ errs []error }

// check records an error naming the field, the rule it breaks and the value it had.
func (v *validator) check(ok bool, field, rule string, got any) {
	if !ok {
		v.errs = append(v.errs, fmt.Errorf("invalid configuration: %s: %s (got %s)", field, rule, formatGot(got)))
	}
}

func (v *validator) fail(field, msg string) {
	v.errs = append(v.errs, fmt.Errorf("invalid configuration: %s: %s", field, msg))
}

func (v *validator) err() error { return errors.Join(v.errs...) }

func formatGot(got any) string {
	switch g := got.(type) {
	case string:
		return strconv.Quote(g)
	case time.Duration:
		return strconv.Quote(g.String())
	case metav1.Duration:
		return strconv.Quote(g.Duration.String())
	case []string:
		return fmt.Sprintf("%q", g)
	default:
		return fmt.Sprint(g)
	}
}

// Validate checks a defaulted configuration and returns every problem found, each naming
// the field and the bad value. Nothing is started before it passes.
func Validate(c *kc.KubeletConfiguration) error {
	v := &validator{}
	validateDurations(v, c)
	validateNetwork(v, c)
	validateLimits(v, c)
	validateImages(v, c)
	validateResources(v, c)
	validateLogs(v, c)
	validateEviction(v, c)
	validateTracing(v, c)
	return v.err()
}

// validateTracing checks tracing with upstream's own rules and words (component-base's
// ValidateTracingConfiguration, which reads no gate).
func validateTracing(v *validator, c *kc.KubeletConfiguration) {
	for _, e := range tracingapi.ValidateTracingConfiguration(c.Tracing, nil, field.NewPath("tracing")) {
		v.errs = append(v.errs, fmt.Errorf("invalid configuration: %w", e))
	}
}

func validateDurations(v *validator, c *kc.KubeletConfiguration) {
	positive := []struct {
		name string
		d    metav1.Duration
	}{
		{"syncFrequency", c.SyncFrequency},
		{"fileCheckFrequency", c.FileCheckFrequency},
		{"httpCheckFrequency", c.HTTPCheckFrequency},
		{"runtimeRequestTimeout", c.RuntimeRequestTimeout},
		{"nodeStatusUpdateFrequency", c.NodeStatusUpdateFrequency},
		{"nodeStatusReportFrequency", c.NodeStatusReportFrequency},
		{"streamingConnectionIdleTimeout", c.StreamingConnectionIdleTimeout},
		{"volumeStatsAggPeriod", c.VolumeStatsAggPeriod},
		{"evictionPressureTransitionPeriod", c.EvictionPressureTransitionPeriod},
	}
	for _, p := range positive {
		v.check(p.d.Duration > 0, p.name, "must be greater than 0s", p.d)
	}
	v.check(c.NodeLeaseDurationSeconds > 0, "nodeLeaseDurationSeconds", "must be greater than 0", c.NodeLeaseDurationSeconds)
	v.check(c.ImageMinimumGCAge.Duration >= 0, "imageMinimumGCAge", "must not be negative", c.ImageMinimumGCAge)
	v.check(c.ImageMaximumGCAge.Duration >= 0, "imageMaximumGCAge", "must not be negative", c.ImageMaximumGCAge)
	if c.ImageMaximumGCAge.Duration > 0 {
		v.check(c.ImageMaximumGCAge.Duration > c.ImageMinimumGCAge.Duration, "imageMaximumGCAge",
			"must be greater than imageMinimumGCAge "+c.ImageMinimumGCAge.Duration.String(), c.ImageMaximumGCAge)
	}
	if c.CPUCFSQuotaPeriod != nil {
		d := c.CPUCFSQuotaPeriod.Duration
		v.check(d >= time.Millisecond && d <= time.Second, "cpuCFSQuotaPeriod", "must be between 1ms and 1s, inclusive", d)
	}
	v.check(c.ShutdownGracePeriod.Duration == 0 || c.ShutdownGracePeriod.Duration >= time.Second,
		"shutdownGracePeriod", "must be either zero or otherwise >= 1s", c.ShutdownGracePeriod)
	v.check(c.ShutdownGracePeriodCriticalPods.Duration <= c.ShutdownGracePeriod.Duration,
		"shutdownGracePeriodCriticalPods", "must be <= shutdownGracePeriod "+c.ShutdownGracePeriod.Duration.String(), c.ShutdownGracePeriodCriticalPods)
	v.check(c.ShutdownGracePeriodCriticalPods.Duration == 0 || c.ShutdownGracePeriodCriticalPods.Duration >= time.Second,
		"shutdownGracePeriodCriticalPods", "must be either zero or otherwise >= 1s", c.ShutdownGracePeriodCriticalPods)
	v.check(len(c.ShutdownGracePeriodByPodPriority) == 0 || (c.ShutdownGracePeriod.Duration == 0 && c.ShutdownGracePeriodCriticalPods.Duration == 0),
		"shutdownGracePeriodByPodPriority", "Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time", len(c.ShutdownGracePeriodByPodPriority))
}

func validateNetwork(v *validator, c *kc.KubeletConfiguration) {
	v.check(net.ParseIP(c.Address) != nil, "address", "must be a valid IP address", c.Address)
	v.check(c.Port >= 1 && c.Port <= 65535, "port", "must be between 1 and 65535, inclusive", c.Port)
	v.check(c.ReadOnlyPort >= 0 && c.ReadOnlyPort <= 65535, "readOnlyPort", "must be between 0 and 65535, inclusive", c.ReadOnlyPort)
	if c.HealthzPort != nil {
		v.check(*c.HealthzPort >= 0 && *c.HealthzPort <= 65535, "healthzPort", "must be between 0 and 65535, inclusive", *c.HealthzPort)
	}
	if c.HealthzPort != nil && *c.HealthzPort != 0 {
		v.check(net.ParseIP(c.HealthzBindAddress) != nil, "healthzBindAddress", "must be a valid IP address", c.HealthzBindAddress)
	}
	for _, ip := range c.ClusterDNS {
		v.check(net.ParseIP(ip) != nil, "clusterDNS", "must contain only valid IP addresses", ip)
	}
	if c.PodCIDR != "" {
		_, _, err := net.ParseCIDR(c.PodCIDR)
		v.check(err == nil, "podCIDR", "must be a valid CIDR", c.PodCIDR)
	}
	v.check(c.IPTablesMasqueradeBit == nil || inRange(*c.IPTablesMasqueradeBit, 0, 31), "iptablesMasqueradeBit", "must be between 0 and 31, inclusive", deref(c.IPTablesMasqueradeBit))
	v.check(c.IPTablesDropBit == nil || inRange(*c.IPTablesDropBit, 0, 31), "iptablesDropBit", "must be between 0 and 31, inclusive", deref(c.IPTablesDropBit))
	v.check(oneOf(c.HairpinMode, kc.PromiscuousBridge, kc.HairpinVeth, kc.HairpinNone), "hairpinMode",
		fmt.Sprintf("must be one of %q", []string{kc.PromiscuousBridge, kc.HairpinVeth, kc.HairpinNone}), c.HairpinMode)
	modes := []string{string(kc.KubeletAuthorizationModeAlwaysAllow), string(kc.KubeletAuthorizationModeWebhook)}
	v.check(oneOf(string(c.Authorization.Mode), modes...), "authorization.mode", fmt.Sprintf("must be one of %q", modes), string(c.Authorization.Mode))
	v.check(c.ContainerRuntimeEndpoint != "", "containerRuntimeEndpoint", "must not be empty", c.ContainerRuntimeEndpoint)
	v.check(c.StaticPodURL == "" || strings.HasPrefix(c.StaticPodURL, "http://") || strings.HasPrefix(c.StaticPodURL, "https://"),
		"staticPodURL", "must be an http:// or https:// URL", c.StaticPodURL)
}

func validateLimits(v *validator, c *kc.KubeletConfiguration) {
	nonNegative := []struct {
		name string
		n    int64
	}{
		{"eventBurst", int64(c.EventBurst)},
		{"eventRecordQPS", int64(deref(c.EventRecordQPS))},
		{"kubeAPIBurst", int64(c.KubeAPIBurst)},
		{"kubeAPIQPS", int64(deref(c.KubeAPIQPS))},
		{"registryBurst", int64(c.RegistryBurst)},
		{"registryPullQPS", int64(deref(c.RegistryPullQPS))},
		{"maxOpenFiles", c.MaxOpenFiles},
		{"maxPods", int64(c.MaxPods)},
		{"podsPerCore", int64(c.PodsPerCore)},
		{"evictionMaxPodGracePeriod", int64(c.EvictionMaxPodGracePeriod)},
	}
	for _, n := range nonNegative {
		v.check(n.n >= 0, n.name, "must not be a negative number", n.n)
	}
	v.check(c.OOMScoreAdj == nil || inRange(*c.OOMScoreAdj, -1000, 1000), "oomScoreAdj", "must be between -1000 and 1000, inclusive", deref(c.OOMScoreAdj))
	v.check(c.NodeStatusMaxImages == nil || *c.NodeStatusMaxImages >= -1, "nodeStatusMaxImages", "must be -1 or greater", deref(c.NodeStatusMaxImages))
	v.check(!c.RunOnce, "runOnce", "run-once mode has been removed and must not be set", c.RunOnce)
}

func validateImages(v *validator, c *kc.KubeletConfiguration) {
	high, low := deref(c.ImageGCHighThresholdPercent), deref(c.ImageGCLowThresholdPercent)
	v.check(inRange(high, 0, 100), "imageGCHighThresholdPercent", "must be between 0 and 100, inclusive", high)
	v.check(inRange(low, 0, 100), "imageGCLowThresholdPercent", "must be between 0 and 100, inclusive", low)
	v.check(low < high, "imageGCLowThresholdPercent", fmt.Sprintf("must be less than imageGCHighThresholdPercent %d", high), low)
	if c.MaxParallelImagePulls != nil {
		n := *c.MaxParallelImagePulls
		v.check(n >= 1, "maxParallelImagePulls", "must be a positive number", n)
		v.check(n <= 1 || !deref(c.SerializeImagePulls), "maxParallelImagePulls",
			"cannot be larger than 1 unless serializeImagePulls is false", n)
	}
}

func validateResources(v *validator, c *kc.KubeletConfiguration) {
	v.check(oneOf(c.CgroupDriver, "cgroupfs", "systemd"), "cgroupDriver", `must be "cgroupfs" or "systemd"`, c.CgroupDriver)
	if c.SystemCgroups != "" {
		v.check(c.CgroupRoot != "", "systemCgroups", "requires cgroupRoot to be set", c.SystemCgroups)
	}
	policies := []string{kc.NoneTopologyManagerPolicy, kc.BestEffortTopologyManagerPolicy, kc.RestrictedTopologyManagerPolicy, kc.SingleNumaNodeTopologyManagerPolicy}
	v.check(oneOf(c.TopologyManagerPolicy, policies...), "topologyManagerPolicy", fmt.Sprintf("must be one of %q", policies), c.TopologyManagerPolicy)
	scopes := []string{kc.ContainerTopologyManagerScope, kc.PodTopologyManagerScope}
	v.check(oneOf(c.TopologyManagerScope, scopes...), "topologyManagerScope", fmt.Sprintf("must be one of %q", scopes), c.TopologyManagerScope)
	v.check(oneOf(c.CPUManagerPolicy, "none", "static"), "cpuManagerPolicy", `must be "none" or "static"`, c.CPUManagerPolicy)
	v.check(oneOf(c.MemoryManagerPolicy, kc.NoneMemoryManagerPolicy, kc.StaticMemoryManagerPolicy), "memoryManagerPolicy", `must be "None" or "Static"`, c.MemoryManagerPolicy)
	if c.MemoryThrottlingFactor != nil {
		f := *c.MemoryThrottlingFactor
		v.check(f > 0 && f <= 1, "memoryThrottlingFactor", "must be greater than 0 and less than or equal to 1.0", f)
	}
	validateReserved(v, "systemReserved", c.SystemReserved)
	validateReserved(v, "kubeReserved", c.KubeReserved)
	validateEnforceNodeAllocatable(v, c)
	validateReservedCPUs(v, c)
}

// validateReservedCPUs: reservedSystemCPUs is a CPU list, and takes the place of the
// reserved cgroups' cpu, so it cannot be combined with them (upstream's rules).
func validateReservedCPUs(v *validator, c *kc.KubeletConfiguration) {
	if c.ReservedSystemCPUs == "" {
		return
	}
	if c.SystemReservedCgroup != "" || c.KubeReservedCgroup != "" {
		v.fail("reservedSystemCPUs", "can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)")
	}
	if _, err := cpuset.Parse(c.ReservedSystemCPUs); err != nil {
		v.fail("reservedSystemCPUs", fmt.Sprintf("unable to parse reservedSystemCPUs (--reserved-cpus) %v, error: %v", c.ReservedSystemCPUs, err))
	}
}

func validateReserved(v *validator, field string, reserved map[string]string) {
	for name, q := range reserved {
		v.check(oneOf(name, "cpu", "memory", "ephemeral-storage", "pid"), field, `keys must be one of "cpu", "memory", "ephemeral-storage", "pid"`, name)
		qty, err := resource.ParseQuantity(q)
		v.check(err == nil && qty.Sign() >= 0, field+"["+name+"]", "must be a non-negative quantity", q)
	}
}

func validateEnforceNodeAllocatable(v *validator, c *kc.KubeletConfiguration) {
	allowed := []string{"pods", "system-reserved", "kube-reserved", "system-reserved-compressible", "kube-reserved-compressible", "none"}
	for _, key := range c.EnforceNodeAllocatable {
		v.check(oneOf(key, allowed...), "enforceNodeAllocatable", fmt.Sprintf("entries must be one of %q", allowed), key)
	}
	has := func(k string) bool { return slices.Contains(c.EnforceNodeAllocatable, k) }
	if has("none") && len(c.EnforceNodeAllocatable) > 1 {
		v.fail("enforceNodeAllocatable", `"none" cannot be combined with other values`)
	}
	if has("system-reserved") && has("system-reserved-compressible") {
		v.fail("enforceNodeAllocatable", `"system-reserved" and "system-reserved-compressible" cannot be specified together`)
	}
	if has("kube-reserved") && has("kube-reserved-compressible") {
		v.fail("enforceNodeAllocatable", `"kube-reserved" and "kube-reserved-compressible" cannot be specified together`)
	}
	if (has("system-reserved") || has("system-reserved-compressible")) && c.SystemReservedCgroup == "" {
		v.fail("systemReservedCgroup", "must be set when enforceNodeAllocatable contains system-reserved")
	}
	if (has("kube-reserved") || has("kube-reserved-compressible")) && c.KubeReservedCgroup == "" {
		v.fail("kubeReservedCgroup", "must be set when enforceNodeAllocatable contains kube-reserved")
	}
}

func validateLogs(v *validator, c *kc.KubeletConfiguration) {
	size, err := resource.ParseQuantity(c.ContainerLogMaxSize)
	v.check(err == nil && size.Sign() > 0, "containerLogMaxSize", "must be a positive quantity such as 10Mi", c.ContainerLogMaxSize)
	v.check(c.ContainerLogMaxFiles == nil || *c.ContainerLogMaxFiles >= 2, "containerLogMaxFiles", "must be greater than or equal to 2", deref(c.ContainerLogMaxFiles))
	v.check(c.ContainerLogMaxWorkers == nil || *c.ContainerLogMaxWorkers >= 1, "containerLogMaxWorkers", "must be greater than or equal to 1", deref(c.ContainerLogMaxWorkers))
	if c.ContainerLogMonitorInterval != nil {
		v.check(c.ContainerLogMonitorInterval.Duration >= 3*time.Second, "containerLogMonitorInterval", "must be greater than or equal to 3s", *c.ContainerLogMonitorInterval)
	}
	v.check(filepath.IsAbs(c.PodLogsDir), "podLogsDir", "must be an absolute path", c.PodLogsDir)
	v.check(oneOf(c.Logging.Format, "text", "json"), "logging.format", `must be "text" or "json"`, c.Logging.Format)
}

// evictionSignals are the signals upstream's eviction manager understands.
var evictionSignals = []string{
	"memory.available", "allocatableMemory.available", "nodefs.available", "nodefs.inodesFree",
	"imagefs.available", "imagefs.inodesFree", "containerfs.available", "containerfs.inodesFree", "pid.available",
}

func validateEviction(v *validator, c *kc.KubeletConfiguration) {
	validateThresholds(v, "evictionHard", c.EvictionHard)
	validateThresholds(v, "evictionSoft", c.EvictionSoft)
	validateThresholds(v, "evictionMinimumReclaim", c.EvictionMinimumReclaim)
	for signal, period := range c.EvictionSoftGracePeriod {
		v.check(slices.Contains(evictionSignals, signal), "evictionSoftGracePeriod", "unknown eviction signal", signal)
		d, err := time.ParseDuration(period)
		v.check(err == nil && d >= 0, "evictionSoftGracePeriod["+signal+"]", "must be a non-negative duration", period)
	}
	for signal := range c.EvictionSoft {
		if _, ok := c.EvictionSoftGracePeriod[signal]; !ok {
			v.fail("evictionSoftGracePeriod", fmt.Sprintf("a grace period must be specified for the soft eviction threshold %q", signal))
		}
	}
}

func validateThresholds(v *validator, field string, thresholds map[string]string) {
	for signal, value := range thresholds {
		v.check(slices.Contains(evictionSignals, signal), field, "unknown eviction signal", signal)
		v.check(validThresholdValue(value), field+"["+signal+"]", "must be a percentage between 0% and 100% or a non-negative quantity", value)
	}
}

func validThresholdValue(value string) bool {
	if pct, ok := strings.CutSuffix(value, "%"); ok {
		f, err := strconv.ParseFloat(pct, 64)
		return err == nil && f >= 0 && f <= 100
	}
	q, err := resource.ParseQuantity(value)
	return err == nil && q.Sign() >= 0
}

func inRange[T int32 | int64](n, lo, hi T) bool { return n >= lo && n <= hi }

func oneOf(s string, allowed ...string) bool { return slices.Contains(allowed, s) }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
