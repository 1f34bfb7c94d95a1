package cpumanager

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/node/cpumanager/topology"
	"github.com/nodelet/nodelet/pkg/node/topologymanager"
)

type allocCase struct {
	name        string
	topo        *topology.CPUTopology
	numReserved int
	reserved    cpuset.CPUSet
	options     map[string]string
	affinity    topologymanager.Store
	assignments map[string]map[string]cpuset.CPUSet
	defaultSet  cpuset.CPUSet
	pod         *v1.Pod
	wantErr     error  // compared with reflect.DeepEqual, or
	wantErrText string // compared with the message
	want        *cpuset.CPUSet
}

func set(cpus ...int) *cpuset.CPUSet {
	s := cpuset.New(cpus...)
	return &s
}

func runAllocCase(t *testing.T, tc allocCase) {
	t.Helper()
	p := testPolicy(t, tc.topo, tc.numReserved, tc.reserved, tc.options, tc.affinity)
	s := stateWith(tc.defaultSet, tc.assignments)
	container := &tc.pod.Spec.Containers[0]
	err := p.allocate(s, tc.pod, container)
	switch {
	case tc.wantErrText != "":
		if err == nil || err.Error() != tc.wantErrText {
			t.Fatalf("error = %v, want %q", err, tc.wantErrText)
		}
	case !reflect.DeepEqual(err, tc.wantErr):
		t.Fatalf("error = %#v, want %#v", err, tc.wantErr)
	}
	got, found := s.get(string(tc.pod.UID), container.Name)
	if tc.want == nil {
		if found {
			t.Fatalf("container got %s, want no assignment", got)
		}
		return
	}
	if !found || !got.Equals(*tc.want) {
		t.Fatalf("container got %s (found %v), want %s", got, found, *tc.want)
	}
	if !got.Intersection(s.defaultSet).IsEmpty() {
		t.Errorf("assigned %s overlaps the shared pool %s", got, s.defaultSet)
	}
}

// Upstream's TestStaticPolicyAdd cases that do not depend on the options (run with and
// without full-pcpus-only, as upstream runs them).
func TestStaticPolicyAllocateAnyOptions(t *testing.T) {
	cases := []allocCase{{
		name: "2 CPUs, single socket: the free core", topo: topoSingleSocketHT, numReserved: 1,
		assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {"fakeContainer100": cpuset.New(2, 3, 6, 7)}},
		defaultSet:  cpuset.New(0, 1, 4, 5), pod: makePod("fakePod", "fakeContainer3", "2000m", "2000m"),
		want: set(1, 5),
	}, {
		name: "6 CPUs, dual socket: the whole free socket", topo: topoDualSocketHT, numReserved: 1,
		assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {"fakeContainer100": cpuset.New(2)}},
		defaultSet:  cpuset.New(0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11), pod: makePod("fakePod", "fakeContainer3", "6000m", "6000m"),
		want: set(1, 3, 5, 7, 9, 11),
	}, {
		name: "6 CPUs, dual socket: three cores", topo: topoDualSocketHT, numReserved: 1,
		assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {"fakeContainer100": cpuset.New(1, 5)}},
		defaultSet:  cpuset.New(0, 2, 3, 4, 6, 7, 8, 9, 10, 11), pod: makePod("fakePod", "fakeContainer3", "6000m", "6000m"),
		want: set(2, 3, 4, 8, 9, 10),
	}, {
		name: "4 CPUs, no SMT: the free socket", topo: topoDualSocketNoHT, numReserved: 1,
		assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {"fakeContainer100": cpuset.New()}},
		defaultSet:  cpuset.New(0, 1, 3, 4, 5, 6, 7), pod: makePod("fakePod", "fakeContainer1", "4000m", "4000m"),
		want: set(4, 5, 6, 7),
	}, {
		name: "4 CPUs, no SMT: four cores", topo: topoDualSocketNoHT, numReserved: 1,
		assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {"fakeContainer100": cpuset.New(4, 5)}},
		defaultSet:  cpuset.New(0, 1, 3, 6, 7), pod: makePod("fakePod", "fakeContainer1", "4000m", "4000m"),
		want: set(1, 3, 6, 7),
	}, {
		name: "8 CPUs: a socket and a core", topo: topoDualSocketHT, numReserved: 1,
		assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {"fakeContainer100": cpuset.New(2)}},
		defaultSet:  cpuset.New(0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11), pod: makePod("fakePod", "fakeContainer3", "8000m", "8000m"),
		want: set(1, 3, 4, 5, 7, 9, 10, 11),
	}, {
		name: "Burstable pod: shared pool", topo: topoSingleSocketHT, numReserved: 1,
		defaultSet: cpuset.New(0, 1, 2, 3, 4, 5, 6, 7), pod: makePod("fakePod", "fakeContainer1", "1000m", "2000m"),
	}, {
		name: "non-integer request: shared pool", topo: topoSingleSocketHT, numReserved: 1,
		defaultSet: cpuset.New(0, 1, 2, 3, 4, 5, 6, 7), pod: makePod("fakePod", "fakeContainer4", "977m", "977m"),
	}}
	for _, tc := range cases {
		for _, options := range []map[string]string{nil, {FullPCPUsOnlyOption: "true"}} {
			t.Run(tc.name, func(t *testing.T) {
				tc.options = options
				runAllocCase(t, tc)
			})
		}
	}
}

func TestStaticPolicyAllocateDefaultOptions(t *testing.T) {
	cases := []allocCase{{
		name: "1 CPU: the sibling of the reserved CPU", topo: topoSingleSocketHT, numReserved: 1,
		defaultSet: cpuset.New(0, 1, 2, 3, 4, 5, 6, 7), pod: makePod("fakePod", "fakeContainer2", "1000m", "1000m"),
		want: set(4),
	}, {
		name: "more than unreserved", topo: topoSingleSocketHT, numReserved: 1,
		defaultSet: cpuset.New(0, 1, 2, 3, 4, 5, 6, 7), pod: makePod("fakePod", "fakeContainer2", "8000m", "8000m"),
		wantErrText: "not enough cpus available to satisfy request: requested=8, available=7",
	}, {
		name: "already assigned: same CPUs", topo: topoSingleSocketHT, numReserved: 1,
		assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {"fakeContainer3": cpuset.New(2, 3, 6, 7)}},
		defaultSet:  cpuset.New(0, 1, 4, 5), pod: makePod("fakePod", "fakeContainer3", "4000m", "4000m"),
		want: set(2, 3, 6, 7),
	}, {
		name: "10 CPUs, 8 free", topo: topoDualSocketHT, numReserved: 1,
		assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {"fakeContainer100": cpuset.New(1, 2, 3)}},
		defaultSet:  cpuset.New(0, 4, 5, 6, 7, 8, 9, 10, 11), pod: makePod("fakePod", "fakeContainer5", "10000m", "10000m"),
		wantErrText: "not enough cpus available to satisfy request: requested=10, available=8",
	}, {
		name: "2 CPUs, 1 free", topo: topoSingleSocketHT, numReserved: 1,
		assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {"fakeContainer100": cpuset.New(1, 2, 3, 4, 5, 6)}},
		defaultSet:  cpuset.New(0, 7), pod: makePod("fakePod", "fakeContainer5", "2000m", "2000m"),
		wantErrText: "not enough cpus available to satisfy request: requested=2, available=1",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runAllocCase(t, tc) })
	}
}

func TestStaticPolicyFullPCPUsOnly(t *testing.T) {
	full := map[string]string{FullPCPUsOnlyOption: "true"}
	cases := []allocCase{{
		name: "1 CPU is not a whole core", topo: topoSingleSocketHT, numReserved: 1, options: full,
		defaultSet: cpuset.New(0, 1, 2, 3, 4, 5, 6, 7), pod: makePod("fakePod", "fakeContainer2", "1000m", "1000m"),
		wantErr: SMTAlignmentError{RequestedCPUs: 1, CpusPerCore: 2},
	}, {
		// Reserved 1 and 6 leave cores 0 and 1 unusable: 8 CPUs on whole cores.
		name: "reserved CPUs' siblings counted out", topo: topoDualSocketHT, numReserved: 2, reserved: cpuset.New(1, 6), options: full,
		defaultSet: cpuset.New(0, 2, 3, 4, 5, 7, 8, 9, 10, 11), pod: makePod("fakePod", "fakeContainerBug113537_1", "10000m", "10000m"),
		wantErr: SMTAlignmentError{RequestedCPUs: 10, CpusPerCore: 2, AvailablePhysicalCPUs: 8, CausedByPhysicalCPUs: true},
	}, {
		name: "reservation by topology takes a whole core", topo: topoDualSocketHT, numReserved: 2, options: full,
		defaultSet: cpuset.New(1, 2, 3, 4, 5, 7, 8, 9, 10, 11), pod: makePod("fakePod", "fakeContainerBug113537_2", "10000m", "10000m"),
		want: set(1, 2, 3, 4, 5, 7, 8, 9, 10, 11),
	}, {
		name: "already assigned", topo: topoDualSocketHT, numReserved: 4, reserved: cpuset.New(0, 1, 6, 7), options: full,
		assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {"fakeContainer": cpuset.New(2, 3, 4, 8, 9, 10)}},
		defaultSet:  cpuset.New(0, 1, 5, 6, 7, 11), pod: makePod("fakePod", "fakeContainer", "6", "6"),
		want: set(2, 3, 4, 8, 9, 10),
	}, {
		name: "not enough whole cores", topo: topoDualSocketHT, numReserved: 4, reserved: cpuset.New(0, 1, 6, 7), options: full,
		defaultSet: cpuset.New(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), pod: makePod("fakePod", "fakeContainer", "10", "10"),
		wantErr: SMTAlignmentError{RequestedCPUs: 10, CpusPerCore: 2, AvailablePhysicalCPUs: 8, CausedByPhysicalCPUs: true},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runAllocCase(t, tc) })
	}
}

func TestSMTAlignmentErrorText(t *testing.T) {
	tests := []struct {
		err  SMTAlignmentError
		want string
	}{
		{SMTAlignmentError{RequestedCPUs: 12, CpusPerCore: 4}, "SMT Alignment Error: requested 12 cpus not multiple cpus per core = 4"},
		{SMTAlignmentError{RequestedCPUs: 14, CpusPerCore: 4, AvailablePhysicalCPUs: 12, CausedByPhysicalCPUs: true},
			"SMT Alignment Error: not enough free physical CPUs: available physical CPUs = 12, requested CPUs = 14, CPUs per core = 4"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		var typed interface{ Type() string }
		if !errors.As(error(tt.err), &typed) || typed.Type() != "SMTAlignmentError" {
			t.Errorf("Type() of %v is not SMTAlignmentError", tt.err)
		}
	}
}

func TestStaticPolicyNUMAAffinity(t *testing.T) {
	hint := fixedAffinity{topologymanager.TopologyHint{NUMANodeAffinity: topologymanager.MustMask(0, 2), Preferred: true}}
	cases := []allocCase{{
		// NUMA 0 and 2 are on sockets 0 and 1: CPU 11 (NUMA 1, socket 0) is aligned too.
		name: "align-by-socket widens to the sockets", topo: topoDualSocketMultiNumaPerSocketHT, numReserved: 1,
		options: map[string]string{AlignBySocketOption: "true"}, affinity: hint,
		defaultSet: cpuset.New(2, 11, 21, 22), pod: makePod("fakePod", "fakeContainer2", "2000m", "2000m"),
		want: set(2, 11),
	}, {
		name: "NUMA nodes of the hint only", topo: topoDualSocketMultiNumaPerSocketHT, numReserved: 1,
		options: map[string]string{AlignBySocketOption: "false"}, affinity: hint,
		defaultSet: cpuset.New(2, 11, 21, 22), pod: makePod("fakePod", "fakeContainer2", "2000m", "2000m"),
		want: set(2, 21),
	}, {
		// Socket 1 has more free CPUs, but the hint says NUMA node 1.
		name: "the hint beats the best fit", topo: topoDualSocketHT, numReserved: 1,
		affinity:   fixedAffinity{topologymanager.TopologyHint{NUMANodeAffinity: topologymanager.MustMask(1)}},
		defaultSet: cpuset.New(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), pod: makePod("p", "c", "2", "2"),
		want: set(1, 7),
	}, {
		// Only 2 CPUs left on NUMA 1: the third comes from NUMA 0, the free half of
		// core 0 (whose other half is reserved) rather than a whole free core.
		name: "the rest from outside the hint", topo: topoDualSocketHT, numReserved: 1,
		affinity:   fixedAffinity{topologymanager.TopologyHint{NUMANodeAffinity: topologymanager.MustMask(1)}},
		defaultSet: cpuset.New(0, 2, 3, 4, 6, 8, 9, 10), pod: makePod("p", "c", "3", "3"),
		want: set(3, 9, 6),
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runAllocCase(t, tc) })
	}
}

// Upstream's TestStaticPolicyAddWithUncoreAlignment: with uncore caches 0 and 12 partly
// reserved and left out, a pod of up to one cache's worth lands in cache 1.
func TestStaticPolicyUncoreAlignment(t *testing.T) {
	topo := topoDualSocketSingleNumaPerSocketSMTUncore
	reserved := cpuset.New(0, 1, 96, 97, 192, 193, 288, 289)
	defaultSet := topo.CPUDetails.CPUs().Difference(topo.CPUDetails.CPUsInUncoreCaches(0, 12))
	for name, requests := range map[string][]string{
		"one container saturating a cache": {"16"},
		"main and sidecar":                 {"12", "2"},
		"sidecar and main":                 {"2", "12"},
		"main and many sidecars":           {"10", "2", "2", "2"},
	} {
		t.Run(name, func(t *testing.T) {
			p := testPolicy(t, topo, 8, reserved, map[string]string{FullPCPUsOnlyOption: "true", PreferAlignByUncoreCacheOption: "true"}, nil)
			s := stateWith(defaultSet, nil)
			pod := makeMultiContainerPod("uncore", nil, requests)
			all := cpuset.New()
			for i := range pod.Spec.Containers {
				if err := p.allocate(s, pod, &pod.Spec.Containers[i]); err != nil {
					t.Fatalf("allocate %s: %v", pod.Spec.Containers[i].Name, err)
				}
				cpus, _ := s.get("uncore", pod.Spec.Containers[i].Name)
				all = all.Union(cpus)
			}
			caches := topo.CPUDetails.KeepOnly(all).UncoreCaches()
			if !caches.Equals(cpuset.New(1)) {
				t.Errorf("pod's CPUs %s are in uncore caches %s, want 1", all, caches)
			}
		})
	}
}

func TestStaticPolicyDistributeAcrossNUMA(t *testing.T) {
	// 24 CPUs go 12 and 12 to two NUMA nodes rather than filling one and taking 4 of
	// another. NUMA node 0 gave CPU 0 to the reservation: leaving it alone keeps the
	// free CPUs most balanced, so the first best pair is NUMA nodes 1 and 2.
	p := testPolicy(t, topoDualSocketMultiNumaPerSocketHT, 1, cpuset.New(), map[string]string{DistributeCPUsAcrossNUMAOption: "true"}, nil)
	s := stateWith(mustParse(t, "0-79"), nil)
	pod := makePod("p", "c", "24", "24")
	if err := p.allocate(s, pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	got, _ := s.get("p", "c")
	if want := mustParse(t, "10-15,20-25,50-55,60-65"); !got.Equals(want) {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestStaticPolicyStart(t *testing.T) {
	strict := map[string]string{StrictCPUReservationOption: "true"}
	tests := []struct {
		name        string
		numReserved int
		options     map[string]string
		assignments map[string]map[string]cpuset.CPUSet
		defaultSet  cpuset.CPUSet
		wantDefault cpuset.CPUSet
		wantErr     string
	}{
		{name: "valid state kept", assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {"0": cpuset.New(0)}},
			defaultSet: mustParse(t, "1-11"), wantDefault: mustParse(t, "1-11")},
		{name: "empty state: every CPU shared", numReserved: 1, defaultSet: cpuset.New(), wantDefault: mustParse(t, "0-11")},
		{name: "empty state, strict: reserved ones left out", numReserved: 2, options: strict, defaultSet: cpuset.New(), wantDefault: mustParse(t, "1-5,7-11")},
		{name: "reserved not shared", numReserved: 2, defaultSet: cpuset.New(0, 1),
			wantErr: `not all reserved cpus: "0,6" are present in defaultCpuSet: "0-1"`},
		{name: "strictly reserved shared", numReserved: 2, options: strict, defaultSet: cpuset.New(0, 1),
			wantErr: `some of strictly reserved cpus: "0" are present in defaultCpuSet: "0-1"`},
		{name: "assigned and shared", assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {"0": cpuset.New(0, 1, 2)}},
			defaultSet: mustParse(t, "2-11"), wantErr: `pod: fakePod, container: 0 cpuset: "0-2" overlaps with default cpuset "2-11"`},
		{name: "CPU 12 gone", assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {"0": cpuset.New(0, 1, 2), "1": cpuset.New(3, 4)}},
			defaultSet: mustParse(t, "5-12"), wantErr: `current set of available CPUs "0-11" doesn't match with CPUs in state "0-12"`},
		{name: "CPU 11 new", assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {"0": cpuset.New(0, 1, 2), "1": cpuset.New(3, 4)}},
			defaultSet: mustParse(t, "5-10"), wantErr: `current set of available CPUs "0-11" doesn't match with CPUs in state "0-10"`},
		{name: "assignments without shared pool", assignments: map[string]map[string]cpuset.CPUSet{"p": {"c": cpuset.New(1)}},
			defaultSet: cpuset.New(), wantErr: "default cpuset cannot be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPolicy(t, topoDualSocketHT, tt.numReserved, cpuset.New(), tt.options, nil)
			s := stateWith(tt.defaultSet, tt.assignments)
			err := p.start(s)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("start error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !s.defaultSet.Equals(tt.wantDefault) {
				t.Errorf("shared pool %s, want %s", s.defaultSet, tt.wantDefault)
			}
		})
	}
}

func TestStaticPolicyRemove(t *testing.T) {
	p := testPolicy(t, topoSingleSocketHT, 1, cpuset.New(), nil, nil)
	s := stateWith(cpuset.New(0, 4, 3, 7), map[string]map[string]cpuset.CPUSet{
		"pod": {"a": cpuset.New(1, 2, 5, 6), "b": cpuset.New(1, 5)}, // b reuses a's CPUs
	})
	p.removeContainer(s, "pod", "b")
	if !s.defaultSet.Equals(cpuset.New(0, 3, 4, 7)) {
		t.Errorf("CPUs still held by a were freed: shared %s", s.defaultSet)
	}
	p.removeContainer(s, "pod", "a")
	p.removeContainer(s, "pod", "unknown")
	if !s.defaultSet.Equals(mustParse(t, "0-7")) || len(s.assignments) != 0 {
		t.Errorf("after removing all: shared %s, assignments %v", s.defaultSet, s.assignments)
	}
}

func TestReservedCPUs(t *testing.T) {
	tests := []struct {
		name        string
		topo        *topology.CPUTopology
		numReserved int
		reserved    cpuset.CPUSet
		options     map[string]string
		want        cpuset.CPUSet
		wantErr     string
	}{
		{name: "1 by topology", topo: topoSingleSocketHT, numReserved: 1, want: cpuset.New(0)},
		{name: "2 by topology: a whole core", topo: topoSingleSocketHT, numReserved: 2, want: cpuset.New(0, 4)},
		{name: "3 by topology: the rest on the same core's socket", topo: topoDualSocketHT, numReserved: 3, want: cpuset.New(0, 6, 2)},
		{name: "2 by topology, spread over cores", topo: topoSingleSocketHT, numReserved: 2,
			options: map[string]string{DistributeCPUsAcrossCoresOption: "true"}, want: cpuset.New(0, 1)},
		{name: "given list", topo: topoDualSocketHT, numReserved: 2, reserved: cpuset.New(1, 6), want: cpuset.New(1, 6)},
		{name: "given list of another size", topo: topoDualSocketHT, numReserved: 3, reserved: cpuset.New(1, 6),
			wantErr: "[cpumanager] unable to reserve the required amount of CPUs (size of 1,6 did not equal 3)"},
		{name: "more than the machine", topo: topoSingleSocketHT, numReserved: 9,
			wantErr: "[cpumanager] unable to reserve the required amount of CPUs (size of  did not equal 9)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := parsePolicyOptions(tt.options, optionGates{alpha: true, beta: true})
			if err != nil {
				t.Fatal(err)
			}
			p, err := newStaticPolicy(tt.topo, opts, tt.numReserved, tt.reserved, nil, newMetrics())
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !p.reserved.Equals(tt.want) {
				t.Errorf("reserved %s, want %s", p.reserved, tt.want)
			}
		})
	}
}

func TestPolicyOptions(t *testing.T) {
	defaults := optionGates{beta: true}
	tests := []struct {
		name    string
		options map[string]string
		gates   optionGates
		want    policyOptions
		wantErr string
	}{
		{name: "GA options need no gate", options: map[string]string{FullPCPUsOnlyOption: "true", StrictCPUReservationOption: "true"},
			want: policyOptions{fullPCPUsOnly: true, strictReservation: true}},
		{name: "prefer-align-cpus-by-uncorecache is GA", options: map[string]string{PreferAlignByUncoreCacheOption: "true"},
			want: policyOptions{preferUncoreCache: true}},
		{name: "beta option on by default", options: map[string]string{DistributeCPUsAcrossNUMAOption: "true"},
			want: policyOptions{distributeAcrossNUMA: true}},
		{name: "beta option with the beta gate off", options: map[string]string{DistributeCPUsAcrossNUMAOption: "true"}, gates: optionGates{},
			wantErr: `CPU Manager Policy Beta-level Options not enabled, but option "distribute-cpus-across-numa" provided`},
		{name: "alpha option off by default", options: map[string]string{AlignBySocketOption: "true"},
			wantErr: `CPU Manager Policy Alpha-level Options not enabled, but option "align-by-socket" provided`},
		{name: "alpha option with its gate", options: map[string]string{DistributeCPUsAcrossCoresOption: "true"}, gates: optionGates{alpha: true, beta: true},
			want: policyOptions{distributeAcrossCores: true}},
		{name: "unknown option", options: map[string]string{"bogus": "true"},
			wantErr: `unknown CPU Manager Policy option: "bogus"`},
		{name: "bad value", options: map[string]string{FullPCPUsOnlyOption: "yes please"},
			wantErr: `bad value for option "full-pcpus-only": strconv.ParseBool: parsing "yes please": invalid syntax`},
		{name: "false is accepted", options: map[string]string{FullPCPUsOnlyOption: "false"}},
		{name: "full-pcpus-only with distribute-cpus-across-cores", gates: optionGates{alpha: true, beta: true},
			options: map[string]string{FullPCPUsOnlyOption: "true", DistributeCPUsAcrossCoresOption: "true"},
			wantErr: "static policy options full-pcpus-only and distribute-cpus-across-cores can not be used at the same time"},
		{name: "uncore cache with distribute-cpus-across-numa",
			options: map[string]string{PreferAlignByUncoreCacheOption: "true", DistributeCPUsAcrossNUMAOption: "true"},
			wantErr: "static policy options prefer-align-cpus-by-uncorecache and distribute-cpus-across-numa can not be used at the same time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gates := tt.gates
			if gates == (optionGates{}) && !strings.Contains(tt.name, "gate off") {
				gates = defaults
			}
			got, err := parsePolicyOptions(tt.options, gates)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestAlignBySocketValidation(t *testing.T) {
	opts := policyOptions{alignBySocket: true}
	if err := opts.validateForMachine(topoDualSocketMultiNumaPerSocketHT, "single-numa-node"); err == nil ||
		err.Error() != "Topolgy manager single-numa-node policy is incompatible with CPUManager align-by-socket policy option" {
		t.Errorf("with single-numa-node: %v", err)
	}
	if err := opts.validateForMachine(topoDualSocketHT, "none"); err == nil ||
		err.Error() != "Align by socket is not compatible with hardware where number of sockets are more than number of NUMA" {
		t.Errorf("with more sockets than NUMA nodes: %v", err)
	}
	if err := opts.validateForMachine(topoDualSocketMultiNumaPerSocketHT, "restricted"); err != nil {
		t.Errorf("valid: %v", err)
	}
}

func TestGuaranteedCPUs(t *testing.T) {
	sidecar := v1.ContainerRestartPolicyAlways
	tests := []struct {
		name string
		pod  *v1.Pod
		want int
	}{
		{"app containers add up", makeMultiContainerPod("p", nil, []string{"2", "3"}), 5},
		{"the biggest init container", makeMultiContainerPod("p", []string{"6", "1"}, []string{"4"}), 6},
		{"the app containers when bigger", makeMultiContainerPod("p", []string{"2"}, []string{"4"}), 4},
		{"fractional requests count for nothing", makeMultiContainerPod("p", nil, []string{"1500m", "2"}), 2},
	}
	withSidecar := makeMultiContainerPod("p", []string{"2", "3"}, []string{"4"})
	withSidecar.Spec.InitContainers[0].RestartPolicy = &sidecar
	// The sidecar (2) runs with the later init container (3) and with the app (4).
	tests = append(tests, struct {
		name string
		pod  *v1.Pod
		want int
	}{"sidecar counted with what runs after it", withSidecar, 6})
	for _, tt := range tests {
		if got := podGuaranteedCPUs(tt.pod); got != tt.want {
			t.Errorf("%s: podGuaranteedCPUs = %d, want %d", tt.name, got, tt.want)
		}
	}
	podLevel := makePod("p", "c", "2", "2")
	podLevel.Spec.Resources = &v1.ResourceRequirements{Limits: resources("2", "2").Limits, Requests: resources("2", "2").Requests}
	p := testPolicy(t, topoSingleSocketHT, 1, cpuset.New(), nil, nil)
	s := stateWith(mustParse(t, "0-7"), nil)
	if err := p.allocate(s, podLevel, &podLevel.Spec.Containers[0]); err != nil || len(s.assignments) != 0 {
		t.Errorf("pod-level resources: err %v, assignments %v; want the shared pool", err, s.assignments)
	}
}
