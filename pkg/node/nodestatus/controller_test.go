package nodestatus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// newFakeClient is a fake clientset whose API server gives each created Node a UID.
func newFakeClient(objs ...runtime.Object) *fake.Clientset {
	cs := fake.NewClientset(objs...)
	var n atomic.Int64
	cs.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		node := a.(k8stesting.CreateAction).GetObject().(*v1.Node)
		if node.UID == "" {
			node.UID = types.UID(fmt.Sprintf("uid-%d", n.Add(1)))
		}
		return false, nil, nil
	})
	return cs
}

// runController starts a controller on a real clock with fast periods.
func runController(t *testing.T, opts Options, deps Deps) (*testEnv, context.Context) {
	t.Helper()
	deps.Clock = clock.RealClock{}
	env := newTestController(t, opts, deps)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go env.c.Run(ctx)
	return env, ctx
}

// eventually polls cond for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func getNode(cs *fake.Clientset) (*v1.Node, error) {
	return cs.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
}

func getLease(cs *fake.Clientset) (*coordinationv1.Lease, error) {
	return cs.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(context.Background(), testNode, metav1.GetOptions{})
}

func isReady(n *v1.Node) bool {
	c := condition(n, v1.NodeReady)
	return c != nil && c.Status == v1.ConditionTrue
}

func countActions(cs *fake.Clientset, verb, resource string) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

func TestRegistersNodeAndRenewsLease(t *testing.T) {
	cs := newFakeClient()
	opts := testOptions()
	opts.NodeLeaseDurationSeconds = 2
	env, _ := runController(t, opts, Deps{Client: cs})
	var node *v1.Node
	eventually(t, "a Ready node", func() bool {
		n, err := getNode(cs)
		node = n
		return err == nil && isReady(n)
	})
	if node.Labels[v1.LabelHostname] != testNode || node.Status.Capacity.Cpu().String() != "4" {
		t.Errorf("registered node: labels %v capacity %v", node.Labels, node.Status.Capacity)
	}
	var lease *coordinationv1.Lease
	eventually(t, "the node's lease", func() bool {
		l, err := getLease(cs)
		lease = l
		return err == nil && len(l.OwnerReferences) == 1
	})
	owner := lease.OwnerReferences[0]
	if owner.Kind != "Node" || owner.APIVersion != "v1" || owner.Name != testNode || owner.UID != node.UID {
		t.Errorf("lease owner = %+v, want Node %s %s", owner, testNode, node.UID)
	}
	if *lease.Spec.HolderIdentity != testNode || *lease.Spec.LeaseDurationSeconds != 2 || lease.Spec.RenewTime == nil {
		t.Errorf("lease spec = %+v", lease.Spec)
	}
	first := lease.Spec.RenewTime.Time
	eventually(t, "a lease renewal", func() bool {
		l, err := getLease(cs)
		return err == nil && l.Spec.RenewTime.After(first)
	})
	eventually(t, "the watch to see the node", env.c.NodeSynced)
	if ref := env.c.NodeRef(); ref.UID != node.UID {
		t.Errorf("NodeRef UID = %q, want %q", ref.UID, node.UID)
	}
}

func TestReRegistersDeletedNode(t *testing.T) {
	cs := newFakeClient()
	opts := testOptions()
	opts.NodeLeaseDurationSeconds = 1
	env, ctx := runController(t, opts, Deps{Client: cs})
	var first *v1.Node
	eventually(t, "registration", func() bool {
		n, err := getNode(cs)
		first = n
		return err == nil
	})
	eventually(t, "the watch to see the node", env.c.NodeSynced)
	if err := cs.CoreV1().Nodes().Delete(ctx, testNode, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var second *v1.Node
	eventually(t, "re-registration", func() bool {
		n, err := getNode(cs)
		second = n
		return err == nil && n.UID != first.UID
	})
	if len(second.Status.Conditions) != 4 || second.Labels[v1.LabelOSStable] == "" {
		t.Errorf("re-registered node lacks status or labels: %+v", second)
	}
	eventually(t, "the lease to follow the new node", func() bool {
		l, err := getLease(cs)
		return err == nil && len(l.OwnerReferences) == 1 && l.OwnerReferences[0].UID == second.UID
	})
}

func TestNodeGoneOnStatusUpdate(t *testing.T) {
	cs := newFakeClient()
	env := newTestController(t, testOptions(), Deps{Client: cs})
	env.c.registered.Store(true)
	err := env.c.updateNodeStatus(context.Background())
	if !errors.Is(err, errNodeGone) {
		t.Fatalf("err = %v, want node not found", err)
	}
	if env.c.registered.Load() {
		t.Error("still marked registered")
	}
	select {
	case <-env.c.resync:
	default:
		t.Error("no immediate resync requested")
	}
	if n := countActions(cs, "get", "nodes"); n != 1 {
		t.Errorf("%d GETs, want 1: a missing node is not retried", n)
	}
}

func TestReconcileExistingNode(t *testing.T) {
	existing := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "old", Labels: map[string]string{
			v1.LabelHostname: "stale", v1.LabelOSStable: "windows", "team": "keep",
		}},
		Status: v1.NodeStatus{
			Capacity:    v1.ResourceList{"hugepages-2Mi": q("1Gi"), "hugepages-32Mi": q("64Mi"), "cpu": q("1")},
			Allocatable: v1.ResourceList{"hugepages-2Mi": q("1Gi"), "hugepages-32Mi": q("64Mi"), "cpu": q("1")},
		},
	}
	for name, createErr := range map[string]error{
		"already exists": nil,
		"forbidden":      apierrors.NewForbidden(v1.Resource("nodes"), testNode, errors.New("no create")),
	} {
		t.Run(name, func(t *testing.T) {
			cs := newFakeClient(existing.DeepCopy())
			if createErr != nil {
				cs.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, createErr })
			}
			env := newTestController(t, testOptions(), Deps{Client: cs})
			ctx := context.Background()
			initial, _ := env.c.InitialNode(ctx)
			if err := env.c.tryRegister(ctx, initial); err != nil {
				t.Fatal(err)
			}
			got, _ := getNode(cs)
			if got.UID != "old" || got.Labels[v1.LabelHostname] != testNode || got.Labels[v1.LabelOSStable] != initial.Labels[v1.LabelOSStable] || got.Labels["team"] != "keep" {
				t.Errorf("labels = %v", got.Labels)
			}
			if got.Annotations[annotationControllerManagedAttach] != "true" {
				t.Errorf("annotations = %v", got.Annotations)
			}
			if _, ok := got.Status.Capacity["hugepages-32Mi"]; ok {
				t.Error("a huge page size the host lacks was kept")
			}
			if c := got.Status.Capacity["hugepages-2Mi"]; c.Cmp(q("512Mi")) != 0 {
				t.Errorf("hugepages-2Mi = %s, want 512Mi", c.String())
			}
			if c := got.Status.Capacity.Cpu(); c.Cmp(q("1")) != 0 {
				t.Errorf("registration changed cpu to %s; that is the status update's job", c.String())
			}
		})
	}
}

// TestReconcileExistingNodeResetsExtendedResources: when the device plugins' state is
// gone (the node was re-created), registration zeroes an existing Node's extended
// resources and only them; otherwise they are left for the status updates.
func TestReconcileExistingNodeResetsExtendedResources(t *testing.T) {
	for _, reset := range []bool{true, false} {
		t.Run(fmt.Sprint("reset=", reset), func(t *testing.T) {
			list := v1.ResourceList{"example.com/gpu": q("2"), "cpu": q("1"), "hugepages-2Mi": q("512Mi")}
			existing := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode},
				Status: v1.NodeStatus{Capacity: list.DeepCopy(), Allocatable: list.DeepCopy()}}
			cs := newFakeClient(existing)
			env := newTestController(t, testOptions(), Deps{Client: cs, ResetExtendedResources: func() bool { return reset }})
			ctx := context.Background()
			initial, _ := env.c.InitialNode(ctx)
			if err := env.c.tryRegister(ctx, initial); err != nil {
				t.Fatal(err)
			}
			got, _ := getNode(cs)
			want := q("2")
			if reset {
				want = q("0")
			}
			for _, l := range []v1.ResourceList{got.Status.Capacity, got.Status.Allocatable} {
				if g := l["example.com/gpu"]; g.Cmp(want) != 0 {
					t.Errorf("example.com/gpu = %s, want %s", g.String(), want.String())
				}
				if c := l.Cpu(); c.Cmp(q("1")) != 0 {
					t.Errorf("cpu = %s: only extended resources are reset", c.String())
				}
			}
		})
	}
}

func TestReportFrequency(t *testing.T) {
	cs := newFakeClient()
	env := newTestController(t, testOptions(), Deps{Client: cs})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	initial, _ := env.c.InitialNode(ctx)
	if err := env.c.tryRegister(ctx, initial); err != nil {
		t.Fatal(err)
	}
	env.c.startWatch(ctx)
	eventually(t, "the watch to see the node", env.c.NodeSynced)
	patches := func() int { return countActions(cs, "patch", "nodes") }
	sync := func(step time.Duration) {
		env.clock.Step(step)
		if err := env.c.updateNodeStatus(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sync(time.Second)
	if patches() != 1 {
		t.Fatalf("first sync: %d patches, want 1 (the first report)", patches())
	}
	// Without change the next report waits nodeStatusReportFrequency, offset by a random
	// delay within ±50%: nothing before 2.5 minutes, something by 7.5.
	for range 14 {
		sync(10 * time.Second)
	}
	if patches() != 1 {
		t.Fatalf("unchanged status patched %d times within 140s", patches()-1)
	}
	sync(6 * time.Minute)
	if patches() != 2 {
		t.Fatalf("no report after the report period: %d patches", patches())
	}
	env.runtime.setErrs(nil, errors.New("container runtime network not ready: NetworkReady=false"))
	sync(time.Second)
	if patches() != 3 {
		t.Fatalf("a Ready change was not patched at once: %d patches", patches())
	}
	got, _ := getNode(cs)
	if c := condition(got, v1.NodeReady); c.Status != v1.ConditionFalse || c.Message != "container runtime network not ready: NetworkReady=false" {
		t.Errorf("Ready on the server = %+v", c)
	}
}

func TestRegisterNodeFalseOnlyUpdatesAnExistingNode(t *testing.T) {
	cs := newFakeClient()
	opts := testOptions()
	opts.RegisterNode = false
	opts.NodeStatusUpdateFrequency = 100 * time.Millisecond
	_, ctx := runController(t, opts, Deps{Client: cs})
	time.Sleep(500 * time.Millisecond)
	if n := countActions(cs, "create", "nodes"); n != 0 {
		t.Fatalf("registerNode=false created the node %d times", n)
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "status on the existing node", func() bool {
		n, err := getNode(cs)
		return err == nil && isReady(n)
	})
	if n := countActions(cs, "create", "nodes"); n != 1 {
		t.Errorf("creates = %d, want only the test's", n)
	}
}

func TestFastStatusUpdateReportsReadyAtOnce(t *testing.T) {
	cs := newFakeClient()
	opts := testOptions()
	opts.NodeStatusUpdateFrequency = time.Hour
	env := &testEnv{runtime: &fakeRuntime{version: "1.7.24", networkErr: errors.New("cni plugin not initialized")}}
	env2, _ := runController(t, opts, Deps{Client: cs, Runtime: env.runtime})
	eventually(t, "a NotReady node", func() bool {
		n, err := getNode(cs)
		return err == nil && condition(n, v1.NodeReady) != nil && !isReady(n)
	})
	eventually(t, "the watch to see the node", env2.c.NodeSynced)
	env.runtime.setErrs(nil, nil)
	start := time.Now()
	eventually(t, "Ready without waiting for the hourly sync", func() bool {
		n, err := getNode(cs)
		return err == nil && isReady(n)
	})
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Ready took %v", d)
	}
}

func TestNodeForAdmission(t *testing.T) {
	env := newTestController(t, testOptions(), Deps{})
	ctx := context.Background()
	node, err := env.c.Node(ctx)
	if err != nil || node.Labels[v1.LabelHostname] != testNode || node.Status.Allocatable.Memory().IsZero() {
		t.Fatalf("standalone Node() = %v, %v", node, err)
	}
	env.runtime.images = nil
	calls := env.runtime.imageCalls
	for range 5 {
		_, _ = env.c.Node(ctx)
	}
	if env.runtime.imageCalls != calls {
		t.Errorf("Node() listed images %d times within one update period", env.runtime.imageCalls-calls)
	}

	cs := newFakeClient()
	env2, ctx2 := runController(t, testOptions(), Deps{Client: cs})
	eventually(t, "the watch to see the node", env2.c.NodeSynced)
	n, _ := getNode(cs)
	n.Labels["admin-label"] = "set"
	if _, err := cs.CoreV1().Nodes().Update(ctx2, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Node() to show the server's label", func() bool {
		got, err := env2.c.Node(ctx2)
		return err == nil && got.Labels["admin-label"] == "set"
	})
}

func TestRegistrationBacksOffDuringOutage(t *testing.T) {
	cs := newFakeClient()
	var mu sync.Mutex
	var attempts []time.Time
	down := atomic.Bool{}
	down.Store(true)
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetVerb() == "create" && a.GetResource().Resource == "nodes" {
			mu.Lock()
			attempts = append(attempts, time.Now())
			mu.Unlock()
		}
		if down.Load() {
			return true, nil, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
		}
		return false, nil, nil
	})
	var lines atomic.Int64
	var regErrors atomic.Int64
	logger := funcr.New(func(_, args string) {
		lines.Add(1)
		if strings.Contains(args, "Unable to register node with API server") {
			regErrors.Add(1)
		}
	}, funcr.Options{})
	env := newTestController(t, testOptions(), Deps{Client: cs, Clock: clock.RealClock{}})
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	go env.c.Run(ctx)
	time.Sleep(3200 * time.Millisecond)
	down.Store(false)
	eventually(t, "registration after the outage", func() bool { _, err := getNode(cs); return err == nil })

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d create attempts, %d registration error lines, %d log lines", len(attempts), regErrors.Load(), lines.Load())
	for i := 1; i < len(attempts) && i < 5; i++ {
		gap, least := attempts[i].Sub(attempts[i-1]), registerFirstBackoff<<i
		if gap < least*9/10 {
			t.Errorf("attempt %d came %v after the previous one, want at least %v", i, gap, least)
		}
	}
	if n := regErrors.Load(); n < 3 || n > 6 {
		t.Errorf("%d registration error lines in 3.2s, want one per back-off step (4-5)", n)
	}
	if n := lines.Load(); n > 30 {
		t.Errorf("%d log lines during a 3s outage", n)
	}
}

func TestStatusAfterOutageReadsTheServer(t *testing.T) {
	cs := newFakeClient()
	env := newTestController(t, testOptions(), Deps{Client: cs})
	ctx := context.Background()
	initial, _ := env.c.InitialNode(ctx)
	if err := env.c.tryRegister(ctx, initial); err != nil {
		t.Fatal(err)
	}
	// A watch that stopped while the API server was away still holds the Ready node.
	stale, _ := getNode(cs)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = indexer.Add(stale)
	lister := corelisters.NewNodeLister(indexer)
	env.c.nodeLister.Store(&lister)
	if err := env.c.updateNodeStatus(ctx); err != nil {
		t.Fatal(err)
	}

	var down atomic.Bool
	down.Store(true)
	cs.PrependReactor("*", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	// The periodic report falls due during the outage, so the update is attempted.
	env.clock.Step(8 * time.Minute)
	if err := env.c.updateNodeStatus(ctx); err == nil {
		t.Fatal("update succeeded during the outage")
	}
	// Meanwhile the node controller marked the node Unknown.
	down.Store(false)
	n, _ := getNode(cs)
	condition(n, v1.NodeReady).Status = v1.ConditionUnknown
	condition(n, v1.NodeReady).Reason = "NodeStatusUnknown"
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.clock.Step(10 * time.Second)
	if err := env.c.updateNodeStatus(ctx); err != nil {
		t.Fatal(err)
	}
	n, _ = getNode(cs)
	if !isReady(n) {
		t.Errorf("Ready after the outage = %+v, want True at the first sync", condition(n, v1.NodeReady))
	}
}

func TestJoinRuntime(t *testing.T) {
	health, info := &fakeRuntime{networkErr: errors.New("no cni")}, &fakeRuntime{version: "2.0.0"}
	rt := JoinRuntime(health, info)
	v, _ := rt.Version(context.Background())
	if rt.NetworkErr() == nil || v != "2.0.0" {
		t.Errorf("joined runtime: network %v, version %q", rt.NetworkErr(), v)
	}
}

// TestLeaseAndStatusRecoverQuicklyAfterOutage: while the API server refuses every
// heartbeat the lease and status are retried within a second, so both are fresh right
// after it returns; and a Ready condition someone else rewrote (the node controller's
// Unknown) is written back at once.
func TestLeaseAndStatusRecoverQuicklyAfterOutage(t *testing.T) {
	cs := newFakeClient()
	opts := testOptions()
	opts.NodeLeaseDurationSeconds = 12 // renewal every 3 s: only retries can be faster
	opts.NodeStatusUpdateFrequency = 3 * time.Second
	_, ctx := runController(t, opts, Deps{Client: cs})
	eventually(t, "a Ready node with a lease", func() bool {
		n, err := getNode(cs)
		_, lerr := getLease(cs)
		return err == nil && isReady(n) && lerr == nil
	})
	var down atomic.Bool
	refuse := func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, errors.New("connect: connection refused")
		}
		return false, nil, nil
	}
	cs.PrependReactor("update", "leases", refuse)
	cs.PrependReactor("get", "leases", refuse)
	cs.PrependReactor("patch", "nodes", refuse)
	cs.PrependReactor("get", "nodes", refuse)

	time.Sleep(200 * time.Millisecond)
	before, _ := getLease(cs)
	node, _ := getNode(cs)
	down.Store(true)
	time.Sleep(3500 * time.Millisecond) // a renewal fails meanwhile
	// The node controller marks the node Unknown while the kubelet cannot write.
	condition(node, v1.NodeReady).Status = v1.ConditionUnknown
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	down.Store(false)
	eventually(t, "lease renewed after the outage", func() bool {
		l, err := getLease(cs)
		return err == nil && l.Spec.RenewTime.After(before.Spec.RenewTime.Time)
	})
	if took := time.Since(back); took > 1500*time.Millisecond {
		t.Errorf("lease renewed %v after the API server returned, want within ~1 s", took)
	}
	eventually(t, "Ready written back", func() bool {
		n, err := getNode(cs)
		return err == nil && isReady(n)
	})
	if took := time.Since(back); took > 2*time.Second {
		t.Errorf("Ready written back %v after the API server returned, want within ~1 s", took)
	}
}

// fakeVolumes is the volume manager's side of status.volumesInUse.
type fakeVolumes struct {
	mu       sync.Mutex
	inUse    []v1.UniqueVolumeName
	reported [][]v1.UniqueVolumeName
}

func (f *fakeVolumes) VolumesInUse() []v1.UniqueVolumeName {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.inUse)
}

func (f *fakeVolumes) MarkVolumesAsReportedInUse(names []v1.UniqueVolumeName) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reported = append(f.reported, slices.Clone(names))
}

func (f *fakeVolumes) lastReported() []v1.UniqueVolumeName {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reported) == 0 {
		return nil
	}
	return f.reported[len(f.reported)-1]
}

// The volumes in use reach the server, and the volume manager is told what the server
// has after every sync, patched or not.
func TestVolumesInUseReported(t *testing.T) {
	cs := newFakeClient()
	vols := &fakeVolumes{inUse: []v1.UniqueVolumeName{"kubernetes.io/csi/d^a"}}
	env := newTestController(t, testOptions(), Deps{Client: cs, Volumes: vols})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	initial, _ := env.c.InitialNode(ctx)
	if err := env.c.tryRegister(ctx, initial); err != nil {
		t.Fatal(err)
	}
	env.c.startWatch(ctx)
	eventually(t, "the watch to see the node", env.c.NodeSynced)
	sync := func() {
		env.clock.Step(time.Second)
		if err := env.c.updateNodeStatus(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	got, _ := getNode(cs)
	if !slices.Equal(got.Status.VolumesInUse, vols.inUse) || !slices.Equal(vols.lastReported(), vols.inUse) {
		t.Fatalf("server has %v, manager told %v; want %v", got.Status.VolumesInUse, vols.lastReported(), vols.inUse)
	}
	eventually(t, "the watch to see the status", func() bool {
		n, err := env.c.watchedNode()
		return err == nil && len(n.Status.VolumesInUse) == 1
	})
	before := countActions(cs, "patch", "nodes")
	n := len(vols.reported)
	sync()
	if countActions(cs, "patch", "nodes") != before || len(vols.reported) != n+1 {
		t.Errorf("an unchanged sync should not patch but still tell the manager (patches %d→%d, told %d→%d)",
			before, countActions(cs, "patch", "nodes"), n, len(vols.reported))
	}
	vols.mu.Lock()
	vols.inUse = nil
	vols.mu.Unlock()
	sync()
	got, _ = getNode(cs)
	if len(got.Status.VolumesInUse) != 0 || len(vols.lastReported()) != 0 {
		t.Errorf("after unmount: server has %v, manager told %v", got.Status.VolumesInUse, vols.lastReported())
	}
}
