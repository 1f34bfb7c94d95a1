package runtimeclass

import (
	"context"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func TestManagerLooksUpWatchedClasses(t *testing.T) {
	client := fake.NewClientset(&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "sandboxed"}, Handler: "test-handler"})
	m := NewManager(client)
	stop := make(chan struct{})
	defer close(stop)
	m.Start(stop)

	for _, name := range []*string{nil, ptr.To("")} {
		if h, err := m.LookupRuntimeHandler(name); h != "" || err != nil {
			t.Errorf("no class: %q, %v; want the default handler", h, err)
		}
	}
	if h, err := m.LookupRuntimeHandler(ptr.To("sandboxed")); h != "test-handler" || err != nil {
		t.Errorf("sandboxed: %q, %v; want test-handler", h, err)
	}
	_, err := m.LookupRuntimeHandler(ptr.To("gvisor"))
	if !apierrors.IsNotFound(err) || err.Error() != `runtimeclass.node.k8s.io "gvisor" not found` {
		t.Errorf("missing class: %v; want upstream's NotFound", err)
	}

	// A class created later is found once the watch delivers it.
	if _, err := client.NodeV1().RuntimeClasses().Create(context.Background(),
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		h, err := m.LookupRuntimeHandler(ptr.To("gvisor"))
		return h == "runsc" && err == nil, nil
	})
	if err != nil {
		t.Errorf("the new class was never found: %v", err)
	}
}

func TestStandaloneRefusesEveryClass(t *testing.T) {
	if h, err := (Standalone{}).LookupRuntimeHandler(nil); h != "" || err != nil {
		t.Errorf("no class: %q, %v", h, err)
	}
	_, err := (Standalone{}).LookupRuntimeHandler(ptr.To("kata"))
	want := `RuntimeClass "kata" cannot be resolved: nodelet runs standalone, with no API server to read RuntimeClasses from`
	if err == nil || err.Error() != want {
		t.Errorf("kata: %v; want %q", err, want)
	}
}
