//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// pinningConfig is the static CPU and memory managers on this 2-CPU, 1-NUMA-node machine:
// CPU 0 reserved for the system, and the memory reservation the memory manager needs to
// match kubeReserved + systemReserved + evictionHard (1000Mi + 100Mi).
const pinningConfig = `cpuManagerPolicy: static
reservedSystemCPUs: "0"
cpuManagerReconcilePeriod: 1s
memoryManagerPolicy: Static
systemReserved:
  memory: 1000Mi
reservedMemory:
- numaNode: 0
  limits:
    memory: 1100Mi
`

// guaranteedPod asks for cpu and memory with limits equal to requests.
func (c *clusterNode) guaranteedPod(name, cpu, memory string) *v1.Pod {
	pod := c.testPod(name)
	r := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(memory)}
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: r, Limits: r}
	return pod
}

// allowed is the CPU and memory-node lists the pod's container runs on, as the kernel
// reports them for its processes.
func (c *clusterNode) allowed(t *testing.T, pod string) (cpus, mems string) {
	t.Helper()
	out := c.execIn(t, pod, "sh", "-c", "grep -E '^(Cpus|Mems)_allowed_list' /proc/self/status")
	for _, line := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "Cpus_allowed_list":
			cpus = strings.TrimSpace(v)
		case "Mems_allowed_list":
			mems = strings.TrimSpace(v)
		}
	}
	return cpus, mems
}

// TestClusterCPUAndMemoryManagers runs the static CPU and memory managers on this
// 2-CPU machine with CPU 0 reserved: a Guaranteed pod asking for 1 CPU gets CPU 1 alone
// and NUMA node 0's memory (read back from its process status, its cgroup and
// pod-resources); a
// Burstable pod runs on the shared pool, CPU 0; a pod asking for 2 CPUs, and a pod asking
// for more memory than node 0 has, are refused with upstream's reasons; a kill -9 and
// restart keep the assignment (cpu_manager_state); and once the pinned pod is gone the
// shared pool is CPUs 0-1 again, for running containers too.
func TestClusterCPUAndMemoryManagers(t *testing.T) {
	c := startClusterNode(t, clusterOptions{config: pinningConfig})
	eventually(t, 20*time.Second, "node Ready", func() error { return c.nodeReady(t) })
	n, err := c.node(t)
	if err != nil {
		t.Fatal(err)
	}
	if cpu := n.Status.Allocatable[v1.ResourceCPU]; cpu.MilliValue() != 1000 {
		t.Errorf("allocatable cpu %s, want 1 (CPU 0 reserved)", cpu.String())
	}

	c.createPod(t, c.guaranteedPod("pinned", "1", "64Mi"))
	shared := c.testPod("shared")
	// Burstable without a CPU request: the pinned pod takes the node's one allocatable CPU.
	shared.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("32Mi")}
	c.createPod(t, shared)
	for _, name := range []string{"pinned", "shared"} {
		eventually(t, 60*time.Second, name+" Ready", func() error { return c.podReady(name) })
	}
	if cpus, mems := c.allowed(t, "pinned"); cpus != "1" || mems != "0" {
		t.Errorf("the Guaranteed pod runs on CPUs %q, memory nodes %q; want 1 and 0", cpus, mems)
	}
	if cpus, _ := c.allowed(t, "shared"); cpus != "0" {
		t.Errorf("the Burstable pod runs on CPUs %q, want the shared pool 0", cpus)
	}
	if got := c.cgroupCPUSet(t, "pinned"); got != "1" {
		t.Errorf("the Guaranteed pod's container cgroup has cpuset.cpus %q, want 1", got)
	}
	checkPodResourcesPinning(t, filepath.Join(c.rootDir, "pod-resources", "kubelet.sock"), c.namespace, "pinned")

	c.createPod(t, c.guaranteedPod("two-cpus", "2", "64Mi"))
	if p := c.waitRejected(t, "two-cpus", "UnexpectedAdmissionError"); !strings.Contains(p.Status.Message, "not enough cpus available to satisfy request: requested=2, available=0") {
		t.Errorf("the 2-CPU pod's refusal: %q", p.Status.Message)
	}
	c.createPod(t, c.guaranteedPod("too-much-memory", "100m", "200Gi"))
	p := c.waitRejected(t, "too-much-memory", "UnexpectedAdmissionError")
	t.Logf("refused: %s", p.Status.Message)

	before := c.containerIDs(t, "pinned")
	c.restart(t, true)
	eventually(t, 30*time.Second, "node Ready after the restart", func() error { return c.nodeReady(t) })
	time.Sleep(3 * time.Second) // a reconcile period or three
	if after := c.containerIDs(t, "pinned"); !sameIDs(after, before) {
		t.Errorf("the pinned pod's containers changed across the restart: %v -> %v", before, after)
	}
	if cpus, _ := c.allowed(t, "pinned"); cpus != "1" {
		t.Errorf("after the restart the pinned pod runs on CPUs %q", cpus)
	}
	if b, err := os.ReadFile(filepath.Join(c.rootDir, "cpu_manager_state")); err != nil || !strings.Contains(string(b), `"policyName":"static"`) {
		t.Errorf("cpu_manager_state: %s, %v", b, err)
	}

	c.deletePodAndWait(t, "pinned")
	took := eventually(t, 20*time.Second, "the shared pool back to 0-1 for the running Burstable pod", func() error {
		if cpus, _ := c.allowed(t, "shared"); cpus != "0-1" {
			return fmt.Errorf("CPUs %q", cpus)
		}
		return nil
	})
	t.Logf("shared pool 0-1 %v after the pinned pod went", took.Round(100*time.Millisecond))
}

// cgroupCPUSet reads cpuset.cpus of the pod's (Guaranteed: directly under kubepods)
// running container's cgroup, on cgroup v1 with the cgroupfs driver.
func (c *clusterNode) cgroupCPUSet(t *testing.T, pod string) string {
	t.Helper()
	p, err := c.getPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	ids := c.containerIDs(t, pod)
	if len(ids) != 1 {
		t.Fatalf("pod %s runs %d containers", pod, len(ids))
	}
	file := filepath.Join("/sys/fs/cgroup/cpuset", c.name, "kubepods", "pod"+string(p.UID), ids[0], "cpuset.cpus")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("reading the container's cpuset: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// checkPodResourcesPinning: pod-resources lists the container's exclusive CPU and its
// memory on NUMA node 0, and CPU 1 as the node's allocatable CPUs.
func checkPodResourcesPinning(t *testing.T, socket, namespace, pod string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := podResourcesClient(t, socket)
	resp, err := client.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: pod, PodNamespace: namespace})
	if err != nil {
		t.Fatalf("pod-resources Get: %v", err)
	}
	ctr := resp.PodResources.Containers[0]
	if fmt.Sprint(ctr.CpuIds) != "[1]" {
		t.Errorf("pod-resources cpu_ids %v, want [1]", ctr.CpuIds)
	}
	if len(ctr.Memory) == 0 || ctr.Memory[0].MemoryType != "memory" || ctr.Memory[0].Size != 64<<20 ||
		len(ctr.Memory[0].Topology.GetNodes()) != 1 || ctr.Memory[0].Topology.Nodes[0].ID != 0 {
		t.Errorf("pod-resources memory %v, want 64Mi on node 0", ctr.Memory)
	}
	alloc, err := client.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatalf("pod-resources GetAllocatableResources: %v", err)
	}
	if fmt.Sprint(alloc.CpuIds) != "[1]" {
		t.Errorf("allocatable cpu_ids %v, want [1]", alloc.CpuIds)
	}
}

// TestClusterSwitchPinned moves a node running a pinned pod between upstream's kubelet
// and nodelet, both with the static CPU and memory managers: each reads the other's
// cpu_manager_state and memory_manager_state, keeps the pod's containers and its cpuset
// (CPU 1, memory node 0), and still refuses a second pod asking for the taken CPU.
func TestClusterSwitchPinned(t *testing.T) {
	c, sw, _ := newClusterSwitch(t, pinningConfig)
	sw.start(upstream)
	eventually(t, 60*time.Second, "node Ready under upstream's kubelet", func() error { return c.nodeReady(t) })
	c.createPod(t, c.guaranteedPod("pinned", "1", "64Mi"))
	eventually(t, 60*time.Second, "the pinned pod Ready", func() error { return c.podReady("pinned") })
	if cpus, mems := c.allowed(t, "pinned"); cpus != "1" || mems != "0" {
		t.Fatalf("under upstream's kubelet the pinned pod runs on CPUs %q, memory nodes %q", cpus, mems)
	}
	before := sw.waitRunning(1, 60*time.Second)
	for i, next := range []string{nodeletK, upstream} {
		sw.switchTo(next, before)
		if cpus, mems := c.allowed(t, "pinned"); cpus != "1" || mems != "0" {
			t.Errorf("under %s the pinned pod runs on CPUs %q, memory nodes %q", next, cpus, mems)
		}
		// CPU 1 is taken: the scheduler-free pod asking for it is refused, whatever the
		// other kubelet wrote.
		name := fmt.Sprintf("second-%d", i)
		c.createPod(t, c.guaranteedPod(name, "1", "64Mi"))
		p := c.waitRejected(t, name, "UnexpectedAdmissionError")
		if !strings.Contains(p.Status.Message, "not enough cpus available to satisfy request: requested=1, available=0") {
			t.Errorf("under %s a second pinned pod: %q", next, p.Status.Message)
		}
		before = sw.waitRunning(1, 30*time.Second)
	}
}
