//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// In-place pod resize through the API's resize subresource, on this machine's
// containerd (cgroup v1 here).

// resources is requests and limits of cpu and memory ("" leaves one out).
func resources(cpuRequest, cpuLimit, memoryRequest, memoryLimit string) v1.ResourceRequirements {
	r := v1.ResourceRequirements{Requests: v1.ResourceList{}, Limits: v1.ResourceList{}}
	for _, e := range []struct {
		list  v1.ResourceList
		name  v1.ResourceName
		value string
	}{
		{r.Requests, v1.ResourceCPU, cpuRequest}, {r.Limits, v1.ResourceCPU, cpuLimit},
		{r.Requests, v1.ResourceMemory, memoryRequest}, {r.Limits, v1.ResourceMemory, memoryLimit},
	} {
		if e.value != "" {
			e.list[e.name] = resource.MustParse(e.value)
		}
	}
	return r
}

// resizePod changes the pod's first container through the resize subresource.
func (c *clusterNode) resizePod(name string, mutate func(*v1.ResourceRequirements)) (*v1.Pod, error) {
	pod, err := c.getPod(name)
	if err != nil {
		return nil, err
	}
	mutate(&pod.Spec.Containers[0].Resources)
	return c.admin.CoreV1().Pods(c.namespace).UpdateResize(context.Background(), name, pod, metav1.UpdateOptions{})
}

func podCondition(p *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// resizeTestPod is a running Burstable pod with the given resources whose container runs
// script, then sleeps.
func (c *clusterNode) resizeTestPod(t *testing.T, name string, r v1.ResourceRequirements, script string) *v1.Pod {
	t.Helper()
	pod := c.testPod(name, "sh", "-c", script+"; trap 'exit 0' TERM; while true; do sleep 1; done")
	pod.Spec.Containers[0].Resources = r
	c.createPod(t, pod)
	eventually(t, 60*time.Second, "pod "+name+" ready", func() error { return c.podReady(name) })
	p, err := c.getPod(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// podCgroupFile reads a file of the pod's cgroup in a cgroup v1 hierarchy, found by the
// pod's UID under the node's cgroup root.
func (c *clusterNode) podCgroupFile(t *testing.T, pod *v1.Pod, hierarchy, file string) string {
	t.Helper()
	root := filepath.Join(cgroupFS, hierarchy, c.name)
	uid := string(pod.UID)
	var dir string
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && (strings.Contains(d.Name(), uid) || strings.Contains(d.Name(), strings.ReplaceAll(uid, "-", "_"))) {
			dir = path
			return filepath.SkipAll
		}
		return nil
	})
	if dir == "" {
		t.Fatalf("no cgroup of pod %s under %s", uid, root)
	}
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func skipUnlessCgroupV1(t *testing.T) {
	if _, err := os.Stat(filepath.Join(cgroupFS, "cgroup.controllers")); err == nil {
		t.Skip("the cgroup files read here are cgroup v1's")
	}
}

// resizeEvent finds a pod event with reason.
func (c *clusterNode) resizeEvent(pod *v1.Pod, reason string) (*v1.Event, error) {
	list, err := c.admin.CoreV1().Events(c.namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + pod.Name + ",reason=" + reason,
	})
	if err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, fmt.Errorf("no %s event yet", reason)
	}
	return &list.Items[0], nil
}

func TestClusterResizeCPULimitInPlace(t *testing.T) {
	skipUnlessCgroupV1(t)
	c := startClusterNode(t, clusterOptions{})
	pod := c.resizeTestPod(t, "cpu", resources("250m", "500m", "32Mi", "64Mi"), "true")
	before := pod.Status.ContainerStatuses[0]
	if got := strings.TrimSpace(c.execIn(t, "cpu", "cat", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us")); got != "50000" {
		t.Fatalf("container cpu.cfs_quota_us %s before the resize, want 50000", got)
	}

	start := time.Now()
	resized, err := c.resizePod("cpu", func(r *v1.ResourceRequirements) { r.Limits[v1.ResourceCPU] = resource.MustParse("800m") })
	if err != nil {
		t.Fatal(err)
	}
	call := time.Since(start)
	var got *v1.Pod
	took := eventually(t, 30*time.Second, "resize applied and reported", func() error {
		p, err := c.getPod("cpu")
		if err != nil {
			return err
		}
		got = p
		cs := p.Status.ContainerStatuses[0]
		limit := cs.Resources.Limits[v1.ResourceCPU]
		switch {
		case p.Status.ObservedGeneration != resized.Generation:
			return fmt.Errorf("observedGeneration %d, want %d", p.Status.ObservedGeneration, resized.Generation)
		case cs.Resources == nil || limit.MilliValue() != 800:
			return fmt.Errorf("status resources %v", cs.Resources)
		case podCondition(p, v1.PodResizeInProgress) != nil || podCondition(p, v1.PodResizePending) != nil:
			return fmt.Errorf("resize conditions left: %+v", p.Status.Conditions)
		}
		return nil
	})
	t.Logf("resize reported done in the API %v after the resize call returned (the get and resize calls took %v)", took, call)

	cs := got.Status.ContainerStatuses[0]
	if cs.ContainerID != before.ContainerID || cs.RestartCount != 0 || cs.State.Running == nil {
		t.Errorf("container %s restarts %d running %v, want %s not restarted", cs.ContainerID, cs.RestartCount, cs.State.Running != nil, before.ContainerID)
	}
	if q := cs.AllocatedResources[v1.ResourceCPU]; q.MilliValue() != 250 {
		t.Errorf("allocatedResources cpu %s, want the 250m request", q.String())
	}
	if quota := strings.TrimSpace(c.execIn(t, "cpu", "cat", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us")); quota != "80000" {
		t.Errorf("container cpu.cfs_quota_us %s, want 80000", quota)
	}
	if quota := c.podCgroupFile(t, got, "cpu", "cpu.cfs_quota_us"); quota != "80000" {
		t.Errorf("pod cgroup cpu.cfs_quota_us %s, want 80000", quota)
	}
	for _, reason := range []string{"ResizeStarted", "ResizeCompleted"} {
		eventually(t, 10*time.Second, reason+" event", func() error { _, err := c.resizeEvent(got, reason); return err })
	}
}

// A memory limit below the container's usage is not applied: the resize stays in
// progress with reason Error until the usage drops, then it is applied.
func TestClusterResizeMemoryBelowUsageWaitsForUsage(t *testing.T) {
	skipUnlessCgroupV1(t)
	c := startClusterNode(t, clusterOptions{})
	// 48Mi in /dev/shm (tmpfs, charged to the container's memory cgroup).
	pod := c.resizeTestPod(t, "mem", resources("100m", "200m", "16Mi", "128Mi"), "dd if=/dev/zero of=/dev/shm/fill bs=1M count=48")
	eventually(t, 10*time.Second, "the container using 48Mi", func() error {
		if out := c.execIn(t, "mem", "sh", "-c", "wc -c < /dev/shm/fill"); strings.TrimSpace(out) != "50331648" {
			return fmt.Errorf("fill file %q bytes", out)
		}
		return nil
	})
	if _, err := c.resizePod("mem", func(r *v1.ResourceRequirements) { r.Limits[v1.ResourceMemory] = resource.MustParse("32Mi") }); err != nil {
		t.Fatal(err)
	}
	var refused *v1.PodCondition
	eventually(t, 30*time.Second, "the resize refused with reason Error", func() error {
		p, err := c.getPod("mem")
		if err != nil {
			return err
		}
		refused = podCondition(p, v1.PodResizeInProgress)
		if refused == nil || refused.Reason != v1.PodReasonError {
			return fmt.Errorf("PodResizeInProgress %+v", refused)
		}
		return nil
	})
	t.Logf("PodResizeInProgress: %s: %s", refused.Reason, refused.Message)
	if !strings.HasPrefix(refused.Message, `cannot decrease memory limits: attempting to set container "main" memory limit (33554432) below current usage (`) ||
		refused.ObservedGeneration != 2 {
		t.Errorf("condition %+v", refused)
	}
	if limit := strings.TrimSpace(c.execIn(t, "mem", "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes")); limit != "134217728" {
		t.Errorf("container memory.limit_in_bytes %s after a refused resize, want 134217728", limit)
	}
	p, _ := c.getPod("mem")
	if q := p.Status.ContainerStatuses[0].Resources.Limits[v1.ResourceMemory]; q.Value() != 128<<20 {
		t.Errorf("status memory limit %s, want the old 128Mi", q.String())
	}
	eventually(t, 10*time.Second, "ResizeError event", func() error { _, err := c.resizeEvent(pod, "ResizeError"); return err })

	// Once the usage drops, a retry applies it.
	c.execIn(t, "mem", "rm", "/dev/shm/fill")
	took := eventually(t, 60*time.Second, "the resize applied once the usage dropped", func() error {
		p, err := c.getPod("mem")
		if err != nil {
			return err
		}
		if c := podCondition(p, v1.PodResizeInProgress); c != nil {
			return fmt.Errorf("PodResizeInProgress %s: %s", c.Reason, c.Message)
		}
		if q := p.Status.ContainerStatuses[0].Resources.Limits[v1.ResourceMemory]; q.Value() != 32<<20 {
			return fmt.Errorf("status memory limit %s", q.String())
		}
		return nil
	})
	t.Logf("applied %v after the usage dropped", took)
	if limit := strings.TrimSpace(c.execIn(t, "mem", "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes")); limit != "33554432" {
		t.Errorf("container memory.limit_in_bytes %s, want 33554432", limit)
	}
	if p, _ := c.getPod("mem"); p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the container restarted")
	}
}

// A resize beyond the node's allocatable is refused by the API server (upstream's
// PodResizeValidator); one beyond what the other pods leave is Deferred by the kubelet
// until they go.
func TestClusterResizeDeferredUntilCapacityFrees(t *testing.T) {
	skipUnlessCgroupV1(t)
	c := startClusterNode(t, clusterOptions{})
	eventually(t, 10*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	node, err := c.node(t)
	if err != nil {
		t.Fatal(err)
	}
	allocatable := node.Status.Allocatable.Cpu().MilliValue()
	filler := c.testPod("filler")
	filler.Spec.Containers[0].Resources = resources(fmt.Sprintf("%dm", allocatable-600), "", "", "")
	c.createPod(t, filler)
	c.resizeTestPod(t, "grow", resources("250m", "500m", "32Mi", "64Mi"), "true")
	eventually(t, 60*time.Second, "filler ready", func() error { return c.podReady("filler") })

	_, err = c.resizePod("grow", func(r *v1.ResourceRequirements) {
		r.Requests[v1.ResourceCPU] = *resource.NewMilliQuantity(allocatable+1000, resource.DecimalSI)
		r.Limits[v1.ResourceCPU] = *resource.NewMilliQuantity(allocatable+1000, resource.DecimalSI)
	})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "node didn't have enough allocatable resources") {
		t.Fatalf("resize beyond allocatable: err %v, want the API server's refusal", err)
	}

	resized, err := c.resizePod("grow", func(r *v1.ResourceRequirements) {
		r.Requests[v1.ResourceCPU] = resource.MustParse("800m")
		r.Limits[v1.ResourceCPU] = resource.MustParse("800m")
	})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("Node didn't have enough resource: cpu, requested: 800, used: %d, capacity: %d", allocatable-600, allocatable)
	eventually(t, 30*time.Second, "PodResizePending Deferred", func() error {
		p, err := c.getPod("grow")
		if err != nil {
			return err
		}
		cond := podCondition(p, v1.PodResizePending)
		if cond == nil || cond.Reason != v1.PodReasonDeferred || cond.Message != want || cond.ObservedGeneration != resized.Generation {
			return fmt.Errorf("PodResizePending %+v", cond)
		}
		return nil
	})
	if quota := strings.TrimSpace(c.execIn(t, "grow", "cat", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us")); quota != "50000" {
		t.Errorf("a deferred resize was applied: cpu.cfs_quota_us %s", quota)
	}
	eventually(t, 10*time.Second, "ResizeDeferred event", func() error { _, err := c.resizeEvent(resized, "ResizeDeferred"); return err })

	zero := int64(0)
	if err := c.admin.CoreV1().Pods(c.namespace).Delete(context.Background(), "filler", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 60*time.Second, "the resize applied once the filler went", func() error {
		p, err := c.getPod("grow")
		if err != nil {
			return err
		}
		if cond := podCondition(p, v1.PodResizePending); cond != nil {
			return fmt.Errorf("still pending: %s", cond.Message)
		}
		if cond := podCondition(p, v1.PodResizeInProgress); cond != nil {
			return fmt.Errorf("in progress: %+v", cond)
		}
		if q := p.Status.ContainerStatuses[0].Resources.Limits[v1.ResourceCPU]; q.MilliValue() != 800 {
			return fmt.Errorf("status cpu limit %s", q.String())
		}
		return nil
	})
	t.Logf("applied %v after the filler's deletion", took)
	if quota := strings.TrimSpace(c.execIn(t, "grow", "cat", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us")); quota != "80000" {
		t.Errorf("container cpu.cfs_quota_us %s, want 80000", quota)
	}
}
