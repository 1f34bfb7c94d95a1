package nodestatus

import (
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The hard-eviction signals that reserve capacity from allocatable.
const (
	signalMemoryAvailable = "memory.available"
	signalNodeFsAvailable = "nodefs.available"
)

// threshold is one hard-eviction threshold: a quantity, or a fraction of capacity.
type threshold struct {
	quantity *resource.Quantity
	fraction float64
}

// amount is the threshold in bytes of capacity.
func (t threshold) amount(capacity resource.Quantity) resource.Quantity {
	if t.quantity != nil {
		return t.quantity.DeepCopy()
	}
	return *resource.NewQuantity(int64(float64(capacity.Value())*t.fraction), resource.BinarySI)
}

// hardEvictionThresholds parses the evictionHard entries that reserve capacity, as
// upstream's eviction config parser does: "0%" and "100%" mean no threshold.
func hardEvictionThresholds(evictionHard map[string]string) (map[v1.ResourceName]threshold, error) {
	out := map[v1.ResourceName]threshold{}
	for signal, res := range map[string]v1.ResourceName{
		signalMemoryAvailable: v1.ResourceMemory,
		signalNodeFsAvailable: v1.ResourceEphemeralStorage,
	} {
		val, ok := evictionHard[signal]
		if !ok {
			continue
		}
		t, ok, err := parseThreshold(val)
		if err != nil {
			return nil, fmt.Errorf("evictionHard %s: %w", signal, err)
		}
		if ok {
			out[res] = t
		}
	}
	return out, nil
}

func parseThreshold(val string) (threshold, bool, error) {
	if pct, ok := strings.CutSuffix(val, "%"); ok {
		if val == "0%" || val == "100%" {
			return threshold{}, false, nil
		}
		f, err := strconv.ParseFloat(pct, 32)
		if err != nil {
			return threshold{}, false, fmt.Errorf("invalid percentage %q", val)
		}
		if f < 0 || f > 100 {
			return threshold{}, false, fmt.Errorf("percentage %q must be within 0%% and 100%%", val)
		}
		// Upstream parses the percentage as a float32 fraction; keep its rounding.
		return threshold{fraction: float64(float32(f) / 100)}, true, nil
	}
	q, err := resource.ParseQuantity(val)
	if err != nil {
		return threshold{}, false, err
	}
	if q.Sign() <= 0 {
		return threshold{}, false, fmt.Errorf("threshold must be positive: %s", val)
	}
	return threshold{quantity: &q}, true, nil
}

// reservation is what node allocatable withholds from each resource of capacity:
// systemReserved + kubeReserved + the hard-eviction threshold (upstream's container
// manager GetNodeAllocatableReservation). Only resources in capacity are reserved.
func reservation(capacity, systemReserved, kubeReserved v1.ResourceList, eviction map[v1.ResourceName]threshold) v1.ResourceList {
	out := v1.ResourceList{}
	for name, capQ := range capacity {
		value := resource.NewQuantity(0, resource.DecimalSI)
		if q, ok := systemReserved[name]; ok {
			value.Add(q)
		}
		if q, ok := kubeReserved[name]; ok {
			value.Add(q)
		}
		if t, ok := eviction[name]; ok {
			value.Add(t.amount(capQ))
		}
		if !value.IsZero() {
			out[name] = *value
		}
	}
	return out
}

// allocatable is capacity less the reservation, never negative, with every huge page
// pool's size also taken from memory (upstream's MachineInfo setter).
func allocatable(capacity, reserved v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for name, capQ := range capacity {
		value := capQ.DeepCopy()
		if r, ok := reserved[name]; ok {
			value.Sub(r)
		}
		if value.Sign() < 0 {
			value.Set(0)
		}
		out[name] = value
	}
	for name, capQ := range capacity {
		if !isHugePages(name) {
			continue
		}
		mem := out[v1.ResourceMemory]
		mem.Sub(capQ)
		if mem.Sign() < 0 {
			mem.Set(0)
		}
		out[v1.ResourceMemory] = mem
	}
	return out
}

func isHugePages(name v1.ResourceName) bool {
	return strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix)
}

// hugePagesResource names a huge page pool by its page size, e.g. "hugepages-2Mi".
func hugePagesResource(pageSizeKiB uint64) v1.ResourceName {
	size := resource.NewQuantity(int64(pageSizeKiB*1024), resource.BinarySI)
	return v1.ResourceName(v1.ResourceHugePagesPrefix + size.String())
}

// NodeAllocatableReservation is what node allocatable withholds from capacity for the
// options' systemReserved, kubeReserved and hard-eviction thresholds; the memory
// manager's reservedMemory must add up to it (upstream's GetNodeAllocatableReservation).
func NodeAllocatableReservation(o Options, capacity v1.ResourceList) (v1.ResourceList, error) {
	eviction, err := hardEvictionThresholds(o.EvictionHard)
	if err != nil {
		return nil, err
	}
	return reservation(capacity, o.SystemReserved, o.KubeReserved, eviction), nil
}
