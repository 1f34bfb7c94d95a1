package config

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	kc "k8s.io/kubelet/config/v1beta1"
)

// fixedBehaviour describes a configuration field nodelet does not read: what nodelet does
// instead, and whether the effective value (set or defaulted) asks for exactly that.
type fixedBehaviour struct {
	does     string
	honoured func(c *kc.KubeletConfiguration) bool
}

func always(*kc.KubeletConfiguration) bool { return true }
func never(*kc.KubeletConfiguration) bool  { return false }

// notRead are the fields of KubeletConfiguration that nodelet does not act on (or, for
// partlyImplemented ones, acts on only in part). Every such field is listed, so a field
// that asks for something nodelet does not do is warned about at start even when it is
// only defaulted: upstream's defaults turn some behaviour on (TestEveryFieldIsClassified
// keeps the list complete against the config type).
var notRead = map[string]fixedBehaviour{
	"streamingConnectionIdleTimeout": {"exec, attach and port-forward streams idle out after 4h",
		func(c *kc.KubeletConfiguration) bool { return c.StreamingConnectionIdleTimeout.Duration == 4*time.Hour }},
	"kubeletCgroups": {"", func(c *kc.KubeletConfiguration) bool { return c.KubeletCgroups == "" }},
	"systemCgroups":  {"", func(c *kc.KubeletConfiguration) bool { return c.SystemCgroups == "" }},
	"featureGates":   {"", func(c *kc.KubeletConfiguration) bool { return gatesActedOn(c) }},
	"qosReserved": {"no memory is reserved for higher QoS classes",
		func(c *kc.KubeletConfiguration) bool { return len(c.QOSReserved) == 0 }},
	// With CRI runtimes hairpin traffic is the CNI plugin's; upstream's kubelet only
	// validates the field since its dockershim went.
	"hairpinMode": {"hairpin traffic is left to the CNI plugin", always},
	"podCIDR": {"the pod CIDR is not passed to the runtime standalone (UpdateRuntimeConfig)",
		func(c *kc.KubeletConfiguration) bool { return c.PodCIDR == "" }},
	// true (the default): the attach/detach controller attaches, as nodelet needs; false
	// asks the kubelet to attach volumes itself, which nodelet does not do.
	"enableControllerAttachDetach": {"", func(c *kc.KubeletConfiguration) bool {
		return c.EnableControllerAttachDetach == nil || *c.EnableControllerAttachDetach
	}},
	"runOnce": {"nodelet keeps running", func(c *kc.KubeletConfiguration) bool { return !c.RunOnce }},
	"mergeDefaultEvictionSettings": {"evictionHard replaces the defaults as a whole",
		func(c *kc.KubeletConfiguration) bool {
			return c.MergeDefaultEvictionSettings == nil || !*c.MergeDefaultEvictionSettings
		}},
	// false: upstream sets vm.overcommit_memory, vm.panic_on_oom, kernel.panic,
	// kernel.panic_on_oops and kernel.keys.root_max*; true: it refuses to start when
	// they differ. nodelet neither sets nor checks them.
	"protectKernelDefaults": {"the kernel's sysctls are neither set nor checked", never},
	"makeIPTablesUtilChains": {"no KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY chains are made",
		func(c *kc.KubeletConfiguration) bool {
			return c.MakeIPTablesUtilChains != nil && !*c.MakeIPTablesUtilChains
		}},
	// Deprecated: upstream's kubelet has not made the KUBE-MARK-* chains they were for
	// since v1.28 either.
	"iptablesMasqueradeBit": {"not used, as upstream", always},
	"iptablesDropBit":       {"not used, as upstream", always},
	"memorySwap": {"containers get no swap (NoSwap)",
		func(c *kc.KubeletConfiguration) bool {
			return c.MemorySwap.SwapBehavior == "" || c.MemorySwap.SwapBehavior == "NoSwap"
		}},
	"containerLogMaxWorkers": {"logs are rotated by one worker",
		func(c *kc.KubeletConfiguration) bool {
			return c.ContainerLogMaxWorkers == nil || *c.ContainerLogMaxWorkers == 1
		}},
	"showHiddenMetricsForVersion": {"no hidden metrics are shown",
		func(c *kc.KubeletConfiguration) bool { return c.ShowHiddenMetricsForVersion == "" }},
	"defaultPodSysctls": {"pods get no default sysctls",
		func(c *kc.KubeletConfiguration) bool { return len(c.DefaultPodSysctls) == 0 }},
	"volumePluginDir": {"no FlexVolume drivers are loaded (a pod with a flexVolume volume fails to mount)",
		func(c *kc.KubeletConfiguration) bool { return noFlexVolumeDrivers(c.VolumePluginDir) }},
	"crashLoopBackOff": {"restart back-off is capped at upstream's 5 minutes",
		func(c *kc.KubeletConfiguration) bool { return c.CrashLoopBackOff.MaxContainerRestartPeriod == nil }},
	"memoryReservationPolicy": {"no memory reservation policy (None)",
		func(c *kc.KubeletConfiguration) bool {
			return c.MemoryReservationPolicy == "" || c.MemoryReservationPolicy == "None"
		}},
}

// actedOnGates are the feature gates nodelet reads.
var actedOnGates = map[string]bool{
	"ExtendWebSocketsToKubelet": true, "ContainerCheckpoint": true, "PodLogsQuerySplitStreams": true,
	"EventedPLEG": true, "MemoryQoS": true, "InPlacePodLevelResourcesVerticalScaling": true,
	"KubeletEnsureSecretPulledImages": true, "ComponentStatusz": true, "ComponentFlagz": true,
	"KubeletTracing": true,
}

// gatesActedOn is true when every gate the configuration names is one nodelet reads.
func gatesActedOn(c *kc.KubeletConfiguration) bool {
	for name := range c.FeatureGates {
		if !actedOnGates[name] {
			return false
		}
	}
	return true
}

// noFlexVolumeDrivers is true when dir holds no FlexVolume driver (vendor~driver/driver).
func noFlexVolumeDrivers(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return true
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			return false
		}
	}
	return true
}

// unhonouredFields names, in one warning, every field whose effective value asks for
// something nodelet does not do, and what nodelet does instead; "" when there is none.
func unhonouredFields(c *kc.KubeletConfiguration) string {
	var names []string
	for name, f := range notRead {
		if f.honoured(c) {
			continue
		}
		does := f.does
		if note, ok := partlyImplemented[name]; ok {
			does = note
		}
		names = append(names, fmt.Sprintf("%s → %s", name, does))
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	return "Config fields whose value (set or defaulted) nodelet does not honour yet; what nodelet does instead: " + strings.Join(names, "; ")
}
