package cpumanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/pkg/node/cpumanager/state"
	"github.com/nodelet/nodelet/pkg/node/cpumanager/topology"
)

// writeSysfs lays out a fake sysfs of single-thread cores on one socket and NUMA node,
// like this project's 2-CPU test machine.
func writeSysfs(t *testing.T, cpus int) string {
	t.Helper()
	root := t.TempDir()
	write := func(path, content string) {
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	list := fmt.Sprintf("0-%d", cpus-1)
	write("devices/system/cpu/online", list)
	write("devices/system/node/node0/cpulist", list)
	for cpu := 0; cpu < cpus; cpu++ {
		dir := fmt.Sprintf("devices/system/cpu/cpu%d/", cpu)
		write(dir+"topology/core_id", fmt.Sprint(cpu))
		write(dir+"topology/physical_package_id", "0")
		write(dir+"cache/index3/level", "3")
		write(dir+"cache/index3/id", "0")
		write(dir+"cache/index3/shared_cpu_list", list)
	}
	return root
}

func staticOptions(t *testing.T, topo *topology.CPUTopology) Options {
	return Options{Policy: PolicyStatic, ReservedCPUs: resource.MustParse("1"), StateDir: t.TempDir(), Topology: topo}
}

func mustNew(t *testing.T, opts Options) *Manager {
	t.Helper()
	m, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

func sharedPool(m *Manager) cpuset.CPUSet {
	pod := makePod("other", "c", "100m", "200m")
	cpus, _ := m.CPUSetFor(pod, &pod.Spec.Containers[0])
	return cpus
}

// This machine: 2 CPUs, 1 reserved by kubeReserved+systemReserved.
func TestTwoCPUMachine(t *testing.T) {
	m := mustNew(t, Options{Policy: PolicyStatic, ReservedCPUs: resource.MustParse("500m"), StateDir: t.TempDir(), SysfsRoot: writeSysfs(t, 2)})
	if got := m.GetAllocatableCPUs(); !got.Equals(cpuset.New(1)) {
		t.Fatalf("allocatable %s, want 1", got)
	}
	pod := makePod("pod-1", "app", "1", "1")
	if err := m.Allocate(pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if cpus, ok := m.CPUSetFor(pod, &pod.Spec.Containers[0]); !ok || !cpus.Equals(cpuset.New(1)) {
		t.Errorf("exclusive cpuset %s (%v), want 1", cpus, ok)
	}
	if got := m.GetExclusiveCPUs("pod-1", "app"); !got.Equals(cpuset.New(1)) {
		t.Errorf("GetExclusiveCPUs = %s, want 1", got)
	}
	if got := sharedPool(m); !got.Equals(cpuset.New(0)) {
		t.Errorf("shared pool %s, want 0", got)
	}
	if err := m.RemoveContainer("pod-1", "app"); err != nil {
		t.Fatal(err)
	}
	if got := sharedPool(m); !got.Equals(cpuset.New(0, 1)) {
		t.Errorf("shared pool after release %s, want 0-1", got)
	}
	big := makePod("pod-2", "app", "2", "2")
	err := m.Allocate(big, &big.Spec.Containers[0])
	if err == nil || err.Error() != "not enough cpus available to satisfy request: requested=2, available=1" {
		t.Errorf("2 CPUs: error %v", err)
	}
	if got := testutil.ToFloat64(m.metrics.pinningErrors); got != 1 {
		t.Errorf("pinning errors %v, want 1", got)
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"static without reservation", Options{Policy: PolicyStatic},
			"[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero"},
		{"unknown policy", Options{Policy: "dynamic"}, `unknown policy: "dynamic"`},
		{"none with options", Options{Policy: PolicyNone, PolicyOptions: map[string]string{FullPCPUsOnlyOption: "true"}},
			"new none policy error: None policy: received unsupported options=map[full-pcpus-only:true]"},
		{"alpha option with its gate off", Options{Policy: PolicyStatic, ReservedCPUs: resource.MustParse("1"),
			PolicyOptions: map[string]string{AlignBySocketOption: "true"}},
			`new static policy error: CPU Manager Policy Alpha-level Options not enabled, but option "align-by-socket" provided`},
		{"align-by-socket with single-numa-node", Options{Policy: PolicyStatic, ReservedCPUs: resource.MustParse("1"),
			PolicyOptions: map[string]string{AlignBySocketOption: "true"}, AlphaOptionsEnabled: true, TopologyManagerPolicy: "single-numa-node"},
			"new static policy error: Topolgy manager single-numa-node policy is incompatible with CPUManager align-by-socket policy option"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.StateDir, tt.opts.Topology = t.TempDir(), topoDualSocketMultiNumaPerSocketHT
			_, err := New(tt.opts)
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("New error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestReservedSystemCPUs(t *testing.T) {
	opts := staticOptions(t, topoSingleSocketHT)
	opts.ReservedSystemCPUs, opts.ReservedCPUs = cpuset.New(3, 7), resource.Quantity{}
	m := mustNew(t, opts)
	if got := m.GetAllocatableCPUs(); !got.Equals(mustParse(t, "0-2,4-6")) {
		t.Errorf("allocatable %s", got)
	}
	pod := makePod("p", "c", "6", "6")
	if err := m.Allocate(pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	// The reserved CPUs stay in the shared pool...
	if got := sharedPool(m); !got.Equals(cpuset.New(3, 7)) {
		t.Errorf("shared pool %s, want 3,7", got)
	}
	// ...but with strict-cpu-reservation they are out of it too.
	opts = staticOptions(t, topoSingleSocketHT)
	opts.ReservedSystemCPUs, opts.PolicyOptions = cpuset.New(3, 7), map[string]string{StrictCPUReservationOption: "true"}
	m = mustNew(t, opts)
	if got := sharedPool(m); !got.Equals(mustParse(t, "0-2,4-6")) {
		t.Errorf("strict: shared pool %s, want 0-2,4-6", got)
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	opts := staticOptions(t, topoDualSocketHT)
	m := mustNew(t, opts)
	pod := makePod("pod", "app", "2", "2")
	if err := m.Allocate(pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	want := m.GetExclusiveCPUs("pod", "app")
	again := mustNew(t, opts)
	if got := again.GetExclusiveCPUs("pod", "app"); !got.Equals(want) || want.Size() != 2 {
		t.Errorf("after restart %s, want %s", got, want)
	}
	if !sharedPool(again).Equals(sharedPool(m)) {
		t.Errorf("shared pool after restart %s, want %s", sharedPool(again), sharedPool(m))
	}
	cp, err := state.Read(filepath.Join(opts.StateDir, state.FileName))
	if err != nil || cp.PolicyName != PolicyStatic || !cp.Entries["pod"]["app"].Equals(want) {
		t.Errorf("file holds %+v, %v", cp, err)
	}
}

// A file upstream's kubelet wrote (state_checkpoint_test.go's fixture) on a machine of
// CPUs 1-9 with CPU 7 reserved.
func TestReadsUpstreamStateFile(t *testing.T) {
	opts := staticOptions(t, topology.New(detailsOf(10, func(cpu int) topology.CPUInfo { return topology.CPUInfo{CoreID: cpu} }).KeepOnly(mustParse(t, "1-9"))))
	opts.ReservedSystemCPUs = cpuset.New(7)
	content := `{"policyName": "other", "defaultCPUSet": "1-9", "checksum": 1234,
		"data": "{\"policyName\":\"static\",\"defaultCPUSet\":\"7-9\",\"entries\":{\"pod\":{\"container1\":\"4-6\",\"container2\":\"1-3\"}}}",
		"dataChecksum": 1420829534}`
	if err := os.WriteFile(filepath.Join(opts.StateDir, state.FileName), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, opts)
	if got := m.GetExclusiveCPUs("pod", "container1"); !got.Equals(cpuset.New(4, 5, 6)) {
		t.Errorf("container1 %s, want 4-6", got)
	}
	if got := sharedPool(m); !got.Equals(cpuset.New(7, 8, 9)) {
		t.Errorf("shared pool %s, want 7-9", got)
	}
}

func TestStateFileRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, state.FileName)
	restartWith := func(opts Options) error {
		opts.StateDir, opts.Topology = dir, topoSingleSocketHT
		_, err := New(opts)
		return err
	}
	if err := restartWith(Options{Policy: PolicyNone}); err != nil {
		t.Fatal(err)
	}
	err := restartWith(Options{Policy: PolicyStatic, ReservedCPUs: resource.MustParse("1")})
	want := fmt.Sprintf(`could not restore state from checkpoint: configured policy "static" differs from state checkpoint policy "none", please drain this node and delete the CPU manager checkpoint file %q before restarting Kubelet`, path)
	if err == nil || err.Error() != want {
		t.Fatalf("policy change: %v\nwant %s", err, want)
	}

	// CPU 1 given exclusively, then CPU 1 reserved.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, Options{Policy: PolicyStatic, ReservedCPUs: resource.MustParse("1"), StateDir: dir, Topology: topoSingleSocketHT})
	pod := makePod("p", "c", "1", "1")
	if err := m.Allocate(pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if got := m.GetExclusiveCPUs("p", "c"); !got.Equals(cpuset.New(4)) {
		t.Fatalf("allocated %s, want 4", got)
	}
	err = restartWith(Options{Policy: PolicyStatic, ReservedSystemCPUs: cpuset.New(4)})
	if err == nil || err.Error() != `not all reserved cpus: "4" are present in defaultCpuSet: "0-3,5-7"` {
		t.Fatalf("reservation change: %v", err)
	}

	// A tampered file.
	blob, _ := os.ReadFile(path)
	if err := os.WriteFile(path, []byte(strings.Replace(string(blob), `\"c\":\"4\"`, `\"c\":\"5\"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	err = restartWith(Options{Policy: PolicyStatic, ReservedCPUs: resource.MustParse("1")})
	if err == nil || !strings.Contains(err.Error(), "could not load v4 checkpoint: checkpoint is corrupted") {
		t.Fatalf("tampered file: %v", err)
	}
}

func TestNonePolicy(t *testing.T) {
	opts := Options{StateDir: t.TempDir(), Topology: topoSingleSocketHT}
	m := mustNew(t, opts)
	pod := makePod("p", "c", "2", "2")
	if err := m.Allocate(pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	if cpus, ok := m.CPUSetFor(pod, &pod.Spec.Containers[0]); ok {
		t.Errorf("CPUSetFor = %s, want none", cpus)
	}
	if !m.GetAllocatableCPUs().IsEmpty() || !m.GetExclusiveCPUs("p", "c").IsEmpty() {
		t.Errorf("none policy reports CPUs")
	}
	if m.GetTopologyHints(pod, &pod.Spec.Containers[0]) != nil || m.GetPodTopologyHints(pod) != nil {
		t.Errorf("none policy gives hints")
	}
	cp, err := state.Read(filepath.Join(opts.StateDir, state.FileName))
	if err != nil || cp.PolicyName != PolicyNone || !cp.DefaultCPUSet.IsEmpty() {
		t.Errorf("state file %+v, %v; want policy none, empty", cp, err)
	}
	if err := m.Start(context.Background(), func() []*v1.Pod { return nil }, &fakeRuntime{}); err != nil {
		t.Fatal(err)
	}
}

// Upstream's TestCPUManagerAddWithInitContainers: init containers' CPUs are taken again
// by the pod's later containers.
func TestInitContainerCPUsReused(t *testing.T) {
	tests := []struct {
		name      string
		init, app []string
		wantInit  []cpuset.CPUSet
		wantApp   []cpuset.CPUSet
	}{
		{"init not exclusive", []string{"100m"}, []string{"4"}, []cpuset.CPUSet{{}}, []cpuset.CPUSet{cpuset.New(0, 4, 1, 5)}},
		{"equal", []string{"4"}, []string{"4"}, []cpuset.CPUSet{cpuset.New(0, 4, 1, 5)}, []cpuset.CPUSet{cpuset.New(0, 4, 1, 5)}},
		{"init bigger", []string{"6"}, []string{"4"}, []cpuset.CPUSet{cpuset.New(0, 4, 1, 5, 2, 6)}, []cpuset.CPUSet{cpuset.New(0, 4, 1, 5)}},
		{"init smaller", []string{"2"}, []string{"4"}, []cpuset.CPUSet{cpuset.New(0, 4)}, []cpuset.CPUSet{cpuset.New(0, 4, 1, 5)}},
		{"two inits, equal", []string{"2", "2"}, []string{"2"}, []cpuset.CPUSet{cpuset.New(0, 4), cpuset.New(0, 4)}, []cpuset.CPUSet{cpuset.New(0, 4)}},
		{"two inits, increasing", []string{"2", "4"}, []string{"6"},
			[]cpuset.CPUSet{cpuset.New(0, 4), cpuset.New(0, 4, 1, 5)}, []cpuset.CPUSet{cpuset.New(0, 4, 1, 5, 2, 6)}},
		{"two inits, two apps splitting", []string{"2", "4"}, []string{"2", "2"},
			[]cpuset.CPUSet{cpuset.New(0, 4), cpuset.New(0, 4, 1, 5)}, []cpuset.CPUSet{cpuset.New(0, 4), cpuset.New(1, 5)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPolicy(t, topoSingleSocketHT, 0, cpuset.New(), nil, nil)
			s := stateWith(mustParse(t, "0-7"), nil)
			pod := makeMultiContainerPod("podUID", tt.init, tt.app)
			containers := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
			want := append(append([]cpuset.CPUSet{}, tt.wantInit...), tt.wantApp...)
			used := cpuset.New()
			for i := range containers {
				if err := p.allocate(s, pod, &containers[i]); err != nil {
					t.Fatalf("%s: %v", containers[i].Name, err)
				}
				got, _ := s.get("podUID", containers[i].Name)
				if !got.Equals(want[i]) {
					t.Errorf("%s got %s, want %s", containers[i].Name, got, want[i])
				}
				used = used.Union(got)
			}
			if !s.defaultSet.Equals(mustParse(t, "0-7").Difference(used)) {
				t.Errorf("shared pool %s, used %s", s.defaultSet, used)
			}
		})
	}
}

// A sidecar (restartable init container) runs alongside the app: its CPUs are not reused.
func TestSidecarCPUsNotReused(t *testing.T) {
	p := testPolicy(t, topoSingleSocketHT, 0, cpuset.New(), nil, nil)
	s := stateWith(mustParse(t, "0-7"), nil)
	pod := makeMultiContainerPod("pod", []string{"2"}, []string{"2"})
	always := v1.ContainerRestartPolicyAlways
	pod.Spec.InitContainers[0].RestartPolicy = &always
	for _, c := range []*v1.Container{&pod.Spec.InitContainers[0], &pod.Spec.Containers[0]} {
		if err := p.allocate(s, pod, c); err != nil {
			t.Fatal(err)
		}
	}
	sidecar, _ := s.get("pod", "init-0")
	app, _ := s.get("pod", "app-0")
	if !sidecar.Equals(cpuset.New(0, 4)) || !app.Equals(cpuset.New(1, 5)) {
		t.Errorf("sidecar %s, app %s; want 0,4 and 1,5", sidecar, app)
	}
}

type fakeRuntime struct {
	mu      sync.Mutex
	running map[string]string // pod/container → ID
	updates map[string]cpuset.CPUSet
	fail    bool
}

func (f *fakeRuntime) RunningContainerID(podUID, name string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, ok := f.running[podUID+"/"+name]
	return id, ok
}

func (f *fakeRuntime) UpdateContainerCPUSet(_ context.Context, id string, cpus cpuset.CPUSet) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return fmt.Errorf("runtime down")
	}
	if f.updates == nil {
		f.updates = map[string]cpuset.CPUSet{}
	}
	f.updates[id] = cpus
	return nil
}

func (f *fakeRuntime) takeUpdates() map[string]cpuset.CPUSet {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.updates
	f.updates = nil
	return u
}

func TestReconcile(t *testing.T) {
	m := mustNew(t, staticOptions(t, topoSingleSocketHT)) // CPU 0 reserved
	exclusive := makePod("excl", "app", "2", "2")
	shared := makePod("shared", "app", "100m", "100m")
	gone := makePod("gone", "app", "2", "2")
	for _, pod := range []*v1.Pod{exclusive, gone, shared} {
		if err := m.Allocate(pod, &pod.Spec.Containers[0]); err != nil {
			t.Fatal(err)
		}
	}
	m.AddContainer(exclusive, &exclusive.Spec.Containers[0], "id-excl")
	m.AddContainer(shared, &shared.Spec.Containers[0], "id-shared")
	active := []*v1.Pod{exclusive, shared}
	rt := &fakeRuntime{running: map[string]string{"excl/app": "id-excl", "shared/app": "id-shared"}}
	m.mu.Lock()
	m.activePods = func() []*v1.Pod { return active }
	m.mu.Unlock()

	m.reconcile(context.Background(), rt)
	if got := m.GetExclusiveCPUs("gone", "app"); !got.IsEmpty() {
		t.Errorf("stale container keeps %s", got)
	}
	// The gone pod's core is back in the shared pool; the exclusive container, created
	// with its CPUs, needs no update; the shared one gets the pool once.
	wantPool := mustParse(t, "0-7").Difference(m.GetExclusiveCPUs("excl", "app"))
	updates := rt.takeUpdates()
	if len(updates) != 1 || !updates["id-shared"].Equals(wantPool) {
		t.Errorf("first pass updated %v, want id-shared to %s", updates, wantPool)
	}
	m.reconcile(context.Background(), rt)
	if updates := rt.takeUpdates(); len(updates) != 0 {
		t.Errorf("second pass updated %v, want nothing", updates)
	}

	// A new exclusive container shrinks the pool: the shared container follows.
	late := makePod("late", "app", "2", "2")
	active = append(active, late)
	if err := m.Allocate(late, &late.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	m.reconcile(context.Background(), rt)
	updates = rt.takeUpdates()
	if !updates["id-shared"].Equals(wantPool.Difference(m.GetExclusiveCPUs("late", "app"))) || len(updates) != 1 {
		t.Errorf("after a new exclusive container: %v", updates)
	}

	// A failed update is retried at the next pass.
	if err := m.RemoveContainer("late", "app"); err != nil {
		t.Fatal(err)
	}
	rt.fail = true
	m.reconcile(context.Background(), rt)
	rt.fail = false
	m.reconcile(context.Background(), rt)
	if updates := rt.takeUpdates(); !updates["id-shared"].Equals(wantPool) {
		t.Errorf("retry after failure: %v, want id-shared to %s", updates, wantPool)
	}
}

func TestStaleStateWaitsForSources(t *testing.T) {
	ready := false
	opts := staticOptions(t, topoSingleSocketHT)
	opts.SourcesReady = func() bool { return ready }
	m := mustNew(t, opts)
	pod := makePod("p", "c", "2", "2")
	if err := m.Allocate(pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Start(ctx, func() []*v1.Pod { return nil }, &fakeRuntime{}); err != nil {
		t.Fatal(err)
	}
	other := makePod("q", "c", "1", "2")
	m.GetTopologyHints(other, &other.Spec.Containers[0])
	if m.GetExclusiveCPUs("p", "c").IsEmpty() {
		t.Fatal("state dropped before the pod sources were ready")
	}
	m.mu.Lock()
	ready = true
	m.mu.Unlock()
	m.GetTopologyHints(other, &other.Spec.Containers[0])
	if got := m.GetExclusiveCPUs("p", "c"); !got.IsEmpty() {
		t.Errorf("inactive pod keeps %s", got)
	}
}

func TestStartRunsTheLoop(t *testing.T) {
	opts := staticOptions(t, topoSingleSocketHT)
	opts.ReconcilePeriod = 10 * time.Millisecond
	m := mustNew(t, opts)
	pod := makePod("p", "c", "100m", "100m")
	rt := &fakeRuntime{running: map[string]string{"p/c": "id"}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Start(ctx, func() []*v1.Pod { return []*v1.Pod{pod} }, rt); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if u := rt.takeUpdates(); u["id"].Equals(mustParse(t, "0-7")) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the loop never updated the container")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestManagerHintsAndMetrics(t *testing.T) {
	m := mustNew(t, staticOptions(t, topoDualSocketHT)) // CPU 0 reserved
	pod := makePod("p", "c", "6", "6")
	hints := m.GetTopologyHints(pod, &pod.Spec.Containers[0])["cpu"]
	// NUMA node 0 has 5 CPUs free for exclusive use: only node 1 fits alone.
	if len(hints) != 2 || hints[0] != hint(true, 1) || hints[1] != hint(false, 0, 1) {
		t.Errorf("hints %v", hints)
	}
	if err := m.Allocate(pod, &pod.Spec.Containers[0]); err != nil {
		t.Fatal(err)
	}
	checks := map[string]float64{
		"requests":  testutil.ToFloat64(m.metrics.pinningRequests),
		"errors":    testutil.ToFloat64(m.metrics.pinningErrors),
		"shared":    testutil.ToFloat64(m.metrics.sharedPool),
		"exclusive": testutil.ToFloat64(m.metrics.exclusiveCPUs),
		"numa0":     testutil.ToFloat64(m.metrics.allocationPerNUMA.WithLabelValues("0")),
		"numa1":     testutil.ToFloat64(m.metrics.allocationPerNUMA.WithLabelValues("1")),
	}
	want := map[string]float64{"requests": 1, "errors": 0, "shared": 5000, "exclusive": 6, "numa0": 0, "numa1": 6}
	for k, v := range want {
		if checks[k] != v {
			t.Errorf("%s = %v, want %v", k, checks[k], v)
		}
	}
	if n := len(m.Collectors()); n != 5 {
		t.Errorf("%d collectors, want 5", n)
	}
	// Full names, for the caller's registry.
	if err := testutil.CollectAndCompare(m.metrics.exclusiveCPUs, strings.NewReader(`
# HELP kubelet_cpu_manager_exclusive_cpu_allocation_count [ALPHA] The total number of CPUs exclusively allocated to containers running on this node
# TYPE kubelet_cpu_manager_exclusive_cpu_allocation_count gauge
kubelet_cpu_manager_exclusive_cpu_allocation_count 6
`)); err != nil {
		t.Error(err)
	}
}
