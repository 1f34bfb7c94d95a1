//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// On a runtime that lists no recursive read-only support (containerd 1.6: no runtime
// handlers in its status), recursiveReadOnly IfPossible and Disabled are plain read-only
// mounts and the pods run, as under upstream's kubelet; Enabled is refused with upstream's
// reason.
func TestClusterRecursiveReadOnlyFallsBack(t *testing.T) {
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	node, err := c.node(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range node.Status.RuntimeHandlers {
		if h.Features != nil && h.Features.RecursiveReadOnlyMounts != nil && *h.Features.RecursiveReadOnlyMounts {
			t.Skipf("the runtime supports recursive read-only mounts (handler %q)", h.Name)
		}
	}
	pod := func(name string, mode v1.RecursiveReadOnlyMode) *v1.Pod {
		p := c.testPod(name, "sh", "-c", "touch /data/x 2>/dev/null && echo writable || echo read-only; sleep 3600")
		p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true, RecursiveReadOnly: ptr.To(mode)}}
		return p
	}
	c.createPod(t, pod("ifpossible", v1.RecursiveReadOnlyIfPossible))
	c.createPod(t, pod("disabled", v1.RecursiveReadOnlyDisabled))
	c.createPod(t, pod("enabled", v1.RecursiveReadOnlyEnabled))
	for _, name := range []string{"ifpossible", "disabled"} {
		eventually(t, 60*time.Second, name+" Ready", func() error { return c.podReady(name) })
	}
	eventually(t, 30*time.Second, "enabled refused", func() error {
		p, err := c.getPod("enabled")
		if err != nil {
			return err
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerConfigError" &&
				strings.Contains(w.Message, `requested recursive read-only mode, but it is not supported by the runtime`) {
				return nil
			}
		}
		return fmt.Errorf("statuses %+v", p.Status.ContainerStatuses)
	})
}
