package cpumanager

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/nodelet/nodelet/pkg/node/cpumanager/topology"
)

// The static policy's options (cpuManagerPolicyOptions), upstream's names.
const (
	FullPCPUsOnlyOption             = "full-pcpus-only"
	DistributeCPUsAcrossNUMAOption  = "distribute-cpus-across-numa"
	AlignBySocketOption             = "align-by-socket"
	DistributeCPUsAcrossCoresOption = "distribute-cpus-across-cores"
	StrictCPUReservationOption      = "strict-cpu-reservation"
	PreferAlignByUncoreCacheOption  = "prefer-align-cpus-by-uncorecache"
)

// optionLevel is an option's maturity, which decides the feature gate it needs.
type optionLevel int

const (
	alpha optionLevel = iota // needs CPUManagerPolicyAlphaOptions (off by default)
	beta                     // needs CPUManagerPolicyBetaOptions (on by default)
	ga                       // always available
)

// optionLevels are the options' maturity in upstream v1.37.
var optionLevels = map[string]optionLevel{
	AlignBySocketOption:             alpha,
	DistributeCPUsAcrossCoresOption: alpha,
	DistributeCPUsAcrossNUMAOption:  beta,
	FullPCPUsOnlyOption:             ga,
	StrictCPUReservationOption:      ga,
	PreferAlignByUncoreCacheOption:  ga,
}

// policyOptions are the parsed static policy options.
type policyOptions struct {
	// fullPCPUsOnly admits only requests of whole cores (SMT alignment).
	fullPCPUsOnly bool
	// distributeAcrossNUMA spreads a request that needs several NUMA nodes evenly.
	distributeAcrossNUMA bool
	// alignBySocket widens a NUMA affinity to its sockets.
	alignBySocket bool
	// distributeAcrossCores takes threads of different cores first.
	distributeAcrossCores bool
	// strictReservation keeps the reserved CPUs out of the shared pool too.
	strictReservation bool
	// preferUncoreCache packs requests into as few uncore caches as possible.
	preferUncoreCache bool
}

// optionGates are the two feature gates of policy options.
type optionGates struct {
	alpha, beta bool
}

func (g optionGates) check(name string) error {
	level, known := optionLevels[name]
	switch {
	case !known:
		return fmt.Errorf("unknown CPU Manager Policy option: %q", name)
	case level == alpha && !g.alpha:
		return fmt.Errorf("CPU Manager Policy Alpha-level Options not enabled, but option %q provided", name)
	case level == beta && !g.beta:
		return fmt.Errorf("CPU Manager Policy Beta-level Options not enabled, but option %q provided", name)
	}
	return nil
}

// parsePolicyOptions checks and parses the options as upstream's NewStaticPolicyOptions
// (in name order, so that the same configuration always reports the same error).
func parsePolicyOptions(raw map[string]string, gates optionGates) (policyOptions, error) {
	var opts policyOptions
	fields := map[string]*bool{
		FullPCPUsOnlyOption:             &opts.fullPCPUsOnly,
		DistributeCPUsAcrossNUMAOption:  &opts.distributeAcrossNUMA,
		AlignBySocketOption:             &opts.alignBySocket,
		DistributeCPUsAcrossCoresOption: &opts.distributeAcrossCores,
		StrictCPUReservationOption:      &opts.strictReservation,
		PreferAlignByUncoreCacheOption:  &opts.preferUncoreCache,
	}
	names := make([]string, 0, len(raw))
	for name := range raw {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := gates.check(name); err != nil {
			return opts, err
		}
		v, err := strconv.ParseBool(raw[name])
		if err != nil {
			return opts, fmt.Errorf("bad value for option %q: %w", name, err)
		}
		*fields[name] = v
	}
	return opts, opts.checkCombinations()
}

// checkCombinations refuses the pairs of options upstream refuses together.
func (o policyOptions) checkCombinations() error {
	conflicts := []struct {
		a, b         bool
		nameA, nameB string
	}{
		{o.fullPCPUsOnly, o.distributeAcrossCores, FullPCPUsOnlyOption, DistributeCPUsAcrossCoresOption},
		{o.distributeAcrossNUMA, o.distributeAcrossCores, DistributeCPUsAcrossNUMAOption, DistributeCPUsAcrossCoresOption},
		{o.preferUncoreCache, o.distributeAcrossCores, PreferAlignByUncoreCacheOption, DistributeCPUsAcrossCoresOption},
		{o.preferUncoreCache, o.distributeAcrossNUMA, PreferAlignByUncoreCacheOption, DistributeCPUsAcrossNUMAOption},
	}
	for _, c := range conflicts {
		if c.a && c.b {
			return fmt.Errorf("static policy options %s and %s can not be used at the same time", c.nameA, c.nameB)
		}
	}
	return nil
}

// singleNUMANodePolicy is the topology manager policy align-by-socket contradicts.
const singleNUMANodePolicy = "single-numa-node"

// validateForMachine refuses options the machine or the topology manager policy cannot
// honour (upstream's ValidateStaticPolicyOptions, messages included).
func (o policyOptions) validateForMachine(topo *topology.CPUTopology, topologyManagerPolicy string) error {
	if !o.alignBySocket {
		return nil
	}
	if topologyManagerPolicy == singleNUMANodePolicy {
		//lint:ignore ST1005 upstream's message, kept verbatim (typo included)
		return fmt.Errorf("Topolgy manager %s policy is incompatible with CPUManager %s policy option", singleNUMANodePolicy, AlignBySocketOption)
	}
	if topo.NumSockets > topo.NumNUMANodes {
		//lint:ignore ST1005 upstream's message, kept verbatim
		return fmt.Errorf("Align by socket is not compatible with hardware where number of sockets are more than number of NUMA")
	}
	return nil
}
