package probe

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestUserAgentIsMajorMinorOfKubeletVersion(t *testing.T) {
	// version.KubeletVersion is v1.37.2.
	if got := UserAgent(); got != "kube-probe/1.37" {
		t.Errorf("UserAgent() = %q, want kube-probe/1.37", got)
	}
}

func TestResolvePort(t *testing.T) {
	c := &v1.Container{Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "zero", ContainerPort: 0}}}
	for _, tc := range []struct {
		port    intstr.IntOrString
		want    int
		wantErr bool
	}{
		{intstr.FromInt32(9000), 9000, false},
		{intstr.FromString("http"), 8080, false},
		{intstr.FromString("metrics"), 0, true},
		{intstr.FromString("8443"), 8443, false}, // a number stored as a string, as upstream
		{intstr.FromString("99999"), 0, true},
		{intstr.FromString("zero"), 0, true},
		{intstr.FromInt32(70000), 0, true},
		{intstr.FromInt32(0), 0, true},
	} {
		got, err := ResolvePort(tc.port, c)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ResolvePort(%v) = %d, %v; want %d, error %v", tc.port.String(), got, err, tc.want, tc.wantErr)
		}
	}
}
