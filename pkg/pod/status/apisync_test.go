package status

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeLookup is the pod manager as the syncer sees it.
type fakeLookup struct {
	pods    map[types.UID]*v1.Pod
	mirrors map[string]*v1.Pod // by pod name
}

func (f *fakeLookup) GetPodByUID(uid types.UID) (*v1.Pod, bool) { p, ok := f.pods[uid]; return p, ok }
func (f *fakeLookup) GetMirrorPodByPod(p *v1.Pod) (*v1.Pod, bool) {
	m, ok := f.mirrors[p.Name]
	return m, ok
}
func (f *fakeLookup) TranslatePodUID(uid types.UID) types.UID {
	for name, m := range f.mirrors {
		if m.UID == uid {
			for _, p := range f.pods {
				if p.Name == name {
					return p.UID
				}
			}
		}
	}
	return uid
}

func apiPod(uid string, phase v1.PodPhase, conditions ...v1.PodCondition) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: types.UID(uid), ResourceVersion: "7"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app"}}},
		Status:     v1.PodStatus{Phase: phase, Conditions: conditions},
	}
}

func newSyncerFixture(running bool, objs ...runtime.Object) (*APISyncer, *fake.Clientset, *fakeLookup) {
	client := fake.NewSimpleClientset(objs...)
	lookup := &fakeLookup{pods: map[types.UID]*v1.Pod{}, mirrors: map[string]*v1.Pod{}}
	for _, o := range objs {
		p := o.(*v1.Pod)
		lookup.pods[p.UID] = p
	}
	return NewAPISyncer(client, lookup, func(types.UID) bool { return running }), client, lookup
}

func actionsOf(client *fake.Clientset, verb string) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range client.Actions() {
		if a.GetVerb() == verb {
			out = append(out, a)
		}
	}
	return out
}

func update(uid string, phase v1.PodPhase, finished bool, conditions ...v1.PodCondition) PodStatusUpdate {
	return PodStatusUpdate{UID: types.UID(uid), Name: "web", Namespace: "ns", Version: 1, PodIsFinished: finished,
		Status: v1.PodStatus{Phase: phase, Conditions: conditions}}
}

func TestAPISyncerPatchesWithUIDAndKeepsForeignConditions(t *testing.T) {
	gate := v1.PodCondition{Type: "example.com/gate", Status: v1.ConditionTrue}
	s, client, lookup := newSyncerFixture(true, apiPod("u1", v1.PodPending, gate))
	ready := v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionTrue}
	if _, err := s.SyncPodStatus(context.Background(), update("u1", v1.PodRunning, false, ready)); err != nil {
		t.Fatal(err)
	}
	patches := actionsOf(client, "patch")
	if len(patches) != 1 {
		t.Fatalf("%d patches, want 1", len(patches))
	}
	p := patches[0].(k8stesting.PatchAction)
	if p.GetSubresource() != "status" || !strings.Contains(string(p.GetPatch()), `"uid":"u1"`) {
		t.Errorf("patch %s on %q, want a status patch carrying the UID", p.GetPatch(), p.GetSubresource())
	}
	got, _ := client.CoreV1().Pods("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if got.Status.Phase != v1.PodRunning || findCondition(got.Status.Conditions, "example.com/gate") == nil || findCondition(got.Status.Conditions, v1.PodReady) == nil {
		t.Errorf("API status after sync: %+v", got.Status)
	}

	// The same status again, once the watch has delivered the patched pod, patches no
	// status: only the preconditions go, for the API server to say whether the watch
	// was behind.
	got.ResourceVersion = "8"
	lookup.pods["u1"] = got
	client.ClearActions()
	if _, err := s.SyncPodStatus(context.Background(), update("u1", v1.PodRunning, false, ready)); err != nil {
		t.Fatal(err)
	}
	patches = actionsOf(client, "patch")
	if len(patches) != 1 {
		t.Fatalf("%d patches for an unchanged status, want the preconditions' alone", len(patches))
	}
	if p := string(patches[0].(k8stesting.PatchAction).GetPatch()); p != `{"metadata":{"resourceVersion":"8","uid":"u1"}}` {
		t.Errorf("patch %s for an unchanged status, want only the preconditions", p)
	}
	// Read from the API instead (no watched pod), the same status is no patch at all.
	delete(lookup.pods, "u1")
	client.ClearActions()
	if _, err := s.SyncPodStatus(context.Background(), update("u1", v1.PodRunning, false, ready)); err != nil {
		t.Fatal(err)
	}
	if n := len(actionsOf(client, "patch")); n != 0 {
		t.Errorf("%d patches for an unchanged status read from the API", n)
	}
}

// The watch may be behind a write of ours that the status has since gone back on: the
// watched pod then equals the status, the API's pod does not. The API server's Conflict
// makes the syncer read the pod and patch it back.
func TestAPISyncerWatchBehindAStatusThatWentBack(t *testing.T) {
	ready := v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionTrue}
	notReady := v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionFalse}
	watched := apiPod("u1", v1.PodRunning, ready)
	s, client, lookup := newSyncerFixture(true, watched)
	if _, err := s.SyncPodStatus(context.Background(), update("u1", v1.PodRunning, false, notReady)); err != nil {
		t.Fatal(err)
	}
	lookup.pods["u1"] = watched // the watch has not delivered the write yet
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), `"resourceVersion":"7"`) {
			return true, nil, apierrors.NewConflict(v1.Resource("pods"), "web", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	if _, err := s.SyncPodStatus(context.Background(), update("u1", v1.PodRunning, false, ready)); err != nil {
		t.Fatal(err)
	}
	got, _ := client.CoreV1().Pods("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if c := findCondition(got.Status.Conditions, v1.PodReady); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("Ready in the API: %+v, want True again", c)
	}
}

func TestAPISyncerHoldsBackTerminalPhaseWhileContainersMayRun(t *testing.T) {
	s, client, _ := newSyncerFixture(true, apiPod("u1", v1.PodRunning))
	if _, err := s.SyncPodStatus(context.Background(), update("u1", v1.PodFailed, false)); err != nil {
		t.Fatal(err)
	}
	got, _ := client.CoreV1().Pods("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if got.Status.Phase != v1.PodRunning {
		t.Errorf("phase %s reached the API while containers could still run", got.Status.Phase)
	}
}

func TestAPISyncerDeletesFinishedPodWithUIDPrecondition(t *testing.T) {
	pod := apiPod("u1", v1.PodRunning)
	now := metav1.NewTime(time.Now())
	pod.DeletionTimestamp = &now
	s, client, _ := newSyncerFixture(false, pod)

	// Terminal but not finished yet: patched, not deleted.
	forget, err := s.SyncPodStatus(context.Background(), update("u1", v1.PodSucceeded, false))
	if err != nil || forget {
		t.Fatalf("forget=%v err=%v", forget, err)
	}
	if n := len(actionsOf(client, "delete")); n != 0 {
		t.Fatalf("deleted before the pod finished")
	}
	forget, err = s.SyncPodStatus(context.Background(), update("u1", v1.PodSucceeded, true))
	if err != nil || !forget {
		t.Fatalf("forget=%v err=%v, want the status forgotten after deletion", forget, err)
	}
	deletes := actionsOf(client, "delete")
	if len(deletes) != 1 {
		t.Fatalf("%d deletes, want 1", len(deletes))
	}
	opts := deletes[0].(k8stesting.DeleteActionImpl).DeleteOptions
	if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 0 || opts.Preconditions == nil || *opts.Preconditions.UID != "u1" {
		t.Errorf("delete options %+v, want grace 0 and UID precondition", opts)
	}
}

func TestAPISyncerSkipsRecreatedPod(t *testing.T) {
	s, client, _ := newSyncerFixture(true, apiPod("new", v1.PodPending))
	forget, err := s.SyncPodStatus(context.Background(), update("old", v1.PodRunning, false))
	if err != nil || !forget {
		t.Fatalf("forget=%v err=%v, want the old pod's status forgotten", forget, err)
	}
	if n := len(actionsOf(client, "patch")); n != 0 {
		t.Errorf("patched a new pod with the old pod's status")
	}
}

func TestAPISyncerWritesStaticPodStatusToItsMirror(t *testing.T) {
	mirror := apiPod("mirror-uid", v1.PodPending)
	mirror.Annotations = map[string]string{"kubernetes.io/config.mirror": "h"}
	client := fake.NewSimpleClientset(mirror)
	static := apiPod("static-uid", "")
	static.Annotations = map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": "h"}
	lookup := &fakeLookup{pods: map[types.UID]*v1.Pod{"static-uid": static}, mirrors: map[string]*v1.Pod{"web": mirror}}
	s := NewAPISyncer(client, lookup, func(types.UID) bool { return true })
	if _, err := s.SyncPodStatus(context.Background(), update("static-uid", v1.PodRunning, false)); err != nil {
		t.Fatal(err)
	}
	got, _ := client.CoreV1().Pods("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if got.Status.Phase != v1.PodRunning {
		t.Errorf("mirror phase %q, want the static pod's Running", got.Status.Phase)
	}
	// The mirror in the lookup still shows Pending.
	if needs, _ := s.NeedsReconcile(update("static-uid", v1.PodPending, false)); needs {
		t.Error("reconcile asked although the mirror shows the same status")
	}
	if needs, _ := s.NeedsReconcile(update("static-uid", v1.PodRunning, false)); !needs {
		t.Error("no reconcile although the mirror shows another phase")
	}
}

// A status found consistent with the pod at a resourceVersion is not compared again while
// the pod keeps that resourceVersion; once the pod changes it is.
func TestAPISyncerComparesAgainOnlyWhenThePodChanged(t *testing.T) {
	pod := apiPod("u1", v1.PodRunning)
	pod.ResourceVersion = "7"
	s, _, lookup := newSyncerFixture(false, pod)
	needs, consistentWith := s.NeedsReconcile(update("u1", v1.PodRunning, false))
	if needs || consistentWith != "7" {
		t.Fatalf("NeedsReconcile = %v, %q; want false, the pod's resourceVersion", needs, consistentWith)
	}
	// Another status passed as consistent with version 7 is not compared (the manager
	// passes the answer back only for the status version it was given for).
	u := update("u1", v1.PodFailed, false)
	u.ConsistentWith = consistentWith
	if needs, _ := s.NeedsReconcile(u); needs {
		t.Error("compared again although the pod had not changed")
	}
	changed := pod.DeepCopy()
	changed.ResourceVersion = "8"
	lookup.pods["u1"] = changed
	if needs, _ := s.NeedsReconcile(u); !needs {
		t.Error("not compared again after the pod changed")
	}
}

func TestAPISyncerReconcilesDeletionOfFinishedPod(t *testing.T) {
	pod := apiPod("u1", v1.PodSucceeded)
	pod.ResourceVersion = "1"
	s, _, lookup := newSyncerFixture(false, pod)
	if needs, _ := s.NeedsReconcile(update("u1", v1.PodSucceeded, true)); needs {
		t.Error("reconcile asked for a finished pod nobody deletes")
	}
	now := metav1.NewTime(time.Now())
	deleting := pod.DeepCopy()
	deleting.DeletionTimestamp = &now
	lookup.pods["u1"] = deleting
	u := update("u1", v1.PodSucceeded, true)
	u.ConsistentWith = pod.ResourceVersion // a deletion is offered whatever was compared
	if needs, _ := s.NeedsReconcile(u); !needs {
		t.Error("a finished pod being deleted is not offered again for deletion")
	}
}

// The pod the watch delivered is the patch's base: no read of the pod, and the patch
// carries its resourceVersion as a precondition.
func TestAPISyncerPatchesTheWatchedPodWithoutReadingIt(t *testing.T) {
	s, client, _ := newSyncerFixture(true, apiPod("u1", v1.PodPending))
	if _, err := s.SyncPodStatus(context.Background(), update("u1", v1.PodRunning, false)); err != nil {
		t.Fatal(err)
	}
	if n := len(actionsOf(client, "get")); n != 0 {
		t.Errorf("%d reads of the pod, want none", n)
	}
	patches := actionsOf(client, "patch")
	if len(patches) != 1 {
		t.Fatalf("%d patches, want 1", len(patches))
	}
	if p := string(patches[0].(k8stesting.PatchAction).GetPatch()); !strings.Contains(p, `"resourceVersion":"7"`) || !strings.Contains(p, `"uid":"u1"`) {
		t.Errorf("patch %s, want the watched resourceVersion and the UID as preconditions", p)
	}
}

// Where the pod changed after the watch delivered it, the API server refuses the patch
// (Conflict): the syncer reads the pod and patches that, as upstream always does.
func TestAPISyncerReadsThePodOnConflict(t *testing.T) {
	s, client, _ := newSyncerFixture(true, apiPod("u1", v1.PodPending))
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), `"resourceVersion":"7"`) {
			return true, nil, apierrors.NewConflict(v1.Resource("pods"), "web", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	if _, err := s.SyncPodStatus(context.Background(), update("u1", v1.PodRunning, false)); err != nil {
		t.Fatal(err)
	}
	var verbs []string
	for _, a := range client.Actions() {
		verbs = append(verbs, a.GetVerb())
	}
	if got := strings.Join(verbs, ","); got != "patch,get,patch" {
		t.Errorf("requests %s, want patch,get,patch", got)
	}
	got, _ := client.CoreV1().Pods("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if got.Status.Phase != v1.PodRunning {
		t.Errorf("phase %q after the retry, want Running", got.Status.Phase)
	}
}

// A pod gone from the API between the watch and the patch is not an error: its status
// goes when the pod leaves the pod manager.
func TestAPISyncerPatchOfAGonePod(t *testing.T) {
	s, client, _ := newSyncerFixture(true, apiPod("u1", v1.PodPending))
	if err := client.CoreV1().Pods("ns").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	forget, err := s.SyncPodStatus(context.Background(), update("u1", v1.PodRunning, false))
	if err != nil || forget {
		t.Fatalf("forget=%v err=%v, want neither", forget, err)
	}
}
