package topologymanager

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestAverageFor(t *testing.T) {
	d := fourNodes().Distances
	cases := []struct {
		mask Mask
		want float64
	}{
		{0, 0},
		{MustMask(0), 10},
		{MustMask(0, 1), 10.5},        // (10+11+11+10)/4
		{MustMask(0, 2), 11},          // (10+12+12+10)/4
		{MustMask(0, 1, 2), 100 / 9.}, // rows 0,1,2 over columns 0,1,2: 33+33+34
	}
	for _, tc := range cases {
		if got := d.AverageFor(tc.mask); got != tc.want {
			t.Errorf("AverageFor(%s) = %v, want %v", tc.mask.Pretty(), got, tc.want)
		}
	}
	if got := d.Between(0, 7); got != 0 {
		t.Errorf("distance to an unknown node: %d, want 0", got)
	}
}

func TestClosest(t *testing.T) {
	n := fourNodes()
	cases := []struct {
		a, b, want Mask
	}{
		{MustMask(0), MustMask(0, 2), MustMask(0)},          // narrower first
		{MustMask(0, 1), MustMask(0, 2), MustMask(0, 1)},    // 10.5 < 11
		{MustMask(0, 3), MustMask(0, 2), MustMask(0, 2)},    // both 11: the lower mask
		{MustMask(0, 3), MustMask(0, 1), MustMask(0, 1)},    // 10.5 < 11
		{MustMask(2, 3), MustMask(0, 3), MustMask(2, 3)},    // 10.5 < 11
		{MustMask(1, 2), MustMask(0, 3), MustMask(1, 2)},    // both 11: the lower mask as a number (6 < 9)
		{MustMask(0, 3), MustMask(1, 2), MustMask(1, 2)},    // same, the other way round
		{MustMask(0, 1), MustMask(2, 3), MustMask(0, 1)},    // both 10.5
		{MustMask(0, 1, 2), MustMask(1), MustMask(1)},       // narrower first
		{MustMask(1, 2, 3), MustMask(0, 1), MustMask(0, 1)}, // narrower first
	}
	for _, tc := range cases {
		if got := n.Closest(tc.a, tc.b); got != tc.want {
			t.Errorf("Closest(%s, %s) = %s, want %s", tc.a.Pretty(), tc.b.Pretty(), got.Pretty(), tc.want.Pretty())
		}
	}
	if got := n.Narrowest(MustMask(0, 3), MustMask(1, 2)); got != MustMask(1, 2) {
		t.Errorf("Narrowest of two pairs: %s, want the lower 1,2", got.Pretty())
	}
}

func TestReadNUMAInfo(t *testing.T) {
	root := fakeSysfs(t, map[int][]uint64{0: {10, 21}, 1: {21, 10}})
	writeFile(t, root, "devices/system/node/possible", "0-1\n")
	info, err := ReadNUMAInfo(root)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(info.Nodes, info.Distances[0], info.Distances[1]); got != "[0 1] [10 21] [21 10]" {
		t.Errorf("nodes and distances: %s", got)
	}
	if info.DefaultAffinityMask() != MustMask(0, 1) {
		t.Errorf("default affinity %s", info.DefaultAffinityMask().Pretty())
	}
}

// TestReadNUMAInfoSparse: the kernel lists distances to online nodes only, so with
// nodes 0 and 2 the second number is node 2's.
func TestReadNUMAInfoSparse(t *testing.T) {
	info, err := ReadNUMAInfo(fakeSysfs(t, map[int][]uint64{0: {10, 20}, 2: {20, 10}}))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(info.Nodes) != "[0 2]" || info.Distances.Between(0, 2) != 20 || info.Distances.Between(2, 2) != 10 || info.Distances.Between(0, 1) != 0 {
		t.Errorf("nodes %v, distances %v", info.Nodes, info.Distances)
	}
	// A row already as long as the highest ID is taken as indexed by ID.
	info, err = ReadNUMAInfo(fakeSysfs(t, map[int][]uint64{0: {10, 11, 12, 12}, 2: {12, 12, 10, 11}}))
	if err != nil {
		t.Fatal(err)
	}
	if info.Distances.Between(0, 2) != 12 || info.Distances.Between(2, 3) != 11 {
		t.Errorf("distances %v", info.Distances)
	}
}

// TestReadNUMAInfoOrder: node10 comes after node9, not after node1.
func TestReadNUMAInfoOrder(t *testing.T) {
	rows := map[int][]uint64{}
	for id := range 11 {
		rows[id] = nil
	}
	info, err := ReadNUMAInfo(fakeSysfs(t, rows))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(info.Nodes); got != "[0 1 2 3 4 5 6 7 8 9 10]" {
		t.Errorf("nodes %s", got)
	}
	if info.Distances[3] != nil {
		t.Errorf("node without a distance file has distances %v", info.Distances[3])
	}
}

func TestReadNUMAInfoErrors(t *testing.T) {
	if _, err := ReadNUMAInfo(fakeSysfs(t, map[int][]uint64{0: nil})); err != nil {
		t.Errorf("a missing distance file is no error: %v", err)
	}
	root := fakeSysfs(t, map[int][]uint64{0: {10}})
	writeFile(t, root, "devices/system/node/node0/distance", "10 x\n")
	if _, err := ReadNUMAInfo(root); err == nil || err.Error() != "cannot convert x to int" {
		t.Errorf("bad distance: %v", err)
	}
	if _, err := ReadNUMAInfo(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no NUMA nodes or CPU packages found") {
		t.Errorf("empty sysfs: %v", err)
	}
}

// TestReadNUMAInfoWithoutNUMA: a kernel without NUMA nodes in sysfs has one node per
// CPU package, as cAdvisor's topology.
func TestReadNUMAInfoWithoutNUMA(t *testing.T) {
	root := t.TempDir()
	for cpu, pkg := range []int{0, 0, 1, 1} {
		writeFile(t, root, fmt.Sprintf("devices/system/cpu/cpu%d/topology/physical_package_id", cpu), fmt.Sprintf("%d\n", pkg))
	}
	writeFile(t, root, "devices/system/cpu/cpufreq/boost", "1\n")
	info, err := ReadNUMAInfo(root)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(info.Nodes) != "[0 1]" || info.hasAllDistances() {
		t.Errorf("nodes %v, distances %v", info.Nodes, info.Distances)
	}
}

// TestReadNUMAInfoHost reads this machine's /sys: a node's distance to itself is 10.
func TestReadNUMAInfoHost(t *testing.T) {
	if _, err := os.Stat("/sys/devices/system/node/node0"); err != nil {
		t.Skip("no NUMA node 0 in /sys")
	}
	info, err := ReadNUMAInfo("")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Nodes) == 0 || info.Nodes[0] != 0 || info.Distances.Between(0, 0) != 10 {
		t.Errorf("host NUMA: nodes %v, distances %v", info.Nodes, info.Distances)
	}
	m, err := New(Options{Policy: PolicySingleNumaNode, PolicyOptions: map[string]string{PreferClosestNUMANodes: "true"}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(m.NUMANodes()) != fmt.Sprint(info.Nodes) {
		t.Errorf("NUMANodes %v, want %v", m.NUMANodes(), info.Nodes)
	}
}

func TestPolicyOptions(t *testing.T) {
	cases := []struct {
		options map[string]string
		want    PolicyOptions
		err     string
	}{
		{nil, PolicyOptions{MaxAllowableNUMANodes: 8}, ""},
		{map[string]string{PreferClosestNUMANodes: "true", MaxAllowableNUMANodes: "16"}, PolicyOptions{true, 16}, ""},
		{map[string]string{PreferClosestNUMANodes: "false"}, PolicyOptions{false, 8}, ""},
		{map[string]string{"unknown-option": "true"}, PolicyOptions{}, `unknown Topology Manager Policy option: "unknown-option"`},
		{map[string]string{PreferClosestNUMANodes: "maybe"}, PolicyOptions{}, `bad value for option "prefer-closest-numa-nodes": strconv.ParseBool: parsing "maybe": invalid syntax`},
		{map[string]string{MaxAllowableNUMANodes: "x"}, PolicyOptions{}, `unable to convert policy option to integer "max-allowable-numa-nodes": strconv.Atoi: parsing "x": invalid syntax`},
		{map[string]string{MaxAllowableNUMANodes: "7"}, PolicyOptions{}, `the minimum value of "max-allowable-numa-nodes" should not be less than 8`},
	}
	for _, tc := range cases {
		got, err := NewPolicyOptions(tc.options)
		switch {
		case tc.err != "":
			if err == nil || err.Error() != tc.err {
				t.Errorf("%v: error %v, want %s", tc.options, err, tc.err)
			}
		case err != nil:
			t.Errorf("%v: %v", tc.options, err)
		case got != tc.want:
			t.Errorf("%v: %+v, want %+v", tc.options, got, tc.want)
		}
	}
}
