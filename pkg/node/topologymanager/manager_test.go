package topologymanager

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func TestNewErrors(t *testing.T) {
	nine := numaOf(9)
	cases := []struct {
		name string
		opts Options
		err  string
	}{
		{"unknown policy", Options{Policy: "unknown", NUMA: numaOf(2)}, `unknown policy: "unknown"`},
		{"unknown scope", Options{Policy: PolicyBestEffort, Scope: "node", NUMA: numaOf(2)}, `unknown scope: "node"`},
		{"unknown option", Options{Policy: PolicyRestricted, NUMA: numaOf(2), PolicyOptions: map[string]string{"unknown-option": "true"}},
			`unknown Topology Manager Policy option: "unknown-option"`},
		// As upstream, options are checked before the policy's name.
		{"unknown policy and option", Options{Policy: "unknown", NUMA: numaOf(2), PolicyOptions: map[string]string{"unknown-option": "true"}},
			`unknown Topology Manager Policy option: "unknown-option"`},
		{"more than 8 NUMA nodes", Options{Policy: PolicyBestEffort, NUMA: nine}, "unsupported on machines with more than 8 NUMA Nodes"},
		{"more than max-allowable-numa-nodes", Options{Policy: PolicyBestEffort, NUMA: numaOf(11), PolicyOptions: map[string]string{MaxAllowableNUMANodes: "10"}},
			"unsupported on machines with more than 10 NUMA Nodes"},
		{"prefer-closest without distances", Options{Policy: PolicyBestEffort, NUMA: numaOf(2), PolicyOptions: map[string]string{PreferClosestNUMANodes: "true"}},
			"cannot discover NUMA topology: error getting NUMA distances from cadvisor"},
		{"unreadable topology", Options{Policy: PolicyBestEffort, SysfsRoot: t.TempDir()}, "cannot discover NUMA topology: no NUMA nodes or CPU packages found"},
		{"NUMA node ID over 63", Options{Policy: PolicyBestEffort, NUMA: &NUMAInfo{Nodes: []int{0, 64}}}, "cannot discover NUMA topology: NUMA node 64 out of range 0-63"},
	}
	for _, tc := range cases {
		if _, err := New(tc.opts); err == nil || !strings.HasPrefix(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want %s", tc.name, err, tc.err)
		}
	}
}

func TestNew(t *testing.T) {
	cases := []struct {
		name                   string
		opts                   Options
		policy, scope, numaIDs string
	}{
		{"defaults", Options{NUMA: numaOf(2)}, PolicyNone, NoneTopologyScope, "[0 1]"},
		// The none policy checks neither scope nor options, and needs no topology.
		{"none ignores scope and options", Options{Policy: PolicyNone, Scope: "x", PolicyOptions: map[string]string{"x": "y"}, SysfsRoot: t.TempDir()},
			PolicyNone, NoneTopologyScope, "[]"},
		{"best-effort, container scope by default", Options{Policy: PolicyBestEffort, NUMA: numaOf(2)}, PolicyBestEffort, ContainerTopologyScope, "[0 1]"},
		{"restricted, pod scope", Options{Policy: PolicyRestricted, Scope: PodTopologyScope, NUMA: numaOf(4)}, PolicyRestricted, PodTopologyScope, "[0 1 2 3]"},
		{"single-numa-node", Options{Policy: PolicySingleNumaNode, NUMA: numaOf(1)}, PolicySingleNumaNode, ContainerTopologyScope, "[0]"},
		{"9 nodes allowed", Options{Policy: PolicyBestEffort, NUMA: numaOf(9), PolicyOptions: map[string]string{MaxAllowableNUMANodes: "9"}},
			PolicyBestEffort, ContainerTopologyScope, "[0 1 2 3 4 5 6 7 8]"},
		{"prefer-closest with distances", Options{Policy: PolicyBestEffort, NUMA: fourNodes(), PolicyOptions: map[string]string{PreferClosestNUMANodes: "true"}},
			PolicyBestEffort, ContainerTopologyScope, "[0 1 2 3]"},
		{"from sysfs", Options{Policy: PolicyRestricted, SysfsRoot: fakeSysfs(t, map[int][]uint64{1: nil, 0: nil})}, PolicyRestricted, ContainerTopologyScope, "[0 1]"},
	}
	for _, tc := range cases {
		m, err := New(tc.opts)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := fmt.Sprint(m.PolicyName(), m.Scope(), m.NUMANodes()); got != fmt.Sprint(tc.policy, tc.scope, tc.numaIDs) {
			t.Errorf("%s: %s", tc.name, got)
		}
	}
}

// newManager has the policy and scope on n NUMA nodes, with two fake providers that log
// into the returned log.
func newManager(t *testing.T, policyName, scope string, n int) (*Manager, *fakeProvider, *fakeProvider, *[]string) {
	t.Helper()
	m, err := New(Options{Policy: policyName, Scope: scope, NUMA: numaOf(n)})
	if err != nil {
		t.Fatal(err)
	}
	log := &[]string{}
	p1 := &fakeProvider{name: "p1", log: log, store: m}
	p2 := &fakeProvider{name: "p2", log: log, store: m}
	m.AddHintProvider(p1)
	m.AddHintProvider(p2)
	return m, p1, p2, log
}

func checkLog(t *testing.T, got *[]string, want ...string) {
	t.Helper()
	if strings.Join(*got, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n  %s\nwant:\n  %s", strings.Join(*got, "\n  "), strings.Join(want, "\n  "))
	}
}

func checkAffinities(t *testing.T, m *Manager, podUID string, want string) {
	t.Helper()
	got := fmt.Sprintf("init %s sidecar %s app %s",
		showHint(m.GetAffinity(podUID, "init")), showHint(m.GetAffinity(podUID, "sidecar")), showHint(m.GetAffinity(podUID, "app")))
	if got != want {
		t.Errorf("affinities %s, want %s", got, want)
	}
}

// TestContainerScope: each container in turn (init containers, the sidecar among them,
// then app containers) has its hints merged, its affinity stored, then its resources
// allocated by each provider.
func TestContainerScope(t *testing.T) {
	m, p1, p2, log := newManager(t, PolicyBestEffort, ContainerTopologyScope, 2)
	p1.containerHints = map[string]hints{
		"init":    {"cpu": {pref(0)}},
		"sidecar": {"cpu": {pref(1)}},
		"app":     {"cpu": {pref(0), pref(1), nonPref(0, 1)}},
	}
	p2.containerHints = map[string]hints{"app": {"memory": {pref(1), nonPref(0, 1)}}}
	pod := testPod("pod")
	if ok, reason, msg := m.Admit(pod); !ok {
		t.Fatalf("rejected: %s %s", reason, msg)
	}
	checkLog(t, log,
		"p1.hints(init)", "p2.hints(init)", "p1.allocate(init {0 true})", "p2.allocate(init {0 true})",
		"p1.hints(sidecar)", "p2.hints(sidecar)", "p1.allocate(sidecar {1 true})", "p2.allocate(sidecar {1 true})",
		"p1.hints(app)", "p2.hints(app)", "p1.allocate(app {1 true})", "p2.allocate(app {1 true})")
	checkAffinities(t, m, "uid-pod", "init {0 true} sidecar {1 true} app {1 true}")
}

// TestPodScope: the pod's hints are merged once, and every container gets that
// affinity before its resources are allocated.
func TestPodScope(t *testing.T) {
	m, p1, p2, log := newManager(t, PolicyRestricted, PodTopologyScope, 4)
	p1.podHints = hints{"cpu": {pref(2), pref(3), nonPref(2, 3)}}
	p2.podHints = hints{"memory": {pref(3), nonPref(2, 3)}}
	if ok, reason, msg := m.Admit(testPod("pod")); !ok {
		t.Fatalf("rejected: %s %s", reason, msg)
	}
	checkLog(t, log, "p1.podHints", "p2.podHints",
		"p1.allocate(init {3 true})", "p2.allocate(init {3 true})",
		"p1.allocate(sidecar {3 true})", "p2.allocate(sidecar {3 true})",
		"p1.allocate(app {3 true})", "p2.allocate(app {3 true})")
	checkAffinities(t, m, "uid-pod", "init {3 true} sidecar {3 true} app {3 true}")
}

// TestNonePolicy: no hints are asked for, but the providers still allocate every
// container, with the empty affinity.
func TestNonePolicy(t *testing.T) {
	m, p1, _, log := newManager(t, PolicyNone, PodTopologyScope, 2)
	p1.podHints = hints{"cpu": {}}
	p1.containerHints = map[string]hints{"app": {"cpu": {}}}
	if ok, reason, msg := m.Admit(testPod("pod")); !ok {
		t.Fatalf("rejected: %s %s", reason, msg)
	}
	checkLog(t, log,
		"p1.allocate(init { false})", "p2.allocate(init { false})",
		"p1.allocate(sidecar { false})", "p2.allocate(sidecar { false})",
		"p1.allocate(app { false})", "p2.allocate(app { false})")
}

func TestTopologyAffinityError(t *testing.T) {
	const message = "Resources cannot be allocated with Topology locality"
	for _, policyName := range []string{PolicyRestricted, PolicySingleNumaNode} {
		// Container scope: the init containers are allocated before the app container,
		// whose memory and CPUs are on different nodes, is refused.
		m, p1, p2, log := newManager(t, policyName, ContainerTopologyScope, 2)
		p1.containerHints = map[string]hints{"app": {"cpu": {pref(0)}}}
		p2.containerHints = map[string]hints{"app": {"memory": {pref(1)}}}
		ok, reason, msg := m.Admit(testPod("pod"))
		if ok || reason != ErrorTopologyAffinity || msg != message {
			t.Errorf("%s, container scope: %v %q %q", policyName, ok, reason, msg)
		}
		// Containers without preference get every node, which single-numa-node gives
		// as no affinity.
		everyNode := "{0,1 true}"
		if policyName == PolicySingleNumaNode {
			everyNode = "{ true}"
		}
		checkLog(t, log,
			"p1.hints(init)", "p2.hints(init)", "p1.allocate(init "+everyNode+")", "p2.allocate(init "+everyNode+")",
			"p1.hints(sidecar)", "p2.hints(sidecar)", "p1.allocate(sidecar "+everyNode+")", "p2.allocate(sidecar "+everyNode+")",
			"p1.hints(app)", "p2.hints(app)")
		checkAffinities(t, m, "uid-pod", "init "+everyNode+" sidecar "+everyNode+" app { false}")

		// Pod scope: refused before anything is allocated.
		m, p1, p2, log = newManager(t, policyName, PodTopologyScope, 2)
		p1.podHints = hints{"cpu": {pref(0), pref(1)}}
		p2.podHints = hints{"memory": {}}
		ok, reason, msg = m.Admit(testPod("pod"))
		if ok || reason != ErrorTopologyAffinity || msg != message {
			t.Errorf("%s, pod scope: %v %q %q", policyName, ok, reason, msg)
		}
		checkLog(t, log, "p1.podHints", "p2.podHints")
	}
	// best-effort admits the same pod, with the narrowest of the non-preferred merges.
	m, p1, p2, _ := newManager(t, PolicyBestEffort, PodTopologyScope, 2)
	p1.podHints = hints{"cpu": {pref(0), pref(1)}}
	p2.podHints = hints{"memory": {}}
	if ok, _, _ := m.Admit(testPod("pod")); !ok || m.GetAffinity("uid-pod", "app") != nonPref(0) {
		t.Errorf("best-effort: admitted %v with %s", ok, showHint(m.GetAffinity("uid-pod", "app")))
	}
}

// smtError is an admission error with a reason of its own, as the CPU manager's.
type smtError struct{}

func (smtError) Error() string {
	return "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"
}
func (smtError) Type() string { return "SMTAlignmentError" }

func TestAllocateError(t *testing.T) {
	cases := []struct {
		err             error
		reason, message string
	}{
		{errors.New("not enough cpus available to satisfy request"), "UnexpectedAdmissionError",
			"Allocate failed due to not enough cpus available to satisfy request, which is unexpected"},
		// A wrapped error with a reason gives that reason, and its own message.
		{fmt.Errorf("cpu manager: %w", smtError{}), "SMTAlignmentError", smtError{}.Error()},
	}
	for _, scope := range []string{ContainerTopologyScope, PodTopologyScope, NoneTopologyScope} {
		for _, tc := range cases {
			policyName := PolicyBestEffort
			if scope == NoneTopologyScope {
				policyName = PolicyNone
			}
			m, _, p2, log := newManager(t, policyName, scope, 1)
			p2.allocateErr = map[string]error{"sidecar": tc.err}
			ok, reason, msg := m.Admit(testPod("pod"))
			if ok || reason != tc.reason || msg != tc.message {
				t.Errorf("%s scope: %v %q %q, want %q %q", scope, ok, reason, msg, tc.reason, tc.message)
			}
			if last := (*log)[len(*log)-1]; !strings.HasPrefix(last, "p2.allocate(sidecar") {
				t.Errorf("%s scope: went on after the failed Allocate: %v", scope, *log)
			}
		}
	}
}

func TestRemove(t *testing.T) {
	m, p1, _, _ := newManager(t, PolicyBestEffort, PodTopologyScope, 2)
	p1.podHints = hints{"cpu": {pref(1)}}
	a, b := testPod("a"), testPod("b")
	m.Admit(a)
	m.Admit(b)
	app := &a.Spec.Containers[0]

	// A restarted container has a second ID: the affinity stays until both are gone.
	m.AddContainer(a, app, "id-1")
	m.AddContainer(a, app, "id-2")
	m.RemoveContainer("id-1")
	m.RemoveContainer("unknown")
	if m.GetAffinity("uid-a", "app") != pref(1) {
		t.Error("affinity removed while the restarted container runs")
	}
	m.RemoveContainer("id-2")
	if m.GetAffinity("uid-a", "app") != (TopologyHint{}) || m.GetAffinity("uid-a", "init") != pref(1) {
		t.Error("RemoveContainer: want only the app container's affinity gone")
	}

	m.AddContainer(b, &b.Spec.Containers[0], "id-b")
	m.RemovePod("uid-b")
	checkAffinities(t, m, "uid-b", "init { false} sidecar { false} app { false}")
	if len(m.containers) != 0 || len(m.affinity) != 1 {
		t.Errorf("after RemovePod: containers %v, affinities of %d pods", m.containers, len(m.affinity))
	}
	m.RemovePod("uid-a")
	if len(m.affinity) != 0 {
		t.Errorf("affinities left: %v", m.affinity)
	}
}

// TestPreferClosestNUMANodes reads a machine whose node 0 is close to node 2, not to
// node 1, and merges two two-node hints.
func TestPreferClosestNUMANodes(t *testing.T) {
	root := fakeSysfs(t, map[int][]uint64{
		0: {10, 20, 11, 20},
		1: {20, 10, 20, 11},
		2: {11, 20, 10, 20},
		3: {20, 11, 20, 10},
	})
	for _, prefer := range []string{"true", "false"} {
		m, err := New(Options{Policy: PolicyRestricted, SysfsRoot: root, PolicyOptions: map[string]string{PreferClosestNUMANodes: prefer}})
		if err != nil {
			t.Fatal(err)
		}
		m.AddHintProvider(&fakeProvider{name: "p", log: &[]string{}, containerHints: map[string]hints{"app": {"cpu": {pref(0, 1), pref(0, 2)}}}})
		m.Admit(testPod("pod"))
		// Averages: nodes 0,1 (10+20+20+10)/4 = 15, nodes 0,2 (10+11+11+10)/4 = 10.5.
		want := pref(0, 1)
		if prefer == "true" {
			want = pref(0, 2)
		}
		if got := m.GetAffinity("uid-pod", "app"); got != want {
			t.Errorf("prefer-closest %s: %s, want %s", prefer, showHint(got), showHint(want))
		}
	}
}

func histogramCount(t *testing.T) uint64 {
	var out dto.Metric
	if err := AdmissionDuration.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram().GetSampleCount()
}

// TestMetrics: every admission is a request; rejections by the policy or a provider
// are errors, except under the none policy.
func TestMetrics(t *testing.T) {
	requests, errs, durations := testutil.ToFloat64(AdmissionRequestsTotal), testutil.ToFloat64(AdmissionErrorsTotal), histogramCount(t)

	m, p1, _, _ := newManager(t, PolicySingleNumaNode, ContainerTopologyScope, 2)
	m.Admit(testPod("ok"))
	p1.containerHints = map[string]hints{"init": {"cpu": {}}}
	m.Admit(testPod("refused"))
	p1.containerHints = nil
	p1.allocateErr = map[string]error{"app": errors.New("boom")}
	m.Admit(testPod("failed"))
	none, _, p2, _ := newManager(t, PolicyNone, "", 2)
	p2.allocateErr = map[string]error{"init": errors.New("boom")}
	none.Admit(testPod("none"))

	if got := testutil.ToFloat64(AdmissionRequestsTotal) - requests; got != 4 {
		t.Errorf("requests +%v, want 4", got)
	}
	if got := testutil.ToFloat64(AdmissionErrorsTotal) - errs; got != 2 {
		t.Errorf("errors +%v, want 2", got)
	}
	if got := histogramCount(t) - durations; got != 4 {
		t.Errorf("durations +%d, want 4", got)
	}
	if n := len(Collectors()); n != 3 {
		t.Errorf("%d collectors", n)
	}
}
