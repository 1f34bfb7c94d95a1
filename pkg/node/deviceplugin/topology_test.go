package deviceplugin

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nodelet/nodelet/pkg/node/topologymanager"
)

func pref(ids ...int) topologymanager.TopologyHint {
	return topologymanager.TopologyHint{NUMANodeAffinity: topologymanager.MustMask(ids...), Preferred: true}
}

func nonPref(ids ...int) topologymanager.TopologyHint {
	return topologymanager.TopologyHint{NUMANodeAffinity: topologymanager.MustMask(ids...)}
}

// onNUMA is a healthy device on the given NUMA nodes.
func onNUMA(id string, numa ...int64) *pluginapi.Device {
	return device(id, pluginapi.Healthy, numa...)
}

// fourDevices are two devices on each of NUMA nodes 0 and 1.
func fourDevices() []*pluginapi.Device {
	return []*pluginapi.Device{onNUMA("Dev1", 0), onNUMA("Dev2", 1), onNUMA("Dev3", 0), onNUMA("Dev4", 1)}
}

// affinityStore gives each container name the affinity of its entry.
type affinityStore map[string]topologymanager.Mask

func (s affinityStore) GetAffinity(_, container string) topologymanager.TopologyHint {
	return topologymanager.TopologyHint{NUMANodeAffinity: s[container], Preferred: true}
}

// machineStore is an affinityStore that also knows the machine's NUMA nodes.
type machineStore struct {
	affinityStore
	nodes []int
}

func (s machineStore) NUMANodes() []int { return s.nodes }

// held is a device allocation made before the hints are asked.
type held struct {
	pod, container, resource string
	ids                      []string
}

type hintCase struct {
	name    string
	pod     *v1.Pod
	devices map[string][]*pluginapi.Device
	held    []held
	// reusable are the devices the pod's init containers left, by resource.
	reusable map[string]sets.Set[string]
	store    topologymanager.Store
	want     map[string][]topologymanager.TopologyHint
}

// hintManager is a manager (not started) with the case's devices and allocations; the
// case's pod and pod "other" are active.
func hintManager(t *testing.T, tc hintCase) *Manager {
	t.Helper()
	m, err := New(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	active := []*v1.Pod{tc.pod, testPod("other", nil)}
	m.activePods = func() []*v1.Pod { return active }
	if tc.store != nil {
		m.SetAffinity(tc.store)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for resource, devs := range tc.devices {
		m.replaceDevices(resource, devs)
	}
	for _, h := range tc.held {
		m.podDevices.insert(h.pod, h.container, h.resource, m.devicesByNUMA(h.resource, sets.New(h.ids...)), &pluginapi.ContainerAllocateResponse{})
	}
	m.allocatedDevices = m.podDevices.devices()
	if tc.reusable != nil {
		m.devicesToReuse[string(tc.pod.UID)] = tc.reusable
	}
	return m
}

func sortedHints(hints []topologymanager.TopologyHint) []topologymanager.TopologyHint {
	if hints == nil {
		return nil
	}
	out := append([]topologymanager.TopologyHint{}, hints...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].LessThan(out[j]) })
	return out
}

func showHints(hints []topologymanager.TopologyHint) string {
	if hints == nil {
		return "nil"
	}
	s := "["
	for _, h := range hints {
		s += fmt.Sprintf("{%s %v}", h.NUMANodeAffinity.Pretty(), h.Preferred)
	}
	return s + "]"
}

// checkHints compares per resource, telling nil (no preference) from an empty list
// (nothing fits).
func checkHints(t *testing.T, got, want map[string][]topologymanager.TopologyHint) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("hints for %d resources (%v), want %d", len(got), got, len(want))
	}
	for resource, w := range want {
		g, ok := got[resource]
		if !ok {
			t.Errorf("no hints for %s, want %s", resource, showHints(w))
			continue
		}
		if g, w := sortedHints(g), sortedHints(w); !reflect.DeepEqual(g, w) {
			t.Errorf("hints for %s = %s, want %s", resource, showHints(g), showHints(w))
		}
	}
}

func gpuPod(uid string, n int64) *v1.Pod {
	return testPod(uid, nil, container("app", map[string]int64{gpu: n}))
}

// Container scope: the cases of upstream's topology_hints_test.go (getCommonTestCases)
// and a few more, on two NUMA nodes.
func TestGetTopologyHints(t *testing.T) {
	cases := []hintCase{{
		name: "no topology: no preference",
		pod:  gpuPod("pod", 1),
		devices: map[string][]*pluginapi.Device{gpu: {onNUMA("Dev1"), onNUMA("Dev2"),
			{ID: "Dev3", Health: pluginapi.Healthy, Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{}}},
			{ID: "Dev4", Health: pluginapi.Healthy, Topology: &pluginapi.TopologyInfo{}}}},
		want: map[string][]topologymanager.TopologyHint{gpu: nil},
	}, {
		name:    "only one device with topology: the other counts on no node",
		pod:     gpuPod("pod", 1),
		devices: map[string][]*pluginapi.Device{gpu: {onNUMA("Dev1"), onNUMA("Dev2", 1)}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(1)}},
	}, {
		name:    "single NUMA node",
		pod:     gpuPod("pod", 2),
		devices: map[string][]*pluginapi.Device{gpu: {onNUMA("Dev1", 0), onNUMA("Dev2", 0)}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(0)}},
	}, {
		name:    "single NUMA node with devices on a two-node machine: nodes without devices are not tried",
		pod:     gpuPod("pod", 1),
		devices: map[string][]*pluginapi.Device{gpu: {onNUMA("Dev1", 0), onNUMA("Dev2", 0)}},
		store:   machineStore{nodes: []int{0, 1}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(0)}},
	}, {
		name:    "request 1, one device per node",
		pod:     gpuPod("pod", 1),
		devices: map[string][]*pluginapi.Device{gpu: {onNUMA("Dev1", 0), onNUMA("Dev2", 1)}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(0), pref(1), nonPref(0, 1)}},
	}, {
		name:    "request 2, one device per node",
		pod:     gpuPod("pod", 2),
		devices: map[string][]*pluginapi.Device{gpu: {onNUMA("Dev1", 0), onNUMA("Dev2", 1)}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(0, 1)}},
	}, {
		name:    "request 1, two devices per node",
		pod:     gpuPod("pod", 1),
		devices: map[string][]*pluginapi.Device{gpu: fourDevices()},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(0), pref(1), nonPref(0, 1)}},
	}, {
		name:    "request 2, two devices per node",
		pod:     gpuPod("pod", 2),
		devices: map[string][]*pluginapi.Device{gpu: fourDevices()},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(0), pref(1), nonPref(0, 1)}},
	}, {
		name:    "request 3, two devices per node: both nodes, preferred",
		pod:     gpuPod("pod", 3),
		devices: map[string][]*pluginapi.Device{gpu: fourDevices()},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(0, 1)}},
	}, {
		name:    "a device on both nodes counts on each",
		pod:     gpuPod("pod", 2),
		devices: map[string][]*pluginapi.Device{gpu: {onNUMA("Dev1", 0), onNUMA("Dev2", 0, 1), onNUMA("Dev3", 1)}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(0), pref(1), nonPref(0, 1)}},
	}, {
		name:    "request 2, fits one node on an idle machine but others force both: not preferred",
		pod:     gpuPod("pod", 2),
		devices: map[string][]*pluginapi.Device{gpu: fourDevices()},
		held:    []held{{"pod", "sibling", gpu, []string{"Dev1", "Dev2"}}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {nonPref(0, 1)}},
	}, {
		name:    "devices of pods no longer active are freed first",
		pod:     gpuPod("pod", 2),
		devices: map[string][]*pluginapi.Device{gpu: fourDevices()},
		held:    []held{{"gone", "app", gpu, []string{"Dev1", "Dev2"}}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(0), pref(1), nonPref(0, 1)}},
	}, {
		name: "two resources, mixed configuration; unregistered resources are left out",
		pod:  testPod("pod", nil, container("app", map[string]int64{gpu: 2, "example.com/nic": 1, "example.com/none": 1})),
		devices: map[string][]*pluginapi.Device{gpu: fourDevices(),
			"example.com/nic": {onNUMA("Nic1", 0)}},
		want: map[string][]topologymanager.TopologyHint{
			gpu:               {pref(0), pref(1), nonPref(0, 1)},
			"example.com/nic": {pref(0)},
		},
	}, {
		name:    "more requested than available: nothing fits",
		pod:     gpuPod("pod", 6),
		devices: map[string][]*pluginapi.Device{gpu: fourDevices()},
		want:    map[string][]topologymanager.TopologyHint{gpu: {}},
	}, {
		// Dev1 and Dev4 are left: both nodes. Dev3 still counts for the preference.
		name:    "unhealthy and allocated devices are not available",
		pod:     gpuPod("pod", 2),
		devices: map[string][]*pluginapi.Device{gpu: {onNUMA("Dev1", 0), onNUMA("Dev2", 1), device("Dev3", pluginapi.Unhealthy, 0), onNUMA("Dev4", 1)}},
		held:    []held{{"other", "app", gpu, []string{"Dev2"}}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {nonPref(0, 1)}},
	}, {
		name:    "unhealthy and allocated devices are not available: not enough",
		pod:     gpuPod("pod", 3),
		devices: map[string][]*pluginapi.Device{gpu: {onNUMA("Dev1", 0), onNUMA("Dev2", 1), device("Dev3", pluginapi.Unhealthy, 0), onNUMA("Dev4", 1)}},
		held:    []held{{"other", "app", gpu, []string{"Dev2"}}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {}},
	}, {
		name:    "already allocated to the container: regenerated from its devices",
		pod:     gpuPod("pod", 2),
		devices: map[string][]*pluginapi.Device{gpu: fourDevices()},
		held:    []held{{"pod", "app", gpu, []string{"Dev1", "Dev3"}}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(0), nonPref(0, 1)}},
	}, {
		name:    "already allocated, fewer than requested",
		pod:     gpuPod("pod", 4),
		devices: map[string][]*pluginapi.Device{gpu: fourDevices()},
		held:    []held{{"pod", "app", gpu, []string{"Dev1", "Dev3"}}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {}},
	}, {
		name:    "already allocated, more than requested",
		pod:     gpuPod("pod", 2),
		devices: map[string][]*pluginapi.Device{gpu: fourDevices()},
		held:    []held{{"pod", "app", gpu, []string{"Dev1", "Dev2", "Dev3", "Dev4"}}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {}},
	}, {
		// Dev2 (node 1) is the init container's and will be reused first: node 0 alone
		// cannot be the placement although it has two free devices.
		name:     "reusable init container devices must be in the placement",
		pod:      testPod("pod", []v1.Container{container("init", map[string]int64{gpu: 1})}, container("app", map[string]int64{gpu: 2})),
		devices:  map[string][]*pluginapi.Device{gpu: fourDevices()},
		held:     []held{{"pod", "init", gpu, []string{"Dev2"}}},
		reusable: map[string]sets.Set[string]{gpu: sets.New("Dev2")},
		want:     map[string][]topologymanager.TopologyHint{gpu: {pref(1), nonPref(0, 1)}},
	}, {
		name:     "reusable devices count toward the request",
		pod:      testPod("pod", []v1.Container{container("init", map[string]int64{gpu: 2})}, container("app", map[string]int64{gpu: 4})),
		devices:  map[string][]*pluginapi.Device{gpu: fourDevices()},
		held:     []held{{"pod", "init", gpu, []string{"Dev1", "Dev2"}}},
		reusable: map[string]sets.Set[string]{gpu: sets.New("Dev1", "Dev2")},
		want:     map[string][]topologymanager.TopologyHint{gpu: {pref(0, 1)}},
	}, {
		name:     "a reusable device without topology restricts nothing",
		pod:      testPod("pod", []v1.Container{container("init", map[string]int64{gpu: 1})}, container("app", map[string]int64{gpu: 1})),
		devices:  map[string][]*pluginapi.Device{gpu: {onNUMA("Dev0"), onNUMA("Dev1", 0), onNUMA("Dev2", 1)}},
		held:     []held{{"pod", "init", gpu, []string{"Dev0"}}},
		reusable: map[string]sets.Set[string]{gpu: sets.New("Dev0")},
		want:     map[string][]topologymanager.TopologyHint{gpu: {pref(0), pref(1), nonPref(0, 1)}},
	}, {
		// Upstream's quirk: a topology listing no NUMA node is on none of the masks.
		name: "a reusable device whose topology lists no node excludes every placement",
		pod:  testPod("pod", []v1.Container{container("init", map[string]int64{gpu: 1})}, container("app", map[string]int64{gpu: 1})),
		devices: map[string][]*pluginapi.Device{gpu: {{ID: "Dev0", Health: pluginapi.Healthy, Topology: &pluginapi.TopologyInfo{}},
			onNUMA("Dev1", 0), onNUMA("Dev2", 1)}},
		held:     []held{{"pod", "init", gpu, []string{"Dev0"}}},
		reusable: map[string]sets.Set[string]{gpu: sets.New("Dev0")},
		want:     map[string][]topologymanager.TopologyHint{gpu: {}},
	}, {
		name:    "NUMA nodes the machine does not have are ignored",
		pod:     gpuPod("pod", 1),
		devices: map[string][]*pluginapi.Device{gpu: {onNUMA("Dev1", 0), onNUMA("Dev2", 5)}},
		store:   machineStore{nodes: []int{0, 1}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(0)}},
	}, {
		// With no device node left, the machine's are tried: only a request of 0 fits.
		name:    "devices only on NUMA nodes the machine does not have",
		pod:     gpuPod("pod", 0),
		devices: map[string][]*pluginapi.Device{gpu: {onNUMA("Dev1", 5)}},
		store:   machineStore{nodes: []int{0, 1}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(0), pref(1), nonPref(0, 1)}},
	}, {
		name:    "without the machine's NUMA nodes, the plugins' are taken",
		pod:     gpuPod("pod", 1),
		devices: map[string][]*pluginapi.Device{gpu: {onNUMA("Dev1", 0), onNUMA("Dev2", 5)}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(0), pref(5), nonPref(0, 5)}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := hintManager(t, tc)
			c := &tc.pod.Spec.Containers[0]
			checkHints(t, m.GetTopologyHints(tc.pod, c), tc.want)
		})
	}
}

// Pod scope: upstream's pod scope cases, with the pod's effective requests.
func TestGetPodTopologyHints(t *testing.T) {
	nic := "example.com/nic"
	twoTypes := map[string][]*pluginapi.Device{gpu: fourDevices(), nic: fourDevices()}
	cases := []hintCase{{
		name: "app containers only: requests add up",
		pod: testPod("pod", nil, container("a", map[string]int64{gpu: 1}), container("b", map[string]int64{gpu: 1, nic: 2}),
			container("c", map[string]int64{"example.com/none": 2})),
		devices: twoTypes,
		want: map[string][]topologymanager.TopologyHint{
			gpu: {pref(0), pref(1), nonPref(0, 1)},
			nic: {pref(0), pref(1), nonPref(0, 1)},
		},
	}, {
		name: "the largest init container wins over the app containers' sum",
		pod: testPod("pod", []v1.Container{container("i1", map[string]int64{gpu: 1, nic: 1}), container("i2", map[string]int64{gpu: 3, nic: 1})},
			container("a", map[string]int64{gpu: 1, nic: 1}), container("b", map[string]int64{gpu: 1, nic: 1})),
		devices: twoTypes,
		want: map[string][]topologymanager.TopologyHint{
			gpu: {pref(0, 1)},
			nic: {pref(0), pref(1), nonPref(0, 1)},
		},
	}, {
		name:    "forced cross-NUMA by another pod",
		pod:     testPod("pod", nil, container("a", map[string]int64{gpu: 1}), container("b", map[string]int64{gpu: 1})),
		devices: twoTypes,
		held:    []held{{"other", "app", gpu, []string{"Dev1", "Dev2"}}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {nonPref(0, 1)}},
	}, {
		name:    "already allocated to the pod's containers: regenerated from them all",
		pod:     testPod("pod", nil, container("a", map[string]int64{gpu: 1}), container("b", map[string]int64{gpu: 1})),
		devices: twoTypes,
		held:    []held{{"pod", "a", gpu, []string{"Dev1"}}, {"pod", "b", gpu, []string{"Dev3"}}},
		want:    map[string][]topologymanager.TopologyHint{gpu: {pref(0), nonPref(0, 1)}},
	}, {
		name:    "not enough devices",
		pod:     testPod("pod", nil, container("a", map[string]int64{gpu: 3}), container("b", map[string]int64{gpu: 2})),
		devices: twoTypes,
		want:    map[string][]topologymanager.TopologyHint{gpu: {}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := hintManager(t, tc)
			checkHints(t, m.GetPodTopologyHints(tc.pod), tc.want)
		})
	}
}

// preferredCalls are the GetPreferredAllocation requests the plugin got.
func (p *fakePlugin) preferredCalls() []*pluginapi.ContainerPreferredAllocationRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*pluginapi.ContainerPreferredAllocationRequest(nil), p.preferred...)
}

func (p *fakePlugin) setPrefer(ids ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prefer = ids
}

// Devices on the affinity's NUMA nodes are taken first; without an affinity the same
// request takes the lowest IDs.
func TestAllocateFollowsAffinity(t *testing.T) {
	for _, tc := range []struct {
		name     string
		affinity topologymanager.Mask
		request  int64
		want     []string
	}{
		{"no affinity", 0, 2, []string{"Dev1", "Dev2"}},
		{"affinity on NUMA 1", topologymanager.MustMask(1), 1, []string{"Dev2"}},
		{"affinity on NUMA 1, both its devices", topologymanager.MustMask(1), 2, []string{"Dev2", "Dev4"}},
		{"affinity on NUMA 1, more than it has", topologymanager.MustMask(1), 3, []string{"Dev1", "Dev2", "Dev4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t)
			env.m.SetAffinity(affinityStore{"app": tc.affinity})
			env.plugin("gpu.sock", gpu, nil, fourDevices())
			pod := gpuPod("u1", tc.request)
			env.setActive(pod)
			if err := env.admit(pod); err != nil {
				t.Fatal(err)
			}
			wantDevices(t, env.m, "u1", "app", tc.want...)
		})
	}
}

// Beyond the aligned devices, unaligned devices come before those without NUMA node
// (upstream's devicesToAllocate); a device on several NUMA nodes is aligned when one
// of them is in the affinity.
func TestAllocateAffinityOrder(t *testing.T) {
	devices := []*pluginapi.Device{onNUMA("A-none"), onNUMA("B-none"), onNUMA("C-numa0", 0), onNUMA("D-numa0", 0),
		onNUMA("E-numa1", 1), onNUMA("F-numa01", 0, 1)}
	for _, tc := range []struct {
		request int64
		want    []string
	}{
		{2, []string{"E-numa1", "F-numa01"}},
		{3, []string{"C-numa0", "E-numa1", "F-numa01"}},
		{4, []string{"C-numa0", "D-numa0", "E-numa1", "F-numa01"}},
		{5, []string{"A-none", "C-numa0", "D-numa0", "E-numa1", "F-numa01"}},
	} {
		t.Run(fmt.Sprint(tc.request), func(t *testing.T) {
			env := newTestEnv(t)
			env.m.SetAffinity(affinityStore{"app": topologymanager.MustMask(1)})
			env.plugin("gpu.sock", gpu, nil, devices)
			pod := gpuPod("u1", tc.request)
			env.setActive(pod)
			if err := env.admit(pod); err != nil {
				t.Fatal(err)
			}
			wantDevices(t, env.m, "u1", "app", tc.want...)
		})
	}
}

func wantPreferredRequest(t *testing.T, got *pluginapi.ContainerPreferredAllocationRequest, available, mustInclude []string, size int32) {
	t.Helper()
	gotAvailable := append([]string(nil), got.AvailableDeviceIDs...)
	gotMust := append([]string(nil), got.MustIncludeDeviceIDs...)
	sort.Strings(gotAvailable)
	sort.Strings(gotMust)
	if !reflect.DeepEqual(gotAvailable, available) || !reflect.DeepEqual(gotMust, mustInclude) || got.AllocationSize != size {
		t.Errorf("GetPreferredAllocation(available %v, mustInclude %v, size %d), want (%v, %v, %d)",
			gotAvailable, gotMust, got.AllocationSize, available, mustInclude, size)
	}
}

func eightDevices() []*pluginapi.Device {
	var devs []*pluginapi.Device
	for i := range 8 {
		devs = append(devs, onNUMA(fmt.Sprintf("Dev%d", i), int64(i/4)))
	}
	return devs
}

// With more aligned devices than needed, the plugin chooses among them only: its
// choices off the affinity are ignored.
func TestPreferredAllocationAmongAligned(t *testing.T) {
	env := newTestEnv(t)
	env.m.SetAffinity(affinityStore{"app": topologymanager.MustMask(1)})
	p := env.plugin("gpu.sock", gpu, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, eightDevices())
	p.setPrefer("Dev0", "Dev6", "Dev7")
	pod := gpuPod("u1", 2)
	env.setActive(pod)
	if err := env.admit(pod); err != nil {
		t.Fatal(err)
	}
	calls := p.preferredCalls()
	if len(calls) != 1 {
		t.Fatalf("GetPreferredAllocation calls = %d, want 1", len(calls))
	}
	wantPreferredRequest(t, calls[0], []string{"Dev4", "Dev5", "Dev6", "Dev7"}, nil, 2)
	wantDevices(t, env.m, "u1", "app", "Dev6", "Dev7")
}

// The init container's devices, reused first, and the aligned devices taken are what
// the plugin must include; it is offered the aligned devices when they suffice, all the
// available ones when they do not.
func TestPreferredAllocationMustInclude(t *testing.T) {
	for _, tc := range []struct {
		name         string
		appAffinity  topologymanager.Mask
		appRequest   int64
		prefer       []string
		wantAvail    []string
		wantMust     []string
		wantAppDevs  []string
		wantInitDevs []string
	}{{
		// Reused Dev5 and Dev6, then one of the free aligned Dev4 and Dev7.
		name:        "aligned devices suffice",
		appAffinity: topologymanager.MustMask(1), appRequest: 3,
		prefer:      []string{"Dev7", "Dev5", "Dev6"},
		wantAvail:   []string{"Dev4", "Dev5", "Dev6", "Dev7"},
		wantMust:    []string{"Dev5", "Dev6"},
		wantAppDevs: []string{"Dev5", "Dev6", "Dev7"},
	}, {
		// Reused Dev5 and Dev6, all of NUMA 0, then one more from anywhere.
		name:        "aligned devices do not suffice",
		appAffinity: topologymanager.MustMask(0), appRequest: 7,
		prefer:      []string{"Dev7"},
		wantAvail:   []string{"Dev0", "Dev1", "Dev2", "Dev3", "Dev4", "Dev5", "Dev6", "Dev7"},
		wantMust:    []string{"Dev0", "Dev1", "Dev2", "Dev3", "Dev5", "Dev6"},
		wantAppDevs: []string{"Dev0", "Dev1", "Dev2", "Dev3", "Dev5", "Dev6", "Dev7"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t)
			env.m.SetAffinity(affinityStore{"init": topologymanager.MustMask(1), "app": tc.appAffinity})
			p := env.plugin("gpu.sock", gpu, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, eightDevices())
			pod := testPod("u1", []v1.Container{container("init", map[string]int64{gpu: 2})}, container("app", map[string]int64{gpu: tc.appRequest}))
			env.setActive(pod)
			p.setPrefer("Dev5", "Dev6")
			if err := env.m.Allocate(env.ctx, pod, &pod.Spec.InitContainers[0]); err != nil {
				t.Fatal(err)
			}
			wantDevices(t, env.m, "u1", "init", "Dev5", "Dev6")
			p.setPrefer(tc.prefer...)
			if err := env.m.Allocate(env.ctx, pod, &pod.Spec.Containers[0]); err != nil {
				t.Fatal(err)
			}
			calls := p.preferredCalls()
			if len(calls) != 2 {
				t.Fatalf("GetPreferredAllocation calls = %d, want 2", len(calls))
			}
			wantPreferredRequest(t, calls[1], tc.wantAvail, tc.wantMust, int32(tc.appRequest))
			wantDevices(t, env.m, "u1", "app", tc.wantAppDevs...)
		})
	}
}

// The hints of a container after its init container took a device from the pod's
// devices to reuse (the real path of devicesToReuse).
func TestHintsAfterInitContainer(t *testing.T) {
	env := newTestEnv(t)
	env.m.SetAffinity(affinityStore{"init": topologymanager.MustMask(1)})
	env.plugin("gpu.sock", gpu, nil, fourDevices())
	pod := testPod("u1", []v1.Container{container("init", map[string]int64{gpu: 1})}, container("app", map[string]int64{gpu: 2}))
	env.setActive(pod)
	if err := env.m.Allocate(env.ctx, pod, &pod.Spec.InitContainers[0]); err != nil {
		t.Fatal(err)
	}
	wantDevices(t, env.m, "u1", "init", "Dev2")
	checkHints(t, env.m.GetTopologyHints(pod, &pod.Spec.Containers[0]),
		map[string][]topologymanager.TopologyHint{gpu: {pref(1), nonPref(0, 1)}})
}

// The manager as the topology manager's hint provider: under single-numa-node, a pod
// needing two devices goes on NUMA 1, the only node with two free devices.
func TestHintProviderWithTopologyManager(t *testing.T) {
	env := newTestEnv(t)
	tm, err := topologymanager.New(topologymanager.Options{Policy: topologymanager.PolicySingleNumaNode,
		NUMA: &topologymanager.NUMAInfo{Nodes: []int{0, 1}}})
	if err != nil {
		t.Fatal(err)
	}
	env.m.SetAffinity(tm)
	tm.AddHintProvider(env.m.HintProvider())
	env.plugin("gpu.sock", gpu, nil, []*pluginapi.Device{onNUMA("Dev1", 0), onNUMA("Dev2", 1), onNUMA("Dev3", 1)})
	pod := gpuPod("u1", 2)
	env.setActive(pod)
	if ok, reason, msg := tm.Admit(pod); !ok {
		t.Fatalf("Admit = %s: %s", reason, msg)
	}
	wantDevices(t, env.m, "u1", "app", "Dev2", "Dev3")

	// Three devices fit on no single NUMA node.
	big := gpuPod("u2", 3)
	env.setActive(pod, big)
	if ok, reason, _ := tm.Admit(big); ok || reason != topologymanager.ErrorTopologyAffinity {
		t.Errorf("Admit of 3 devices = %v %q, want rejected with %s", ok, reason, topologymanager.ErrorTopologyAffinity)
	}
}

// A failed pick releases the devices it took (here all of NUMA 1 before the plugin's
// GetPreferredAllocation fails): they are available to the next pod.
func TestFailedPickReleasesDevices(t *testing.T) {
	env := newTestEnv(t)
	env.m.SetAffinity(affinityStore{"app": topologymanager.MustMask(1)})
	p := env.plugin("gpu.sock", gpu, &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, fourDevices())
	p.mu.Lock()
	p.preferErr = errors.New("plugin confused")
	p.mu.Unlock()
	pod := gpuPod("u1", 3)
	env.setActive(pod)
	if err := env.admit(pod); err == nil || !strings.Contains(err.Error(), "plugin confused") {
		t.Fatalf("Allocate = %v, want the plugin's error", err)
	}
	env.m.mu.Lock()
	inUse := env.m.allocatedDevices[gpu].Len()
	env.m.mu.Unlock()
	if inUse != 0 {
		t.Errorf("devices in use after the failed pick = %d, want 0", inUse)
	}
}
