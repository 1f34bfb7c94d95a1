package mirror

import (
	"context"
	"errors"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

func staticPod(hash string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-n1", Namespace: "kube-system", UID: types.UID(hash),
			Annotations: map[string]string{kubetypes.ConfigHashAnnotationKey: hash, "kubernetes.io/config.source": "file"}},
		Spec:   v1.PodSpec{NodeName: "n1", Containers: []v1.Container{{Name: "etcd", Image: "etcd"}}},
		Status: v1.PodStatus{Phase: v1.PodRunning},
	}
}

func nodeUID(uid types.UID) NodeUID { return func() (types.UID, error) { return uid, nil } }

func TestCreateMirrorPodIsOwnedByTheNodeAndCarriesTheHash(t *testing.T) {
	client := fake.NewSimpleClientset()
	c := NewClient(client, "n1", nodeUID("node-uid"))
	if err := c.CreateMirrorPod(context.Background(), staticPod("h1")); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Pods("kube-system").Get(context.Background(), "etcd-n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[kubetypes.ConfigMirrorAnnotationKey] != "h1" || got.Annotations["kubernetes.io/config.source"] != "file" {
		t.Errorf("annotations %v", got.Annotations)
	}
	owner := got.OwnerReferences
	if len(owner) != 1 || owner[0].Kind != "Node" || owner[0].Name != "n1" || owner[0].UID != "node-uid" || owner[0].Controller == nil || !*owner[0].Controller {
		t.Errorf("owner references %+v", owner)
	}
	if got.UID == "h1" || got.Status.Phase != "" {
		t.Errorf("mirror kept the static pod's UID %q or status %q", got.UID, got.Status.Phase)
	}
	// The same pod again is success; another hash is an error.
	if err := c.CreateMirrorPod(context.Background(), staticPod("h1")); err != nil {
		t.Errorf("re-creating the same mirror: %v", err)
	}
	if err := c.CreateMirrorPod(context.Background(), staticPod("h2")); err == nil {
		t.Error("creating a mirror over an outdated one succeeded")
	}
}

func TestCreateMirrorPodWithoutNode(t *testing.T) {
	c := NewClient(fake.NewSimpleClientset(), "n1", func() (types.UID, error) {
		return "", fmt.Errorf("%w: not registered", ErrNoNode)
	})
	if err := c.CreateMirrorPod(context.Background(), staticPod("h1")); !errors.Is(err, ErrNoNode) {
		t.Errorf("err = %v, want ErrNoNode", err)
	}
}

func TestDeleteMirrorPodAtOnceWithUIDPrecondition(t *testing.T) {
	mirror := staticPod("h1")
	mirror.UID = "mirror-uid"
	client := fake.NewSimpleClientset(mirror)
	c := NewClient(client, "n1", nodeUID("node-uid"))
	uid := types.UID("mirror-uid")
	deleted, err := c.DeleteMirrorPod(context.Background(), "etcd-n1_kube-system", &uid)
	if err != nil || !deleted {
		t.Fatalf("deleted=%v err=%v", deleted, err)
	}
	var opts metav1.DeleteOptions
	for _, a := range client.Actions() {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok {
			opts = d.DeleteOptions
		}
	}
	if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 0 || opts.Preconditions == nil || *opts.Preconditions.UID != uid {
		t.Errorf("delete options %+v, want grace 0 and the UID precondition", opts)
	}
	deleted, err = c.DeleteMirrorPod(context.Background(), "etcd-n1_kube-system", nil)
	if err != nil || deleted {
		t.Errorf("deleting a gone mirror: deleted=%v err=%v, want false, nil", deleted, err)
	}
	if _, err := c.DeleteMirrorPod(context.Background(), "no-namespace", nil); err == nil {
		t.Error("a malformed full name was accepted")
	}
}
