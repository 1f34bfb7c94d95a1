package topologymanager

import (
	"fmt"
	"testing"
)

// mergeCase is a set of providers' hints and the merged hint expected of a policy.
type mergeCase struct {
	name      string
	providers []hints
	want      TopologyHint
}

// commonCases hold for every policy but none on four or eight NUMA nodes (upstream's
// commonPolicyMergeTestCases).
func commonCases() []mergeCase {
	return []mergeCase{
		{"same mask both preferred, node 0", []hints{{"r1": {pref(0)}}, {"r2": {pref(0)}}}, pref(0)},
		{"same mask both preferred, node 1", []hints{{"r1": {pref(1)}}, {"r2": {pref(1)}}}, pref(1)},
		{"one provider without hints, node 0", []hints{nil, {"r": {pref(0)}}}, pref(0)},
		{"one provider without hints, node 1", []hints{nil, {"r": {pref(1)}}}, pref(1)},
		{"two hints against one, node 0", []hints{{"r1": {pref(0), pref(1)}}, {"r2": {pref(0)}}}, pref(0)},
		{"two hints against one, node 1", []hints{{"r1": {pref(0), pref(1)}}, {"r2": {pref(1)}}}, pref(1)},
		{"narrower preferred hint common to both", []hints{{"r1": {pref(0), pref(1)}}, {"r2": {pref(0), nonPref(0, 1)}}}, pref(0)},
		{"preferred beats narrower non-preferred", []hints{{"r1": {pref(1), nonPref(0, 1)}}, {"r2": {pref(0), pref(1), nonPref(0, 1)}}}, pref(1)},
		{"two resources of one provider", []hints{{"r1": {pref(1), nonPref(0, 1)}, "r2": {pref(0), pref(1), nonPref(0, 1)}}}, pref(1)},
	}
}

// wideCases hold for best-effort and restricted, whether or not they prefer the
// closest nodes (upstream's bestEffortPolicy.mergeTestCases).
func wideCases(all Mask) []mergeCase {
	allPref, allNonPref := TopologyHint{all, true}, TopologyHint{all, false}
	// r1 fits on two nodes at best, without preference: merges of two nodes are best.
	withR2 := func(h ...TopologyHint) []hints {
		return []hints{{"r1": {nonPref(0, 1, 2, 3), nonPref(0, 1)}}, {"r2": h}}
	}
	return []mergeCase{
		{"same masks, the one with lower IDs", []hints{{"r1": {pref(0, 1), pref(0, 2)}}, {"r2": {pref(0, 1), pref(0, 2)}}}, pref(0, 1)},
		{"no providers", nil, allPref},
		{"empty map", []hints{{}}, allPref},
		{"nil hints for a resource", []hints{{"r": nil}}, allPref},
		{"no hint fits a resource", []hints{{"r": {}}}, allNonPref},
		{"preferred hint without affinity", []hints{{"r": {pref()}}}, allPref},
		{"non-preferred hint without affinity", []hints{{"r": {nonPref()}}}, allNonPref},
		{"no common mask", []hints{{"r1": {pref(0)}}, {"r2": {pref(1)}}}, allNonPref},
		{"same mask, one not preferred, node 0", []hints{{"r1": {pref(0)}}, {"r2": {nonPref(0)}}}, nonPref(0)},
		{"same mask, one not preferred, node 1", []hints{{"r1": {pref(1)}}, {"r2": {nonPref(1)}}}, nonPref(1)},
		{"one wider preferred mask, node 0", []hints{{"r1": {pref(0)}}, {"r2": {pref(0, 1)}}}, nonPref(0)},
		{"two hints against a wider non-preferred one", []hints{{"r1": {pref(0), pref(1)}}, {"r2": {nonPref(0, 1)}}}, nonPref(0)},
		{"one wider preferred mask, node 1", []hints{{"r1": {pref(1)}}, {"r2": {pref(0, 1)}}}, nonPref(1)},
		{"non-preferred width 2 (1)", withR2(nonPref(0, 1)), nonPref(0, 1)},
		{"non-preferred width 2 (2)", withR2(nonPref(0, 3)), nonPref(0, 3)},
		{"non-preferred width 2 (3)", withR2(nonPref(1, 2)), nonPref(1, 2)},
		{"non-preferred width 2 (4)", withR2(nonPref(2, 3)), nonPref(2, 3)},
	}
}

// tieCases differ on whether the closest nodes are preferred: with equal widths the
// narrowest comparison takes the lowest IDs, the closest one nodes 2 and 3, the
// nearest pair.
func tieCases(closest bool) []mergeCase {
	want := nonPref(1, 2)
	if closest {
		want = nonPref(2, 3)
	}
	r1 := hints{"r1": {nonPref(0, 1, 2, 3), nonPref(0, 1)}}
	cases := []mergeCase{
		{"non-preferred width 2 (5)", []hints{r1, {"r2": {nonPref(1, 2), nonPref(2, 3)}}}, want},
		{"non-preferred width 2 (6)", []hints{r1, {"r2": {nonPref(1, 2, 3), nonPref(1, 2), nonPref(1, 3), nonPref(2, 3)}}}, want},
	}
	if closest {
		cases = append(cases,
			// Nodes 0 and 4 are 30 apart, 0 and 2 only 12.
			mergeCase{"closest pair over lower IDs", []hints{{"r1": {pref(0, 4), pref(0, 2)}}, {"r2": {pref(0, 4), pref(0, 2)}}}, pref(0, 2)},
			mergeCase{"narrower before closer", []hints{{"r1": {pref(4), pref(0, 2)}}, {"r2": {pref(4), pref(0, 2)}}}, pref(4)},
		)
	}
	return cases
}

// singleNUMACases are single-numa-node's own (upstream's
// singleNumaNodePolicy.mergeTestCases): only preferred one-node hints count, and no
// alignment shows as no affinity.
func singleNUMACases() []mergeCase {
	none, noneNonPref := pref(), nonPref()
	return []mergeCase{
		{"no providers", nil, none},
		{"empty map", []hints{{}}, none},
		{"nil hints for a resource", []hints{{"r": nil}}, none},
		{"no hint fits a resource", []hints{{"r": {}}}, noneNonPref},
		{"preferred hint without affinity", []hints{{"r": {pref()}}}, none},
		{"non-preferred hint without affinity", []hints{{"r": {nonPref()}}}, noneNonPref},
		{"no common mask", []hints{{"r1": {pref(0)}}, {"r2": {pref(1)}}}, noneNonPref},
		{"same mask, one not preferred, node 0", []hints{{"r1": {pref(0)}}, {"r2": {nonPref(0)}}}, noneNonPref},
		{"same mask, one not preferred, node 1", []hints{{"r1": {pref(1)}}, {"r2": {nonPref(1)}}}, noneNonPref},
		{"two hints against a wider non-preferred one", []hints{{"r1": {pref(0), pref(1)}}, {"r2": {nonPref(0, 1)}}}, noneNonPref},
		{"a resource needing two nodes", []hints{{"r1": {pref(0, 1)}, "r2": {pref(0), pref(1), nonPref(0, 1)}}}, noneNonPref},
		{"one provider without preference", []hints{{"r1": {pref(0), pref(1), nonPref(0, 1)}}, nil}, pref(0)},
	}
}

// checkMerge runs the cases through the policy; the admission follows the policy's
// rule (best-effort admits all, restricted and single-numa-node preferred hints only).
func checkMerge(t *testing.T, p policy, cases []mergeCase) {
	t.Helper()
	for _, tc := range cases {
		got, admit := p.merge(tc.providers)
		if got != tc.want {
			t.Errorf("%s on %d nodes, %s: got %s, want %s", p.name, len(p.numa.Nodes), tc.name, showHint(got), showHint(tc.want))
		}
		if wantAdmit := p.name == PolicyBestEffort || got.Preferred; admit != wantAdmit {
			t.Errorf("%s, %s: admit %v, want %v", p.name, tc.name, admit, wantAdmit)
		}
	}
}

func TestMergeBestEffortAndRestricted(t *testing.T) {
	for _, name := range []string{PolicyBestEffort, PolicyRestricted} {
		four := policy{name: name, numa: fourNodes()}
		checkMerge(t, four, commonCases())
		checkMerge(t, four, wideCases(MustMask(0, 1, 2, 3)))
		checkMerge(t, four, tieCases(false))

		eight := policy{name: name, numa: eightNodes(), opts: PolicyOptions{PreferClosestNUMA: true}}
		checkMerge(t, eight, commonCases())
		checkMerge(t, eight, wideCases(MustMask(0, 1, 2, 3, 4, 5, 6, 7)))
		checkMerge(t, eight, tieCases(true))
	}
}

func TestMergeSingleNUMANode(t *testing.T) {
	p := policy{name: PolicySingleNumaNode, numa: fourNodes()}
	checkMerge(t, p, commonCases())
	checkMerge(t, p, singleNUMACases())
	// prefer-closest-numa-nodes is ignored: one-node masks have nothing to compare.
	p.opts.PreferClosestNUMA = true
	checkMerge(t, p, singleNUMACases())
}

func TestMergeNone(t *testing.T) {
	got, admit := policy{name: PolicyNone}.merge([]hints{{"r": {}}})
	if got != (TopologyHint{}) || !admit {
		t.Errorf("none: %s %v, want the empty hint, admitted", showHint(got), admit)
	}
}

// TestMergeSmallMachines checks each policy on one and two NUMA nodes, by hand.
func TestMergeSmallMachines(t *testing.T) {
	type result struct {
		hint  TopologyHint
		admit bool
	}
	cases := []struct {
		name                           string
		nodes                          int
		providers                      []hints
		bestEffort, restricted, single result
	}{
		{"1 node, no providers", 1, nil,
			result{pref(0), true}, result{pref(0), true}, result{pref(), true}},
		// On one node, single-numa-node's node 0 is every node: no affinity.
		{"1 node, node 0 preferred", 1, []hints{{"r": {pref(0)}}},
			result{pref(0), true}, result{pref(0), true}, result{pref(), true}},
		{"1 node, nothing fits", 1, []hints{{"r": {}}},
			result{nonPref(0), true}, result{nonPref(0), false}, result{nonPref(), false}},
		{"1 node, a non-preferred provider", 1, []hints{{"r1": {pref(0)}}, {"r2": {nonPref(0)}}},
			result{nonPref(0), true}, result{nonPref(0), false}, result{nonPref(), false}},
		// The narrowest non-preferred merges ({0}, {1}) give r2 too little: both nodes.
		{"2 nodes, a resource needing both", 2, []hints{{"r1": {pref(0), pref(1), nonPref(0, 1)}}, {"r2": {pref(0, 1)}}},
			result{nonPref(0, 1), true}, result{nonPref(0, 1), false}, result{nonPref(), false}},
		{"2 nodes, one provider without preference", 2, []hints{{"r1": {pref(1), nonPref(0, 1)}}, nil},
			result{pref(1), true}, result{pref(1), true}, result{pref(1), true}},
		{"2 nodes, either node, the lower", 2, []hints{{"r1": {pref(0), pref(1)}}, {"r2": {pref(0), pref(1)}}},
			result{pref(0), true}, result{pref(0), true}, result{pref(0), true}},
	}
	for _, tc := range cases {
		for name, want := range map[string]result{PolicyBestEffort: tc.bestEffort, PolicyRestricted: tc.restricted, PolicySingleNumaNode: tc.single} {
			got, admit := policy{name: name, numa: numaOf(tc.nodes)}.merge(tc.providers)
			if got != want.hint || admit != want.admit {
				t.Errorf("%s, %s: %s admit %v, want %s admit %v", tc.name, name, showHint(got), admit, showHint(want.hint), want.admit)
			}
		}
	}
}

// TestComparer is upstream's TestCompareHintsNarrowest: whether the candidate replaces
// the best hint so far, for each branch of the comparison.
func TestComparer(t *testing.T) {
	p0, n0 := pref(0), nonPref(0)
	cases := []struct {
		name         string
		widestNeeded int
		best         *TopologyHint
		candidate    TopologyHint
		replaces     bool
	}{
		{"empty candidate, no best", -1, nil, nonPref(), false},
		{"empty candidate", -1, &TopologyHint{0, true}, nonPref(), false},
		{"no best, preferred", -1, nil, pref(0), true},
		{"no best, non-preferred", -1, nil, nonPref(0), true},
		{"preferred over non-preferred", -1, &n0, pref(0), true},
		{"non-preferred never over preferred", -1, &p0, nonPref(0), false},
		{"preferred, same mask", -1, &p0, pref(0), false},
		{"preferred, narrower", -1, ptr(pref(0, 1)), pref(0), true},
		{"preferred, wider", -1, &p0, pref(0, 1), false},
		{"wider than needed, same", 1, ptr(nonPref(0, 1)), nonPref(0, 1), false},
		{"wider than needed, lower IDs", 1, ptr(nonPref(1, 2)), nonPref(0, 1), true},
		{"wider than needed, higher IDs", 1, ptr(nonPref(0, 1)), nonPref(1, 2), false},
		{"as needed, candidate narrower", 2, ptr(nonPref(0, 1)), nonPref(0), false},
		{"as needed, same", 2, ptr(nonPref(0, 1)), nonPref(0, 1), false},
		{"as needed, lower IDs", 2, ptr(nonPref(1, 2)), nonPref(0, 1), true},
		{"as needed, higher IDs", 2, ptr(nonPref(0, 1)), nonPref(1, 2), false},
		{"narrower than needed, candidate wider than needed", 2, &n0, nonPref(0, 1, 2), false},
		{"narrower than needed, candidate as needed", 2, &n0, nonPref(0, 1), true},
		{"both narrower than needed, candidate wider (1)", 3, &n0, nonPref(0, 1), true},
		{"both narrower than needed, candidate wider (2)", 3, &n0, nonPref(1, 2), true},
		{"both narrower than needed, candidate wider (3)", 4, ptr(nonPref(0, 1)), nonPref(1, 2, 3), true},
		{"both narrower than needed, candidate narrower", 4, ptr(nonPref(1, 2, 3)), nonPref(0, 1), false},
		{"both narrower than needed, same", 4, ptr(nonPref(0, 1, 2)), nonPref(0, 1, 2), false},
		{"both narrower than needed, higher IDs", 4, ptr(nonPref(0, 1, 2)), nonPref(1, 2, 3), false},
		{"both narrower than needed, lower IDs", 4, ptr(nonPref(1, 2, 3)), nonPref(0, 1, 2), true},
	}
	for _, tc := range cases {
		c := comparer{widestNeeded: tc.widestNeeded, fitter: (&NUMAInfo{}).Narrowest}
		if got := c.replaces(tc.best, tc.candidate); got != tc.replaces {
			t.Errorf("%s: replaces %v, want %v", tc.name, got, tc.replaces)
		}
	}
}

func ptr(h TopologyHint) *TopologyHint { return &h }

func TestMaxOfNarrowestCounts(t *testing.T) {
	cases := []struct {
		perResource [][]TopologyHint
		want        int
	}{
		{nil, 0},
		{[][]TopologyHint{{pref()}}, 0},
		{[][]TopologyHint{{pref(0)}}, 1},
		{[][]TopologyHint{{pref(0, 1)}}, 2},
		{[][]TopologyHint{{pref(0, 1, 2), pref(0, 1)}}, 2},
		{[][]TopologyHint{{pref(0, 1)}, {pref(0, 1, 2)}}, 3},
		{[][]TopologyHint{{nonPref(0, 1, 2, 3), pref(1)}, {pref(2, 3), nonPref(0, 1, 2, 3)}, {pref()}}, 2},
	}
	for i, tc := range cases {
		if got := maxOfNarrowestCounts(tc.perResource); got != tc.want {
			t.Errorf("case %d: %d, want %d", i, got, tc.want)
		}
	}
}

func TestSingleNUMAHints(t *testing.T) {
	in := [][]TopologyHint{
		{nonPref(), pref()},
		{pref(0), nonPref()},
		{nonPref(1), pref(1, 2), pref(3)},
		{pref(0, 1), nonPref(2)},
	}
	got := fmt.Sprint(singleNUMAHints(in))
	want := fmt.Sprint([][]TopologyHint{{pref()}, {pref(0)}, {pref(3)}, nil})
	if got != want {
		t.Errorf("singleNUMAHints: %s, want %s", got, want)
	}
}

// TestForEachCombination: the cartesian product, the first resource varying slowest.
func TestForEachCombination(t *testing.T) {
	var got []string
	forEachCombination([][]TopologyHint{{pref(0), pref(1)}, {pref(2)}, {pref(3), pref(4)}}, func(c []TopologyHint) {
		s := ""
		for _, h := range c {
			s += h.NUMANodeAffinity.Pretty()
		}
		got = append(got, s)
	})
	if want := "[023 024 123 124]"; fmt.Sprint(got) != want {
		t.Errorf("combinations %v, want %s", got, want)
	}
	calls := 0
	forEachCombination([][]TopologyHint{{pref(0)}, {}}, func([]TopologyHint) { calls++ })
	if calls != 0 {
		t.Errorf("a resource without hints gave %d combinations, want none", calls)
	}
}
