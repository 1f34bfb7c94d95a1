package topologymanager

import (
	"fmt"
	"slices"
	"strconv"

	"k8s.io/klog/v2"
)

// The topology manager policy options (--topology-manager-policy-options). Both are GA
// in v1.37, so no feature gate guards them.
const (
	PreferClosestNUMANodes = "prefer-closest-numa-nodes"
	MaxAllowableNUMANodes  = "max-allowable-numa-nodes"
)

// defaultMaxAllowableNUMANodes bounds the NUMA nodes the topology manager handles: the
// hints are subsets of the nodes, so their number grows as 2^nodes.
const defaultMaxAllowableNUMANodes = 8

// PolicyOptions are the parsed policy options.
type PolicyOptions struct {
	// PreferClosestNUMA picks, among equally wide affinities, the one whose NUMA nodes
	// are closest to each other rather than the one with the lowest IDs.
	PreferClosestNUMA     bool
	MaxAllowableNUMANodes int
}

// NewPolicyOptions parses the options, with upstream's errors for unknown options and
// bad values.
func NewPolicyOptions(options map[string]string) (PolicyOptions, error) {
	opts := PolicyOptions{MaxAllowableNUMANodes: defaultMaxAllowableNUMANodes}
	// Sorted so that, of several bad options, the same one is always reported.
	names := make([]string, 0, len(options))
	for name := range options {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := opts.set(name, options[name]); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

func (o *PolicyOptions) set(name, value string) error {
	switch name {
	case PreferClosestNUMANodes:
		v, err := strconv.ParseBool(value)
		if err != nil {
			return fmt.Errorf("bad value for option %q: %w", name, err)
		}
		o.PreferClosestNUMA = v
	case MaxAllowableNUMANodes:
		v, err := strconv.Atoi(value)
		if err != nil {
			return fmt.Errorf("unable to convert policy option to integer %q: %w", name, err)
		}
		if v < defaultMaxAllowableNUMANodes {
			return fmt.Errorf("the minimum value of %q should not be less than %v", name, defaultMaxAllowableNUMANodes)
		}
		if v > defaultMaxAllowableNUMANodes {
			klog.InfoS("WARNING: the value of max-allowable-numa-nodes is more than the default recommended value", "max-allowable-numa-nodes", v, "defaultMaxAllowableNUMANodes", defaultMaxAllowableNUMANodes)
		}
		o.MaxAllowableNUMANodes = v
	default:
		return fmt.Errorf("unknown Topology Manager Policy option: %q", name)
	}
	return nil
}
