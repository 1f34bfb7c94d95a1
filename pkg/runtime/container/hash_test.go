package container

import (
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// The vectors are the io.kubernetes.container.hash annotations upstream's kubelet v1.37.2
// wrote on containers it started on this project's containerd: a container one kubelet
// starts must not look changed to the other.
func TestHashContainerMatchesUpstream(t *testing.T) {
	for _, tc := range []struct{ name, image, want string }{
		{"sleeper", "docker.io/library/busybox:1.36", "876750c8"},
		{"web", "nodelet.local/probe-server:1.0", "d23334b1"},
		{"init", "docker.io/library/busybox:1.36", "5fa63512"},
		{"main", "docker.io/library/busybox:1.36", "e3b3a006"},
	} {
		c := &v1.Container{Name: tc.name, Image: tc.image, Command: []string{"sleep", "1"}}
		if got := strconv.FormatUint(HashContainer(c), 16); got != tc.want {
			t.Errorf("HashContainer(%s, %s) = %s, upstream wrote %s", tc.name, tc.image, got, tc.want)
		}
	}
}

func TestHashContainerIgnoresMutableAndImmutableFields(t *testing.T) {
	base := &v1.Container{Name: "c", Image: "busybox"}
	changed := base.DeepCopy()
	changed.Args = []string{"x"}
	changed.Resources.Limits = v1.ResourceList{}
	if HashContainer(base) != HashContainer(changed) {
		t.Error("fields other than name and image changed the hash")
	}
	changed.Image = "busybox:2"
	if HashContainer(base) == HashContainer(changed) {
		t.Error("a new image did not change the hash")
	}
}
