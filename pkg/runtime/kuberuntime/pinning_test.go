package kuberuntime

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// The resource managers' cpuset goes into the container's config at creation, and they
// learn the container's ID before it starts.
func TestContainersCreatedWithTheirPinning(t *testing.T) {
	created := map[string]string{}
	env := newTestEnv(t, func(o *Options) {
		o.Pinning = func(_ *v1.Pod, c *v1.Container) (string, string) {
			if c.Name == "pinned" {
				return "1", "0"
			}
			return "", ""
		}
		o.ContainerCreated = func(_ *v1.Pod, c *v1.Container, id string) error {
			created[c.Name] = id
			return nil
		}
	})
	pod := newPod("p", ctr("pinned"), ctr("shared"))
	if err := syncPod(t, env, pod, nil).Error(); err != nil {
		t.Fatal(err)
	}
	res := createdResources(t, env, pod)
	if r := res["pinned"]; r.GetCpusetCpus() != "1" || r.GetCpusetMems() != "0" {
		t.Errorf("pinned container created with cpus %q mems %q", r.GetCpusetCpus(), r.GetCpusetMems())
	}
	if r := res["shared"]; r.GetCpusetCpus() != "" || r.GetCpusetMems() != "" {
		t.Errorf("unpinned container created with cpus %q mems %q", r.GetCpusetCpus(), r.GetCpusetMems())
	}
	if created["pinned"] == "" || created["shared"] == "" {
		t.Errorf("containers reported created: %v", created)
	}
}

// A resource manager refusing the created container keeps it from starting, with
// upstream's PreStartHookError.
func TestContainerCreatedErrorFailsTheStart(t *testing.T) {
	env := newTestEnv(t, func(o *Options) {
		o.ContainerCreated = func(*v1.Pod, *v1.Container, string) error { return errors.New("no CPUs") }
	})
	pod := newPod("p", ctr("app"))
	result := syncPod(t, env, pod, nil)
	found := false
	for _, r := range result.SyncResults {
		found = found || r.Error == container.ErrPreStartHook && r.Message == "Internal PreStartContainer hook failed: no CPUs"
	}
	if !found {
		t.Errorf("sync results %+v, want PreStartHookError", result.SyncResults)
	}
	if n := len(createdResources(t, env, pod)); n != 0 {
		t.Errorf("%d containers running", n)
	}
}
