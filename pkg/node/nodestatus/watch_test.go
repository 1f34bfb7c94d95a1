package nodestatus

import (
	"context"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestDropManagedFieldsKeepsTheRestOfTheNode(t *testing.T) {
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "uid-1", ResourceVersion: "7",
			Labels:        map[string]string{v1.LabelHostname: testNode},
			Annotations:   map[string]string{"a": "b"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Spec:   v1.NodeSpec{PodCIDR: "10.0.0.0/24", Taints: []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoSchedule}}},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}},
	}
	want := node.DeepCopy()
	want.ManagedFields = nil
	got, err := dropManagedFields(node)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("transformed node\n got %#v\nwant %#v", got, want)
	}
}

func TestDropManagedFieldsPassesOtherObjectsThrough(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}}
	tombstone := cache.DeletedFinalStateUnknown{Key: testNode, Obj: node}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}}
	for _, obj := range []any{tombstone, pod, nil} {
		before := obj
		if p, ok := obj.(*v1.Pod); ok {
			before = p.DeepCopy()
		}
		got, err := dropManagedFields(obj)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, before) {
			t.Errorf("%T changed to %#v", obj, got)
		}
	}
	if len(node.ManagedFields) != 1 {
		t.Error("the node inside a tombstone was changed")
	}
}

// The watched Node is the server's without its managedFields.
func TestWatchedNodeHasNoManagedFields(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "uid-1",
		Labels:        map[string]string{"l": "v"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	cs := newFakeClient(node)
	env := newTestController(t, testOptions(), Deps{Client: cs})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env.c.startWatch(ctx)
	eventually(t, "the watch to see the node", env.c.NodeSynced)
	got, err := env.c.watchedNode()
	if err != nil {
		t.Fatal(err)
	}
	if got.ManagedFields != nil {
		t.Errorf("watched node keeps managedFields %v", got.ManagedFields)
	}
	if got.UID != "uid-1" || got.Labels["l"] != "v" || !isReady(got) {
		t.Errorf("watched node lost more than managedFields: %#v", got)
	}
	if server, _ := getNode(cs); len(server.ManagedFields) == 0 {
		t.Error("the server's node has no managedFields: the test shows nothing")
	}
}
