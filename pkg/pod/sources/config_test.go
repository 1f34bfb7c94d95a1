package sources

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/record"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

const waitTimeout = 5 * time.Second

func testPod(uid, name string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: name, Namespace: "default"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "busybox"}}},
	}
}

func set(source string, pods ...*v1.Pod) PodUpdate {
	if pods == nil {
		pods = []*v1.Pod{}
	}
	return PodUpdate{Pods: pods, Op: SET, Source: source}
}

// nextUpdate waits for one update.
func nextUpdate(t *testing.T, c *Config) PodUpdate {
	t.Helper()
	select {
	case u := <-c.Updates():
		return u
	case <-time.After(waitTimeout):
		t.Fatal("no update arrived")
		return PodUpdate{}
	}
}

// expectUpdate waits for one update and checks its operation and pod UIDs.
func expectUpdate(t *testing.T, c *Config, op PodOperation, source string, uids ...string) PodUpdate {
	t.Helper()
	u := nextUpdate(t, c)
	got := podUIDs(u.Pods)
	sort.Strings(uids)
	if u.Op != op || u.Source != source || strings.Join(got, ",") != strings.Join(uids, ",") {
		t.Fatalf("got %s from %q with %v; want %s from %q with %v", u.Op, u.Source, got, op, source, uids)
	}
	return u
}

// expectQuiet checks that the last change sent on ch produced no update: a source's
// changes are merged in order, so a marker pod added (and removed again) through the
// same channel must be the next thing to arrive.
func expectQuiet(t *testing.T, c *Config, ch chan<- interface{}) {
	t.Helper()
	marker := testPod("marker", "marker")
	ch <- PodUpdate{Op: ADD, Pods: []*v1.Pod{marker}}
	if u := nextUpdate(t, c); u.Op != ADD || len(u.Pods) != 1 || u.Pods[0].UID != "marker" {
		t.Fatalf("unexpected update %s from %q with %v", u.Op, u.Source, podUIDs(u.Pods))
	}
	ch <- PodUpdate{Op: REMOVE, Pods: []*v1.Pod{marker}}
	if u := nextUpdate(t, c); u.Op != REMOVE {
		t.Fatalf("unexpected update %s from %q with %v", u.Op, u.Source, podUIDs(u.Pods))
	}
}

func podUIDs(pods []*v1.Pod) []string {
	uids := make([]string, 0, len(pods))
	for _, p := range pods {
		uids = append(uids, string(p.UID))
	}
	sort.Strings(uids)
	return uids
}

func newTestConfig(t *testing.T) (*Config, chan<- interface{}) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := NewConfig(nil)
	return c, c.Channel(ctx, "test")
}

func TestFirstEmptySetAnnouncesTheSource(t *testing.T) {
	c, ch := newTestConfig(t)
	if c.SeenAllSources(sets.New("test")) {
		t.Fatal("source seen before it sent anything")
	}
	ch <- set("test")
	expectUpdate(t, c, ADD, "test")
	if !c.SeenAllSources(sets.New("test")) {
		t.Fatal("source not seen after its first SET")
	}
	if c.SeenAllSources(sets.New[string]()) {
		t.Fatal("SeenAllSources true though the caller has not seen the source")
	}
	ch <- set("test")
	expectQuiet(t, c, ch) // a second empty SET changes nothing
}

func TestSeenAllSourcesNeedsEverySource(t *testing.T) {
	c, ch := newTestConfig(t)
	c.Channel(context.Background(), "other")
	ch <- set("test")
	expectUpdate(t, c, ADD, "test")
	if c.SeenAllSources(sets.New("test", "other")) {
		t.Fatal("seen all sources though one never sent a SET")
	}
}

func TestNewPodsAreAddedWithLocalAnnotations(t *testing.T) {
	c, ch := newTestConfig(t)
	ch <- set("test", testPod("1", "a"), testPod("2", "b"))
	u := expectUpdate(t, c, ADD, "test", "1", "2")
	for _, p := range u.Pods {
		if p.Annotations[kubetypes.ConfigSourceAnnotationKey] != "test" {
			t.Errorf("pod %s: source annotation %q", p.Name, p.Annotations[kubetypes.ConfigSourceAnnotationKey])
		}
		if _, err := time.Parse(time.RFC3339Nano, p.Annotations[kubetypes.ConfigFirstSeenAnnotationKey]); err != nil {
			t.Errorf("pod %s: seen annotation %q: %v", p.Name, p.Annotations[kubetypes.ConfigFirstSeenAnnotationKey], err)
		}
	}
	ch <- set("test", testPod("1", "a"), testPod("2", "b"))
	expectQuiet(t, c, ch)
}

func TestSpecChangeIsAnUpdateKeepingFirstSeen(t *testing.T) {
	c, ch := newTestConfig(t)
	ch <- set("test", testPod("1", "a"))
	added := expectUpdate(t, c, ADD, "test", "1")
	seen := added.Pods[0].Annotations[kubetypes.ConfigFirstSeenAnnotationKey]

	changed := testPod("1", "a")
	changed.Spec.Containers[0].Image = "busybox:2"
	changed.Generation = 2 // the API server counts spec changes
	ch <- set("test", changed)
	u := expectUpdate(t, c, UPDATE, "test", "1")
	if u.Pods[0].Spec.Containers[0].Image != "busybox:2" || u.Pods[0].Generation != 2 {
		t.Errorf("update carries image %q, generation %d", u.Pods[0].Spec.Containers[0].Image, u.Pods[0].Generation)
	}
	if got := u.Pods[0].Annotations[kubetypes.ConfigFirstSeenAnnotationKey]; got != seen {
		t.Errorf("first seen changed from %q to %q", seen, got)
	}
}

func TestLabelAndAnnotationChangesAreUpdates(t *testing.T) {
	c, ch := newTestConfig(t)
	ch <- set("test", testPod("1", "a"))
	expectUpdate(t, c, ADD, "test", "1")

	labeled := testPod("1", "a")
	labeled.Labels = map[string]string{"x": "y"}
	ch <- set("test", labeled)
	expectUpdate(t, c, UPDATE, "test", "1")

	annotated := labeled.DeepCopy()
	annotated.Annotations = map[string]string{"note": "1"}
	ch <- set("test", annotated)
	expectUpdate(t, c, UPDATE, "test", "1")

	// Only kubelet-managed annotations differ: not a change.
	local := annotated.DeepCopy()
	local.Annotations[kubetypes.ConfigFirstSeenAnnotationKey] = "yesterday"
	local.Annotations[kubetypes.ConfigMirrorAnnotationKey] = "x"
	ch <- set("test", local)
	expectQuiet(t, c, ch)
}

func TestStatusOnlyChangeIsAReconcile(t *testing.T) {
	c, ch := newTestConfig(t)
	ch <- set("test", testPod("1", "a"))
	expectUpdate(t, c, ADD, "test", "1")
	running := testPod("1", "a")
	running.Status.Phase = v1.PodRunning
	ch <- set("test", running)
	u := expectUpdate(t, c, RECONCILE, "test", "1")
	if u.Pods[0].Status.Phase != v1.PodRunning {
		t.Fatalf("reconcile carries phase %q", u.Pods[0].Status.Phase)
	}
}

// The pods handed on carry the API's latest resourceVersion: a change of status, or of
// the version alone, is a reconcile with it. The status manager patches that version.
func TestReconcileCarriesTheResourceVersion(t *testing.T) {
	c, ch := newTestConfig(t)
	pod := func(rv string, phase v1.PodPhase) *v1.Pod {
		p := testPod("1", "a")
		p.ResourceVersion, p.Status.Phase = rv, phase
		return p
	}
	ch <- set("test", pod("1", v1.PodPending))
	expectUpdate(t, c, ADD, "test", "1")
	ch <- set("test", pod("2", v1.PodRunning))
	if u := expectUpdate(t, c, RECONCILE, "test", "1"); u.Pods[0].ResourceVersion != "2" {
		t.Fatalf("status change: reconcile carries resourceVersion %q, want 2", u.Pods[0].ResourceVersion)
	}
	ch <- set("test", pod("3", v1.PodRunning))
	if u := expectUpdate(t, c, RECONCILE, "test", "1"); u.Pods[0].ResourceVersion != "3" {
		t.Fatalf("version change: reconcile carries resourceVersion %q, want 3", u.Pods[0].ResourceVersion)
	}
	updated := pod("4", v1.PodRunning)
	updated.Labels = map[string]string{"new": "label"}
	ch <- set("test", updated)
	if u := expectUpdate(t, c, UPDATE, "test", "1"); u.Pods[0].ResourceVersion != "4" {
		t.Fatalf("update carries resourceVersion %q, want 4", u.Pods[0].ResourceVersion)
	}
}

func TestDeletionTimestampIsAGracefulDelete(t *testing.T) {
	c, ch := newTestConfig(t)
	ch <- set("test", testPod("1", "a"))
	expectUpdate(t, c, ADD, "test", "1")
	deleting := testPod("1", "a")
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	ch <- set("test", deleting)
	expectUpdate(t, c, DELETE, "test", "1")
}

func TestPodsGoneFromASetAreRemovedBeforeAdds(t *testing.T) {
	c, ch := newTestConfig(t)
	ch <- set("test", testPod("1", "a"), testPod("2", "b"))
	expectUpdate(t, c, ADD, "test", "1", "2")
	ch <- set("test", testPod("2", "b"), testPod("3", "a"))
	expectUpdate(t, c, REMOVE, "test", "1")
	expectUpdate(t, c, ADD, "test", "3")
}

func TestIncrementalOperationsFromASource(t *testing.T) {
	c, ch := newTestConfig(t)
	ch <- PodUpdate{Op: ADD, Pods: []*v1.Pod{testPod("1", "a")}}
	expectUpdate(t, c, ADD, "test", "1")
	changed := testPod("1", "a")
	changed.Spec.Containers[0].Image = "x"
	ch <- PodUpdate{Op: UPDATE, Pods: []*v1.Pod{changed}}
	expectUpdate(t, c, UPDATE, "test", "1")
	ch <- PodUpdate{Op: ADD, Pods: []*v1.Pod{testPod("2", "b")}}
	expectUpdate(t, c, ADD, "test", "2")
	ch <- PodUpdate{Op: REMOVE, Pods: []*v1.Pod{{ObjectMeta: metav1.ObjectMeta{UID: "1"}}}}
	expectUpdate(t, c, REMOVE, "test", "1")
	ch <- PodUpdate{Op: REMOVE, Pods: []*v1.Pod{{ObjectMeta: metav1.ObjectMeta{UID: "9"}}}}
	expectQuiet(t, c, ch)
	if c.SeenAllSources(sets.New("test")) {
		t.Fatal("a source that never sent SET counts as seen")
	}
}

func TestDuplicateNamesInASetKeepTheFirst(t *testing.T) {
	recorder := record.NewFakeRecorder(10)
	c := NewConfig(recorder)
	ch := c.Channel(context.Background(), "test")
	ch <- set("test", testPod("1", "a"), testPod("2", "a"), testPod("3", "b"))
	expectUpdate(t, c, ADD, "test", "1", "3")
	select {
	case ev := <-recorder.Events:
		want := `Warning FailedValidation Error validating pod a_default(2) from test due to duplicate pod name "a", ignoring`
		if ev != want {
			t.Fatalf("event %q, want %q", ev, want)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no event for the duplicate pod")
	}
}

func TestSourcesAreKeptApart(t *testing.T) {
	c, file := newTestConfig(t)
	http := c.Channel(context.Background(), "http")
	file <- set("test", testPod("1", "a"))
	expectUpdate(t, c, ADD, "test", "1")
	http <- set("http", testPod("2", "a"))
	expectUpdate(t, c, ADD, "http", "2")
	// An empty SET from one source removes only its own pods.
	http <- set("http")
	expectUpdate(t, c, REMOVE, "http", "2")

	c.Sync()
	expectUpdate(t, c, SET, kubetypes.AllSource, "1")
}

func TestStoredPodsAreNotShared(t *testing.T) {
	c, ch := newTestConfig(t)
	sent := testPod("1", "a")
	ch <- set("test", sent)
	got := expectUpdate(t, c, ADD, "test", "1")
	sent.Spec.Containers[0].Image = "changed-by-sender"
	got.Pods[0].Spec.Containers[0].Image = "changed-by-receiver"
	c.Sync()
	u := expectUpdate(t, c, SET, kubetypes.AllSource, "1")
	if img := u.Pods[0].Spec.Containers[0].Image; img != "busybox" {
		t.Fatalf("stored pod was changed through a shared pointer: image %q", img)
	}
}

func TestNonPodUpdatesAreIgnored(t *testing.T) {
	c, ch := newTestConfig(t)
	ch <- "not an update"
	ch <- &PodUpdate{Op: SET, Pods: []*v1.Pod{testPod("1", "a")}}
	expectUpdate(t, c, ADD, "test", "1")
}

func TestChannelIsPerSource(t *testing.T) {
	c := NewConfig(nil)
	ctx := context.Background()
	first, second := c.Channel(ctx, "a"), c.Channel(ctx, "a")
	if first != second {
		t.Fatal("same source got two channels")
	}
	if first == c.Channel(ctx, "b") {
		t.Fatal("two sources share a channel")
	}
}

func TestPodOperationNames(t *testing.T) {
	if SET.String() != "SET" || RECONCILE.String() != "RECONCILE" || PodOperation(9).String() != "PodOperation(9)" {
		t.Error("PodOperation names")
	}
}

// The API source sends every pod of the node at each change: a pod whose resourceVersion
// was folded in already is skipped without a comparison; a new version is compared and
// folded as before, and a pod that left and came back is new again.
func TestMergeSkipsAPIPodsOfAVersionAlreadyFolded(t *testing.T) {
	s := newPodStorage(make(chan PodUpdate, 10), nil)
	pod := func(rv, image string) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{UID: "u1", Name: "p", Namespace: "ns", ResourceVersion: rv},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: image}}},
		}
	}
	set := func(pods ...*v1.Pod) changes {
		return s.merge(kubetypes.APIServerSource, PodUpdate{Op: SET, Source: kubetypes.APIServerSource, Pods: pods})
	}
	if ch := set(pod("1", "a")); len(ch.adds) != 1 {
		t.Fatalf("first set: %+v", ch)
	}
	// Same version: whatever it says, it is the object already folded in.
	if ch := set(pod("1", "b")); len(ch.updates)+len(ch.reconciles)+len(ch.adds) != 0 {
		t.Fatalf("same version: %+v", ch)
	}
	if ch := set(pod("2", "b")); len(ch.updates) != 1 || ch.updates[0].Spec.Containers[0].Image != "b" {
		t.Fatalf("new version: %+v", ch)
	}
	if ch := set(); len(ch.removes) != 1 {
		t.Fatalf("removed: %+v", ch)
	}
	if ch := set(pod("2", "c")); len(ch.adds) != 1 || ch.adds[0].Spec.Containers[0].Image != "c" {
		t.Fatalf("back again: %+v", ch)
	}
}
