package cm

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// resizeRecorder is an updateContainers callback that notes the pod cgroup's values
// when the containers are resized.
type resizeRecorder struct {
	t      *testing.T
	cpu    string // the pod's cpu hierarchy directory
	memory string
	seen   []string
}

func (r *resizeRecorder) update(name v1.ResourceName) error {
	switch name {
	case v1.ResourceMemory:
		r.seen = append(r.seen, "memory "+read(r.t, r.memory, "memory.limit_in_bytes"))
	case v1.ResourceCPU:
		r.seen = append(r.seen, fmt.Sprintf("cpu %s/%s", read(r.t, r.cpu, "cpu.cfs_quota_us"), read(r.t, r.cpu, "cpu.shares")))
	}
	return nil
}

func (r *resizeRecorder) expect(want ...string) {
	r.t.Helper()
	if fmt.Sprint(r.seen) != fmt.Sprint(want) {
		r.t.Errorf("containers resized with pod cgroup %q, want %q", r.seen, want)
	}
	r.seen = nil
}

func resized(p *v1.Pod, rs ...v1.ResourceRequirements) *v1.Pod {
	out := p.DeepCopy()
	for i := range rs {
		out.Spec.Containers[i].Resources = rs[i]
	}
	return out
}

func TestResizePodOrder(t *testing.T) {
	pod := testPod("r", res("500m", "128Mi", "500m", "128Mi"))
	m, root := startV1(t, nil)
	if err := m.EnsurePod(pod); err != nil {
		t.Fatal(err)
	}
	dir := m.Parent(pod)
	rec := &resizeRecorder{t: t, cpu: filepath.Join(root, "cpu,cpuacct", dir), memory: filepath.Join(root, "memory", dir)}
	writeTestFile(t, filepath.Join(rec.memory, "memory.usage_in_bytes"), "33554432")

	// Growing: the pod cgroup first, so that the containers fit.
	if err := m.ResizePod(resized(pod, res("1", "256Mi", "1", "256Mi")), rec.update); err != nil {
		t.Fatal(err)
	}
	rec.expect("memory 268435456", "cpu 100000/1024")

	// Shrinking: the containers first.
	if err := m.ResizePod(resized(pod, res("250m", "64Mi", "250m", "64Mi")), rec.update); err != nil {
		t.Fatal(err)
	}
	rec.expect("memory 268435456", "cpu 100000/1024")
	expectFiles(t, rec.memory, map[string]string{"memory.limit_in_bytes": "67108864"})
	expectFiles(t, rec.cpu, map[string]string{"cpu.cfs_quota_us": "25000", "cpu.shares": "256"})

}

// A CPU limit that grows while the request shrinks: limit before the containers,
// request after, so that the request never exceeds the limit.
func TestResizePodMixed(t *testing.T) {
	pod := testPod("m", res("500m", "64Mi", "1", "128Mi"))
	m, root := startV1(t, nil)
	if err := m.EnsurePod(pod); err != nil {
		t.Fatal(err)
	}
	dir := m.Parent(pod)
	rec := &resizeRecorder{t: t, cpu: filepath.Join(root, "cpu,cpuacct", dir), memory: filepath.Join(root, "memory", dir)}
	if err := m.ResizePod(resized(pod, res("100m", "64Mi", "2", "128Mi")), rec.update); err != nil {
		t.Fatal(err)
	}
	rec.expect("memory 134217728", "cpu 200000/512")
	expectFiles(t, rec.cpu, map[string]string{"cpu.cfs_quota_us": "200000", "cpu.shares": "102"})
}

func TestResizePodRefusesMemoryBelowUsage(t *testing.T) {
	pod := testPod("r", res("500m", "128Mi", "500m", "128Mi"))
	m, root := startV1(t, nil)
	if err := m.EnsurePod(pod); err != nil {
		t.Fatal(err)
	}
	mem := filepath.Join(root, "memory", m.Parent(pod))
	writeTestFile(t, filepath.Join(mem, "memory.usage_in_bytes"), "104857600")
	called := false
	err := m.ResizePod(resized(pod, res("250m", "64Mi", "250m", "64Mi")), func(v1.ResourceName) error { called = true; return nil })
	want := "cannot decrease memory limits: attempting to set pod memory limit (67108864) below current usage (104857600)"
	if err == nil || err.Error() != want || called {
		t.Errorf("resize below usage: err %v, containers updated %v; want %q", err, called, want)
	}
	expectFiles(t, mem, map[string]string{"memory.limit_in_bytes": "134217728"})
}

func TestResizePodStopsOnContainerError(t *testing.T) {
	pod := testPod("r", res("500m", "128Mi", "500m", "128Mi"))
	m, root := startV1(t, nil)
	if err := m.EnsurePod(pod); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("runtime refused")
	err := m.ResizePod(resized(pod, res("250m", "128Mi", "250m", "128Mi")), func(n v1.ResourceName) error {
		if n == v1.ResourceCPU {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	// The shrink waits for the containers, so the pod cgroup keeps its old CPU.
	expectFiles(t, filepath.Join(root, "cpu,cpuacct", m.Parent(pod)), map[string]string{"cpu.cfs_quota_us": "50000", "cpu.shares": "512"})
}

func TestResizePodV2(t *testing.T) {
	pod := testPod("r", res("500m", "128Mi", "500m", "128Mi"))
	m, root := startV2(t, nil)
	if err := m.EnsurePod(pod); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, m.Parent(pod))
	var seen []string
	update := func(n v1.ResourceName) error {
		seen = append(seen, read(t, dir, "memory.max"), read(t, dir, "cpu.max"), read(t, dir, "cpu.weight"))
		return nil
	}
	if err := m.ResizePod(resized(pod, res("1", "256Mi", "1", "256Mi")), update); err != nil {
		t.Fatal(err)
	}
	want := []string{"268435456", "50000 100000", "20", "268435456", "100000 100000", "39"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("pod cgroup during resize %q, want %q", seen, want)
	}
	cur, err := m.CurrentPodResources(pod)
	if err != nil {
		t.Fatal(err)
	}
	if *cur.CPUQuota != 100000 || *cur.CPUPeriod != 100000 || CPUSharesToWeight(*cur.CPUShares) != 39 || *cur.Memory != 256<<20 {
		t.Errorf("read back quota %d period %d shares %d memory %d", *cur.CPUQuota, *cur.CPUPeriod, *cur.CPUShares, *cur.Memory)
	}
}
