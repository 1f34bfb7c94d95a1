package cpumanager

import (
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/node/cpumanager/topology"
)

type takeCase struct {
	name      string
	topo      *topology.CPUTopology
	available string
	n         int
	want      string // "" for the empty set
	wantErr   string
}

// commonTakeCases are upstream's cases that both algorithms answer alike
// (cpu_assignment_test.go's commonTakeByTopologyTestCases).
var commonTakeCases = []takeCase{
	{"more than available", topoSingleSocketHT, "0,2,4,6", 5, "", "not enough cpus available to satisfy request: requested=5, available=4"},
	{"zero cpus", topoSingleSocketHT, "0-7", 0, "", ""},
	{"one cpu", topoSingleSocketHT, "0-7", 1, "0", ""},
	// Core 2 (CPU 6) is the only half-taken core: fill it rather than break another.
	{"one cpu, some taken", topoSingleSocketHT, "1,3,5-7", 1, "6", ""},
	{"two cpus: a whole core", topoSingleSocketHT, "0-7", 2, "0,4", ""},
	{"all cpus", topoSingleSocketHT, "0-7", 8, "0-7", ""},
	{"two cpus, only one core wholly free", topoSingleSocketHT, "0-3,6", 2, "2,6", ""},
	{"a socket's worth: the whole socket", topoDualSocketHT, "0-11", 6, "0,2,4,6,8,10", ""},
	{"a socket's worth on multi-NUMA sockets", topoDualSocketMultiNumaPerSocketHT, "0-79", 40, "0-19,40-59", ""},
	{"a NUMA node's worth", topoDualSocketMultiNumaPerSocketHT, "0-79", 20, "0-9,40-49", ""},
	{"a NUMA node's worth, NUMA 0 taken", topoDualSocketMultiNumaPerSocketHT, "10-39,50-79", 20, "10-19,50-59", ""},
	{"a socket and a NUMA node", topoDualSocketMultiNumaPerSocketHT, "0-79", 60, "0-29,40-69", ""},
	{"a socket and a NUMA node, first core taken", topoDualSocketMultiNumaPerSocketHT, "1-39,41-79", 60, "10-39,50-79", ""},
}

func runTakeCases(t *testing.T, cases []takeCase, take func(tc takeCase) (cpuset.CPUSet, error)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := take(tc)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if want := mustParse(t, tc.want); !got.Equals(want) {
				t.Errorf("took %q, want %q", got, want)
			}
		})
	}
}

func TestTakeByTopologyNUMAPacked(t *testing.T) {
	cases := append(append([]takeCase{}, commonTakeCases...),
		takeCase{"one cpu: the socket with fewer free CPUs", topoDualSocketHT, "1-5,7-11", 1, "2", ""},
		// 3 cores fill NUMA node 0, the 4th comes from node 1.
		takeCase{"4 cores over 2 NUMA nodes", topoDualSocketHT, "0-11", 8, "0-2,4,6-8,10", ""},
		takeCase{"32 cores: 3 NUMA nodes and 2 cores", topoDualSocketMultiNumaPerSocketHT, "0-79", 64, "0-31,40-71", ""},
	)
	runTakeCases(t, cases, func(tc takeCase) (cpuset.CPUSet, error) {
		return takeByTopologyNUMAPacked(tc.topo, mustParse(t, tc.available), tc.n, false, false)
	})
}

func TestTakeByTopologyPreferUncoreCache(t *testing.T) {
	cases := []takeCase{
		{"two whole caches and part of one", topoUncoreSingleSocketNoSMT, "1-15", 10, "1,2,4-11", ""},
		// All CPUs share cache 0: the first CPU of the first core is taken.
		{"one cpu, single cache", topoDualSocketHT, "1-5,7-11", 1, "1", ""},
		{"first cache of the first socket", topoUncoreDualSocketNoSMT, "0-15", 4, "0-3", ""},
		{"all free caches of the first socket", topoUncoreDualSocketNoSMT, "2-15", 6, "2-7", ""},
		{"first cache of the second socket", topoUncoreDualSocketNoSMT, "8-15", 4, "8-11", ""},
		{"first cache of the available NUMA node", topoUncoreSingleSocketMultiNuma, "3-8,12", 2, "4,5", ""},
		{"best cache, SMT", topoUncoreSingleSocketSMT, "2-7,10-15", 6, "4-6,12-14", ""},
		{"several caches, SMT", topoUncoreSingleSocketSMT, "1-7,9-15", 10, "1,4-7,9,12-15", ""},
	}
	runTakeCases(t, cases, func(tc takeCase) (cpuset.CPUSet, error) {
		return takeByTopologyNUMAPacked(tc.topo, mustParse(t, tc.available), tc.n, false, true)
	})
}

// distribute-cpus-across-cores: threads of distinct cores first, socket by socket.
func TestTakeByTopologySpread(t *testing.T) {
	cases := []takeCase{
		{"3 cpus, single socket", topoSingleSocketHT, "0-7", 3, "0-2", ""},
		{"2 cpus, dual socket", topoDualSocketHT, "0-11", 2, "0,2", ""},
		{"3 cpus, dual socket", topoDualSocketHT, "0-11", 3, "0,2,4", ""},
		{"6 cpus: whole socket", topoDualSocketHT, "0-11", 6, "0,2,4,6,8,10", ""},
		{"8 cpus", topoDualSocketHT, "0-11", 8, "0-4,6,8,10", ""},
		{"2 cpus, no SMT", topoDualSocketNoHT, "0-7", 2, "0,1", ""},
		{"8 cpus, multi-NUMA sockets", topoDualSocketMultiNumaPerSocketHT, "0-79", 8, "0-7", ""},
	}
	runTakeCases(t, cases, func(tc takeCase) (cpuset.CPUSet, error) {
		return takeByTopologyNUMAPacked(tc.topo, mustParse(t, tc.available), tc.n, true, false)
	})
}

func TestTakeByTopologyNUMADistributed(t *testing.T) {
	type distCase struct {
		takeCase
		groupSize int
	}
	var cases []distCase
	for _, tc := range commonTakeCases {
		cases = append(cases, distCase{tc, 1})
	}
	cases = append(cases, []distCase{
		{takeCase{"4 cores, 2 per NUMA node", topoDualSocketHT, "0-11", 8, "0-3,6-9", ""}, 1},
		{takeCase{"32 cores, 8 per NUMA node", topoDualSocketMultiNumaPerSocketHT, "0-79", 64, "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77", ""}, 1},
		{takeCase{"24 cores over the first 3 NUMA nodes", topoDualSocketMultiNumaPerSocketHT, "0-79", 48, "0-7,10-17,20-27,40-47,50-57,60-67", ""}, 1},
		{takeCase{"24 cores, all but 2 CPUs of NUMA 0", topoDualSocketMultiNumaPerSocketHT, "1-29,32-39,41-69,72-79", 48, "1-8,10-17,20-27,41-48,50-57,60-67", ""}, 1},
		{takeCase{"24 cores over the last 3 NUMA nodes, for balance", topoDualSocketMultiNumaPerSocketHT, "2-29,31-39,42-69,71-79", 48, "10-17,20-27,31-38,50-57,60-67,71-78", ""}, 1},
		{takeCase{"8 cores, 2 per NUMA node", topoDualSocketMultiNumaPerSocketHT, "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71", 16, "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71", ""}, 1},
		{takeCase{"one cpu", topoDualSocketHT, "1-5,7-11", 1, "1", ""}, 1},
		{takeCase{"one cpu, group of 2: packed fallback", topoDualSocketHT, "1-5,7-11", 1, "2", ""}, 2},
		{takeCase{"13 cores over 2 NUMA nodes", topoDualSocketMultiNumaPerSocketHT, "0-79", 26, "0-6,10-16,40-45,50-55", ""}, 1},
		{takeCase{"13 cores over 2 NUMA nodes, groups of 2", topoDualSocketMultiNumaPerSocketHT, "0-79", 26, "0-6,10-15,40-46,50-55", ""}, 2},
		{takeCase{"31 cores, remainder on NUMA 0 and 1", topoDualSocketMultiNumaPerSocketHT, "0-79", 62, "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76", ""}, 1},
		{takeCase{"31 cores, groups of 2, remainder on NUMA 0-2", topoDualSocketMultiNumaPerSocketHT, "0-79", 62, "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76", ""}, 2},
		{takeCase{"31 cores, remainder on NUMA 2 and 3 for balance", topoDualSocketMultiNumaPerSocketHT, "0-8,10-18,20-39,40-48,50-58,60-79", 62, "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77", ""}, 1},
		{takeCase{"31 cores, groups of 2, remainder on NUMA 0,2,3 for balance", topoDualSocketMultiNumaPerSocketHT, "0-8,10-18,20-39,40-48,50-58,60-79", 62, "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77", ""}, 2},
		{takeCase{"remainder only on NUMA nodes with room", topoDualSocketMultiNumaPerSocketHT, "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76", 34, "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74", ""}, 1},
		{takeCase{"upstream's live machine failure", topoDualSocketMultiNumaPerSocketHTLarge,
			"0,128,30,31,158,159,43-47,171-175,62,63,190,191,75-79,203-207,94,96,222,223,101-111,229-239,126,127,254,255", 28,
			"43-47,75-79,96,101-105,171-174,203-206,229-232", ""}, 1},
	}...)
	for _, dc := range cases {
		runTakeCases(t, []takeCase{dc.takeCase}, func(tc takeCase) (cpuset.CPUSet, error) {
			return takeByTopologyNUMADistributed(tc.topo, mustParse(t, tc.available), tc.n, dc.groupSize, false, false)
		})
	}
}

func TestAccumulatorSatisfiedAndFailed(t *testing.T) {
	a := newAccumulator(topoSingleSocketHT, cpuset.New(0, 1, 2), 4, false)
	a.take(cpuset.New(0))
	a.take(cpuset.New(1))
	if a.isSatisfied() || !a.isFailed() || a.needed != 2 {
		t.Errorf("after 2 of 4 with 1 left: satisfied=%v failed=%v needed=%d", a.isSatisfied(), a.isFailed(), a.needed)
	}
	if !a.free.CPUs().Equals(cpuset.New(2)) || !a.result.Equals(cpuset.New(0, 1)) {
		t.Errorf("free %s result %s", a.free.CPUs(), a.result)
	}
}

func TestIterateCombinations(t *testing.T) {
	var got [][]int
	iterateCombinations([]int{3, 1, 2}, 2, func(c []int) bool {
		got = append(got, c)
		return true
	})
	want := [][]int{{3, 1}, {3, 2}, {1, 2}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i][0] != want[i][0] || got[i][1] != want[i][1] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	n := 0
	iterateCombinations([]int{0, 1, 2, 3, 4}, 4, func([]int) bool { n++; return n < 2 })
	if n != 2 {
		t.Errorf("stopping early: %d calls, want 2", n)
	}
}
