package criconfig

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSandboxRefusesUserNamespaces(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}
	no := false
	pod.Spec.HostUsers = &no
	if _, err := GeneratePodSandboxConfig(pod, 0, SandboxOptions{}); !errors.Is(err, ErrUserNamespacesNotSupported) {
		t.Fatalf("hostUsers false: got %v", err)
	}
	yes := true
	pod.Spec.HostUsers = &yes
	if _, err := GeneratePodSandboxConfig(pod, 0, SandboxOptions{}); err != nil {
		t.Fatalf("hostUsers true: %v", err)
	}
}
