package eviction

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kc "k8s.io/kubelet/config/v1beta1"
)

// Signal names a resource the eviction manager watches, as the kubelet's
// configuration spells it.
type Signal string

// The signals upstream's eviction manager understands on Linux.
const (
	SignalMemoryAvailable            Signal = "memory.available"
	SignalAllocatableMemoryAvailable Signal = "allocatableMemory.available"
	SignalNodeFsAvailable            Signal = "nodefs.available"
	SignalNodeFsInodesFree           Signal = "nodefs.inodesFree"
	SignalImageFsAvailable           Signal = "imagefs.available"
	SignalImageFsInodesFree          Signal = "imagefs.inodesFree"
	SignalContainerFsAvailable       Signal = "containerfs.available"
	SignalContainerFsInodesFree      Signal = "containerfs.inodesFree"
	SignalPIDAvailable               Signal = "pid.available"
)

// Resources that only exist inside eviction: what disk-inode and PID
// thresholds reclaim.
const (
	resourceInodes v1.ResourceName = "inodes"
	resourcePIDs   v1.ResourceName = "pids"
)

// signalInfo is what a signal reclaims and which node condition it raises.
type signalInfo struct {
	resource  v1.ResourceName
	condition v1.NodeConditionType
}

// signals lists every signal in the order thresholds are kept: memory first,
// so that it is reclaimed before anything else, as upstream ranks them.
var signals = []Signal{
	SignalMemoryAvailable, SignalAllocatableMemoryAvailable,
	SignalNodeFsAvailable, SignalNodeFsInodesFree,
	SignalImageFsAvailable, SignalImageFsInodesFree,
	SignalContainerFsAvailable, SignalContainerFsInodesFree,
	SignalPIDAvailable,
}

var signalInfos = map[Signal]signalInfo{
	SignalMemoryAvailable:            {v1.ResourceMemory, v1.NodeMemoryPressure},
	SignalAllocatableMemoryAvailable: {v1.ResourceMemory, v1.NodeMemoryPressure},
	SignalNodeFsAvailable:            {v1.ResourceEphemeralStorage, v1.NodeDiskPressure},
	SignalNodeFsInodesFree:           {resourceInodes, v1.NodeDiskPressure},
	SignalImageFsAvailable:           {v1.ResourceEphemeralStorage, v1.NodeDiskPressure},
	SignalImageFsInodesFree:          {resourceInodes, v1.NodeDiskPressure},
	SignalContainerFsAvailable:       {v1.ResourceEphemeralStorage, v1.NodeDiskPressure},
	SignalContainerFsInodesFree:      {resourceInodes, v1.NodeDiskPressure},
	SignalPIDAvailable:               {resourcePIDs, v1.NodePIDPressure},
}

func isMemorySignal(s Signal) bool {
	return s == SignalMemoryAvailable || s == SignalAllocatableMemoryAvailable
}

// Value is a threshold amount: an absolute quantity, or a fraction of the
// signal's capacity when Quantity is nil.
type Value struct {
	Quantity   *resource.Quantity
	Percentage float32 // 0.1 is 10%
}

// Of is the value in absolute terms for a resource of the given capacity.
func (v Value) Of(capacity *resource.Quantity) *resource.Quantity {
	if v.Quantity != nil {
		q := v.Quantity.DeepCopy()
		return &q
	}
	return resource.NewQuantity(int64(float64(capacity.Value())*float64(v.Percentage)), resource.BinarySI)
}

func (v Value) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	return fmt.Sprintf("%.6g%%", float64(v.Percentage)*100)
}

// Threshold is met when the signal's available amount drops below Value.
// A zero GracePeriod makes it a hard threshold: pods are evicted at once,
// with a one-second grace period. Once met, a threshold stays met until
// MinReclaim more than Value is available again.
type Threshold struct {
	Signal      Signal
	Value       Value
	GracePeriod time.Duration
	MinReclaim  *Value
}

func (t Threshold) hard() bool { return t.GracePeriod == 0 }

func (t Threshold) String() string {
	kind := "hard"
	if !t.hard() {
		kind = "soft, grace period " + t.GracePeriod.String()
	}
	return fmt.Sprintf("%s<%s (%s)", t.Signal, t.Value, kind)
}

// Config is how the manager evicts.
type Config struct {
	// Thresholds are the hard and soft thresholds (ParseThresholds).
	Thresholds []Threshold
	// PressureTransitionPeriod is how long a pressure condition stays true
	// after its threshold was last met (evictionPressureTransitionPeriod).
	PressureTransitionPeriod time.Duration
	// MaxPodGracePeriodSeconds caps a pod's grace period on soft evictions
	// (evictionMaxPodGracePeriod).
	MaxPodGracePeriodSeconds int64
	// KernelMemcgNotification arms cgroup v1 memory threshold notifications
	// so memory thresholds are acted on as soon as they are crossed, not at
	// the next check (kernelMemcgNotification).
	KernelMemcgNotification bool
	// PodCgroupRoot is the cgroup holding all pods ("/kubepods"): where the
	// allocatableMemory.available notification is armed.
	PodCgroupRoot string
	// LocalStorageCapacityIsolation enforces emptyDir sizeLimit and
	// ephemeral-storage limits by eviction (localStorageCapacityIsolation).
	LocalStorageCapacityIsolation bool
	// MonitoringInterval is how often thresholds are checked; zero means
	// upstream's 10 seconds.
	MonitoringInterval time.Duration
}

// DefaultMonitoringInterval is upstream's evictionMonitoringPeriod.
const DefaultMonitoringInterval = 10 * time.Second

// ConfigFromKubelet builds the manager's configuration from a defaulted
// KubeletConfiguration. podCgroupRoot is the cgroup holding all pods.
func ConfigFromKubelet(c *kc.KubeletConfiguration, podCgroupRoot string) (Config, error) {
	thresholds, err := ParseThresholds(c.EnforceNodeAllocatable, c.EvictionHard, c.EvictionSoft, c.EvictionSoftGracePeriod, c.EvictionMinimumReclaim)
	if err != nil {
		return Config{}, err
	}
	return Config{
		Thresholds:                    thresholds,
		PressureTransitionPeriod:      c.EvictionPressureTransitionPeriod.Duration,
		MaxPodGracePeriodSeconds:      int64(c.EvictionMaxPodGracePeriod),
		KernelMemcgNotification:       c.KernelMemcgNotification,
		PodCgroupRoot:                 podCgroupRoot,
		LocalStorageCapacityIsolation: c.LocalStorageCapacityIsolation == nil || *c.LocalStorageCapacityIsolation,
	}, nil
}

// ParseThresholds parses evictionHard, evictionSoft (each with its
// evictionSoftGracePeriod) and evictionMinimumReclaim as upstream does:
// "0%" and "100%" mean no threshold, a soft threshold needs a grace period,
// and when enforceNodeAllocatable has "pods" the hard memory.available
// threshold is also an allocatableMemory.available one. Hard thresholds come
// first, each group in signal order.
func ParseThresholds(enforceNodeAllocatable []string, hard, soft, softGracePeriods, minReclaims map[string]string) ([]Threshold, error) {
	out, err := parseStatements(hard)
	if err != nil {
		return nil, err
	}
	softs, err := parseStatements(soft)
	if err != nil {
		return nil, err
	}
	for i := range softs {
		period, err := parseGracePeriod(softGracePeriods, softs[i].Signal)
		if err != nil {
			return nil, err
		}
		softs[i].GracePeriod = period
	}
	out = append(out, softs...)
	reclaims, err := parseMinReclaims(minReclaims)
	if err != nil {
		return nil, err
	}
	for i := range out {
		if r, ok := reclaims[out[i].Signal]; ok {
			out[i].MinReclaim = &r
		}
	}
	if slices.Contains(enforceNodeAllocatable, "pods") {
		for _, t := range out {
			if t.Signal == SignalMemoryAvailable && t.hard() {
				out = append(out, Threshold{Signal: SignalAllocatableMemoryAvailable, Value: t.Value, MinReclaim: t.MinReclaim})
			}
		}
	}
	return out, nil
}

func parseStatements(statements map[string]string) ([]Threshold, error) {
	var out []Threshold
	for _, s := range signals {
		val, ok := statements[string(s)]
		if !ok {
			continue
		}
		v, ignore, err := parseThresholdValue(s, val)
		if err != nil {
			return nil, err
		}
		if !ignore {
			out = append(out, Threshold{Signal: s, Value: v})
		}
	}
	for name := range statements {
		if _, ok := signalInfos[Signal(name)]; !ok {
			return nil, fmt.Errorf("unsupported eviction signal %v", name)
		}
	}
	return out, nil
}

// parseThresholdValue parses "10%" or "100Mi"; ignore is set for 0% and 100%.
func parseThresholdValue(s Signal, val string) (v Value, ignore bool, err error) {
	if strings.HasSuffix(val, "%") {
		if val == "0%" || val == "100%" {
			return Value{}, true, nil
		}
		pct, err := parsePercentage(val)
		if err != nil {
			return Value{}, false, err
		}
		if pct < 0 || pct > 1 {
			return Value{}, false, fmt.Errorf("eviction percentage threshold %v must be within 0%% and 100%%: %s", s, val)
		}
		return Value{Percentage: pct}, false, nil
	}
	q, err := resource.ParseQuantity(val)
	if err != nil {
		return Value{}, false, err
	}
	if q.Sign() <= 0 {
		return Value{}, false, fmt.Errorf("eviction threshold %v must be positive: %s", s, q.String())
	}
	return Value{Quantity: &q}, false, nil
}

// parsePercentage keeps upstream's float32 rounding of the fraction.
func parsePercentage(val string) (float32, error) {
	f, err := strconv.ParseFloat(strings.TrimSuffix(val, "%"), 32)
	if err != nil {
		return 0, err
	}
	return float32(f) / 100, nil
}

func parseGracePeriod(periods map[string]string, s Signal) (time.Duration, error) {
	val, ok := periods[string(s)]
	if !ok {
		return 0, fmt.Errorf("grace period must be specified for the soft eviction threshold %v", s)
	}
	d, err := time.ParseDuration(val)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("invalid eviction grace period specified: %v, must be a positive value", val)
	}
	return d, nil
}

func parseMinReclaims(statements map[string]string) (map[Signal]Value, error) {
	out := map[Signal]Value{}
	for name, val := range statements {
		s := Signal(name)
		if _, ok := signalInfos[s]; !ok {
			return nil, fmt.Errorf("unsupported eviction signal %v", name)
		}
		if strings.HasSuffix(val, "%") {
			pct, err := parsePercentage(val)
			if err != nil {
				return nil, err
			}
			if pct <= 0 {
				return nil, fmt.Errorf("eviction percentage minimum reclaim %v must be positive: %s", s, val)
			}
			out[s] = Value{Percentage: pct}
			continue
		}
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return nil, err
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("negative eviction minimum reclaim specified for %v", s)
		}
		out[s] = Value{Quantity: &q}
	}
	return out, nil
}

// withContainerFsThresholds replaces any containerfs.* threshold with the
// nodefs one (one filesystem) or the imagefs one (a dedicated image
// filesystem, which also holds the containers' writable layers), as
// upstream does: nodelet supports no containerfs of its own, so the
// containerfs signals just follow the filesystem the writable layers are on.
func withContainerFsThresholds(in []Threshold, dedicatedImageFs bool) []Threshold {
	from := map[Signal]Signal{
		SignalContainerFsAvailable:  SignalNodeFsAvailable,
		SignalContainerFsInodesFree: SignalNodeFsInodesFree,
	}
	if dedicatedImageFs {
		from[SignalContainerFsAvailable] = SignalImageFsAvailable
		from[SignalContainerFsInodesFree] = SignalImageFsInodesFree
	}
	var out []Threshold
	for _, t := range in {
		if _, ok := from[t.Signal]; !ok {
			out = append(out, t)
		}
	}
	for _, cfs := range []Signal{SignalContainerFsAvailable, SignalContainerFsInodesFree} {
		for _, t := range in {
			if t.Signal == from[cfs] {
				t.Signal = cfs
				out = append(out, t)
			}
		}
	}
	return out
}
