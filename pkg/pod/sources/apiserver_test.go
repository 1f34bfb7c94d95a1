package sources

import (
	"context"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

func managedPod(name string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			ResourceVersion: "3", Labels: map[string]string{"app": name},
			Annotations:   map[string]string{"a": "b"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-scheduler", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Spec:   v1.PodSpec{NodeName: "node-a", Containers: []v1.Container{{Name: "c", Image: "busybox"}}},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
}

func TestDropPodManagedFieldsKeepsTheRestOfThePod(t *testing.T) {
	pod := managedPod("web")
	want := pod.DeepCopy()
	want.ManagedFields = nil
	got, err := dropPodManagedFields(pod)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("transformed pod\n got %#v\nwant %#v", got, want)
	}
}

func TestDropPodManagedFieldsPassesOtherObjectsThrough(t *testing.T) {
	inner := managedPod("web")
	tombstone := cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: inner}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}}
	for _, obj := range []any{tombstone, node, nil} {
		got, err := dropPodManagedFields(obj)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, obj) {
			t.Errorf("%T changed to %#v", obj, got)
		}
	}
	if len(node.ManagedFields) != 1 || len(inner.ManagedFields) != 1 {
		t.Error("an object that is not a pod was changed")
	}
}

// Every path into the store transforms: Add, Update and Replace, and what is pushed
// is what was stored.
func TestTransformingStore(t *testing.T) {
	var pushed [][]any
	s := &transformingStore{
		UndeltaStore: cache.NewUndeltaStore(func(objs []any) { pushed = append(pushed, objs) }, cache.MetaNamespaceKeyFunc),
		transform:    dropPodManagedFields,
	}
	if s.Transformer() == nil {
		t.Fatal("no Transformer")
	}
	check := func(step string, names ...string) {
		t.Helper()
		last := pushed[len(pushed)-1]
		if len(last) != len(names) {
			t.Fatalf("%s: pushed %d pods, want %d", step, len(last), len(names))
		}
		for _, o := range last {
			if p := o.(*v1.Pod); p.ManagedFields != nil || p.Labels["app"] == "" {
				t.Errorf("%s: pushed pod %s with managedFields %v, labels %v", step, p.Name, p.ManagedFields, p.Labels)
			}
		}
		for _, o := range s.List() {
			if o.(*v1.Pod).ManagedFields != nil {
				t.Errorf("%s: stored pod keeps managedFields", step)
			}
		}
	}
	if err := s.Replace([]any{managedPod("a"), managedPod("b")}, "1"); err != nil {
		t.Fatal(err)
	}
	check("replace", "a", "b")
	if err := s.Add(managedPod("c")); err != nil {
		t.Fatal(err)
	}
	check("add", "a", "b", "c")
	if err := s.Update(managedPod("a")); err != nil {
		t.Fatal(err)
	}
	check("update", "a", "b", "c")
	if err := s.Delete(managedPod("b")); err != nil {
		t.Fatal(err)
	}
	check("delete", "a", "c")
}

// Through a reflector, as StartSourceAPI runs it (the fake clientset has no REST client,
// so the list and watch are the fake's): the pods pushed, from the list and from the
// watch, have no managedFields.
func TestReflectorIntoTransformingStore(t *testing.T) {
	client := fake.NewClientset(managedPod("web"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pushed := make(chan []any, 10)
	store := &transformingStore{
		UndeltaStore: cache.NewUndeltaStore(func(objs []any) { pushed <- objs }, cache.MetaNamespaceKeyFunc),
		transform:    dropPodManagedFields,
	}
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}, client)
	go cache.NewReflector(lw, &v1.Pod{}, store, 0).RunWithContext(ctx)
	wait := func(n int) []any {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case objs := <-pushed:
				if len(objs) == n {
					return objs
				}
			case <-timeout:
				t.Fatalf("never pushed %d pods", n)
			}
		}
	}
	wait(1)
	if _, err := client.CoreV1().Pods("ns").Create(ctx, managedPod("db"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, o := range wait(2) {
		if p := o.(*v1.Pod); p.ManagedFields != nil || p.Labels["app"] != p.Name || p.Spec.Containers[0].Image != "busybox" {
			t.Errorf("pushed pod %#v", p)
		}
	}
}
