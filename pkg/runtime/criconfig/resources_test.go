package criconfig

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The expectations below follow upstream v1.37.2's generateLinuxContainerResources,
// calculateSandboxResources and GetContainerOOMScoreAdjust (and their tests, e.g. "pod
// level resource limits set, container limits omitted": shares and quota from the
// pod's 4 CPUs), on a node with 8Gi of memory and the default 100ms CFS period.

type list = map[v1.ResourceName]string

// podLevelPod is a pod with pod-level requirements and containers of the given
// requirements, named c0, c1, ...
func podLevelPod(podLevel *v1.ResourceRequirements, containers ...v1.ResourceRequirements) *v1.Pod {
	pod := busyboxPod()
	pod.Spec.Resources = podLevel
	pod.Spec.Containers = nil
	for i, r := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "c" + string(rune('0'+i)), Image: "busybox", Resources: r})
	}
	return pod
}

func requirements(req, lim list) *v1.ResourceRequirements {
	r := resources(req, lim)
	return &r
}

func hugepages(limits ...uint64) []*runtimeapi.HugepageLimit {
	return []*runtimeapi.HugepageLimit{{PageSize: "1GB", Limit: limits[0]}, {PageSize: "2MB", Limit: limits[1]}}
}

func TestLinuxContainerResourcesPodLevel(t *testing.T) {
	none := resources(nil, nil)
	// Pod-level resources only, the e2e test's pod: 500m/1 CPU, 256Mi/512Mi.
	podLevelOnly := podLevelPod(requirements(list{"cpu": "500m", "memory": "256Mi"}, list{"cpu": "1", "memory": "512Mi"}), none, none)
	// Pod-level resources and a container with limits of its own.
	mixed := podLevelPod(requirements(list{"cpu": "1", "memory": "256Mi"}, list{"cpu": "2", "memory": "512Mi"}),
		resources(list{"cpu": "250m", "memory": "64Mi"}, list{"cpu": "500m", "memory": "128Mi"}),
		resources(list{"cpu": "100m"}, nil),
		none)
	requestsOnly := podLevelPod(requirements(list{"cpu": "1", "memory": "1Gi"}, nil), resources(list{"cpu": "100m"}, nil))
	// Huge pages: the pod allows 8Mi of 2Mi pages; c0 has limits of its own.
	huge := podLevelPod(requirements(list{"memory": "1Gi", "hugepages-2Mi": "8Mi"}, list{"memory": "1Gi", "hugepages-2Mi": "8Mi"}),
		resources(list{"hugepages-2Mi": "4Mi", "hugepages-1Gi": "1Gi"}, list{"hugepages-2Mi": "4Mi", "hugepages-1Gi": "1Gi"}),
		none)
	containerHuge := podLevelPod(nil, resources(list{"cpu": "1", "hugepages-2Mi": "2Mi"}, list{"cpu": "1", "hugepages-2Mi": "2Mi"}))
	// Only a resource pod-level resources do not support: the containers' own limits.
	unsupported := podLevelPod(&v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Gi")}},
		resources(list{"cpu": "1"}, list{"cpu": "1"}))

	v1Host := Host{HugePageSizes: []string{"1GB", "2MB"}, SwapController: true}
	tests := []struct {
		name      string
		pod       *v1.Pod
		container int
		want      *runtimeapi.LinuxContainerResources
	}{
		// No limit of its own: the pod's limits, and shares from the pod's CPU limit. The
		// pod's unrequested 256Mi is shared by its two containers: 1000 - 1000×128Mi/8Gi.
		{"pod-level only", podLevelOnly, 0, &runtimeapi.LinuxContainerResources{
			CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 100000, MemoryLimitInBytes: 512 << 20,
			MemorySwapLimitInBytes: 512 << 20, OomScoreAdj: 985, HugepageLimits: hugepages(0, 0)}},
		// Its own limits win; OOM: 1000 - 1000×(64Mi + (256Mi-64Mi)/3)/8Gi.
		{"own limits under pod-level", mixed, 0, &runtimeapi.LinuxContainerResources{
			CpuShares: 256, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 128 << 20,
			MemorySwapLimitInBytes: 128 << 20, OomScoreAdj: 985, HugepageLimits: hugepages(0, 0)}},
		// A CPU request but no limit: shares from the request, quota from the pod.
		{"own request, pod-level limits", mixed, 1, &runtimeapi.LinuxContainerResources{
			CpuShares: 102, CpuPeriod: 100000, CpuQuota: 200000, MemoryLimitInBytes: 512 << 20,
			MemorySwapLimitInBytes: 512 << 20, OomScoreAdj: 993, HugepageLimits: hugepages(0, 0)}},
		{"nothing under pod-level", mixed, 2, &runtimeapi.LinuxContainerResources{
			CpuShares: 2048, CpuPeriod: 100000, CpuQuota: 200000, MemoryLimitInBytes: 512 << 20,
			MemorySwapLimitInBytes: 512 << 20, OomScoreAdj: 993, HugepageLimits: hugepages(0, 0)}},
		// Pod-level requests without limits: nothing to inherit.
		{"pod-level requests only", requestsOnly, 0, &runtimeapi.LinuxContainerResources{
			CpuShares: 102, CpuPeriod: 100000, OomScoreAdj: 875, HugepageLimits: hugepages(0, 0)}},
		{"own huge pages win", huge, 0, &runtimeapi.LinuxContainerResources{
			CpuShares: 2, CpuPeriod: 100000, MemoryLimitInBytes: 1 << 30, MemorySwapLimitInBytes: 1 << 30,
			OomScoreAdj: 938, HugepageLimits: hugepages(1<<30, 4<<20)}},
		{"pod-level huge pages", huge, 1, &runtimeapi.LinuxContainerResources{
			CpuShares: 2, CpuPeriod: 100000, MemoryLimitInBytes: 1 << 30, MemorySwapLimitInBytes: 1 << 30,
			OomScoreAdj: 938, HugepageLimits: hugepages(0, 8<<20)}},
		{"container huge pages, other sizes 0", containerHuge, 0, &runtimeapi.LinuxContainerResources{
			CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 100000, OomScoreAdj: 999, HugepageLimits: hugepages(0, 2<<20)}},
		{"unsupported pod-level resource", unsupported, 0, &runtimeapi.LinuxContainerResources{
			CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 100000, OomScoreAdj: 999, HugepageLimits: hugepages(0, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := ResourceOptions{CPUCFSQuota: true, MachineMemory: 8 << 30, Host: v1Host}
			assertProto(t, LinuxContainerResources(tt.pod, &tt.pod.Spec.Containers[tt.container], opts), tt.want)
			// Container configs are made with it.
			copts := containerOpts()
			copts.Host = v1Host
			c, _, err := GenerateContainerConfig(context.Background(), &tt.pod.Spec.Containers[tt.container], tt.pod, 0, copts)
			if err != nil {
				t.Fatal(err)
			}
			assertProto(t, c.Linux.Resources, tt.want)
		})
	}
}

// cgroup v2: the OOM group, no swap, and memory QoS (memory.high skipped for a container
// without a memory limit of its own under a pod-level memory limit; upstream's
// TestContainerMemoryHighSkippedWithPodLevelResources).
func TestLinuxContainerResourcesCgroupV2(t *testing.T) {
	mixed := podLevelPod(requirements(list{"cpu": "1", "memory": "256Mi"}, list{"cpu": "2", "memory": "512Mi"}),
		resources(list{"cpu": "250m", "memory": "64Mi"}, list{"cpu": "500m", "memory": "128Mi"}),
		resources(nil, nil))
	cpuOnly := podLevelPod(requirements(nil, list{"cpu": "2"}), resources(list{"memory": "256Mi"}, nil))
	guaranteed := podLevelPod(requirements(list{"cpu": "1", "memory": "1Gi"}, list{"cpu": "1", "memory": "1Gi"}),
		resources(list{"memory": "128Mi"}, list{"memory": "256Mi"}))
	burstable := podLevelPod(requirements(list{"cpu": "1", "memory": "512Mi"}, list{"cpu": "1", "memory": "1Gi"}),
		resources(list{"memory": "128Mi"}, list{"memory": "256Mi"}))
	equal := podLevelPod(nil, resources(list{"cpu": "1", "memory": "128Mi"}, list{"cpu": "1", "memory": "128Mi"}))

	qos := &MemoryQoS{ThrottlingFactor: 0.9, AllocatableMemory: 6 << 30}
	tiered := &MemoryQoS{ThrottlingFactor: 0.9, AllocatableMemory: 6 << 30, TieredReservation: true}
	v2 := Host{CgroupV2: true, SwapController: true}
	base := map[string]string{"memory.oom.group": "1", "memory.swap.max": "0"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name      string
		pod       *v1.Pod
		container int
		opts      ResourceOptions
		want      map[string]string
	}{
		// floor((64Mi + 0.9×64Mi) / 4096) × 4096
		{"own limit", mixed, 0, ResourceOptions{Host: v2, MemoryQoS: qos},
			with("memory.min", "0", "memory.low", "0", "memory.high", "127504384")},
		{"no limit under a pod-level memory limit", mixed, 1, ResourceOptions{Host: v2, MemoryQoS: qos},
			with("memory.min", "0", "memory.low", "0")},
		// Pod-level CPU only: memory.high from the node's allocatable memory.
		{"no limit, pod-level CPU only", cpuOnly, 0, ResourceOptions{Host: v2, MemoryQoS: qos},
			with("memory.min", "0", "memory.low", "0", "memory.high", "5825048576")},
		{"request equals limit", equal, 0, ResourceOptions{Host: v2, MemoryQoS: qos},
			with("memory.min", "0", "memory.low", "0")},
		{"tiered, guaranteed pod", guaranteed, 0, ResourceOptions{Host: v2, MemoryQoS: tiered},
			with("memory.min", "134217728", "memory.high", "255012864")},
		{"tiered, burstable pod", burstable, 0, ResourceOptions{Host: v2, MemoryQoS: tiered},
			with("memory.low", "134217728", "memory.high", "255012864")},
		{"memory QoS off", mixed, 1, ResourceOptions{Host: v2}, with("memory.high", "max")},
		{"single-process OOM kill, no swap accounting", mixed, 1, ResourceOptions{Host: Host{CgroupV2: true}, SingleProcessOOMKill: true},
			map[string]string{"memory.high": "max"}},
		{"cgroup v1", mixed, 1, ResourceOptions{Host: Host{SwapController: true}, MemoryQoS: qos}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := LinuxContainerResources(tt.pod, &tt.pod.Spec.Containers[tt.container], tt.opts).Unified
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Unified = %v, want %v", got, tt.want)
			}
		})
	}
}

// The sandbox's resources are the pod's: pod-level where set (upstream's
// TestApplySandboxResources "pod with pod-level resources"), the containers' otherwise.
func TestSandboxResourcesPodLevel(t *testing.T) {
	upstreamCase := podLevelPod(requirements(list{"cpu": "4", "memory": "512Mi"}, list{"cpu": "8", "memory": "1Gi"}),
		resources(list{"cpu": "1", "memory": "128Mi"}, list{"cpu": "2", "memory": "256Mi"}))
	mixed := podLevelPod(requirements(list{"cpu": "1", "memory": "256Mi"}, list{"cpu": "2", "memory": "512Mi"}),
		resources(list{"cpu": "250m", "memory": "64Mi"}, list{"cpu": "500m", "memory": "128Mi"}), resources(nil, nil))
	requestsOnly := podLevelPod(requirements(list{"cpu": "1"}, nil),
		resources(list{"cpu": "500m", "memory": "128Mi"}, list{"cpu": "500m", "memory": "128Mi"}))
	requestsOnly.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}
	tests := []struct {
		name               string
		pod                *v1.Pod
		resources, overhed *runtimeapi.LinuxContainerResources
	}{
		{"upstream's pod-level case", upstreamCase,
			&runtimeapi.LinuxContainerResources{CpuShares: 4096, CpuPeriod: 100000, CpuQuota: 800000, MemoryLimitInBytes: 1 << 30},
			&runtimeapi.LinuxContainerResources{}},
		{"pod-level over a container's limits", mixed,
			&runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 200000, MemoryLimitInBytes: 512 << 20},
			&runtimeapi.LinuxContainerResources{}},
		// A pod-level CPU request only: limits and the memory request from the
		// containers; the overhead apart.
		{"pod-level CPU request only", requestsOnly,
			&runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 128 << 20},
			&runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, CpuQuota: 10000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := GeneratePodSandboxConfig(tt.pod, 0, sandboxOpts(nil))
			if err != nil {
				t.Fatal(err)
			}
			assertProto(t, s.Linux.Resources, tt.resources)
			assertProto(t, s.Linux.Overhead, tt.overhed)
		})
	}
}

// On cgroup v2 the sandbox's resources (and overhead) ask for the OOM group as the
// containers' do, unless the node keeps single-process OOM kills; cgroup v1 has none.
func TestSandboxResourcesOOMGroup(t *testing.T) {
	pod := podLevelPod(nil, resources(nil, list{"cpu": "1", "memory": "128Mi"}))
	pod.Spec.Overhead = v1.ResourceList{v1.ResourceMemory: resource.MustParse("16Mi")}
	group := map[string]string{"memory.oom.group": "1"}
	tests := []struct {
		name  string
		opts  ResourceOptions
		group map[string]string
	}{
		{"cgroup v2", ResourceOptions{Host: Host{CgroupV2: true}}, group},
		{"cgroup v2, single-process OOM kills", ResourceOptions{Host: Host{CgroupV2: true}, SingleProcessOOMKill: true}, nil},
		{"cgroup v1", ResourceOptions{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := sandboxOpts(nil)
			opts.Resources = tt.opts
			s, err := GeneratePodSandboxConfig(pod, 0, opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Linux.Resources.Unified; !maps.Equal(got, tt.group) {
				t.Errorf("sandbox resources: unified %v, want %v", got, tt.group)
			}
			if got := s.Linux.Overhead.Unified; !maps.Equal(got, tt.group) {
				t.Errorf("sandbox overhead: unified %v, want %v", got, tt.group)
			}
			if s.Linux.Resources.MemoryLimitInBytes != 128<<20 || s.Linux.Overhead.MemoryLimitInBytes != 16<<20 {
				t.Errorf("memory limits %d and %d", s.Linux.Resources.MemoryLimitInBytes, s.Linux.Overhead.MemoryLimitInBytes)
			}
		})
	}
}

// The downward API reads a container's missing CPU and memory limits as its pod's.
func TestDownwardAPILimitsFromPodLevel(t *testing.T) {
	pod := podLevelPod(requirements(nil, list{"cpu": "2", "memory": "512Mi"}),
		resources(nil, nil), resources(nil, list{"memory": "128Mi"}))
	pod.Spec.Containers[0].Env = []v1.EnvVar{
		resourceEnv("CPU", "", "limits.cpu", ""),
		resourceEnv("MEM", "", "limits.memory", ""),
		resourceEnv("C1_MEM", "c1", "limits.memory", ""),
	}
	envs, err := MakeEnvironmentVariables(context.Background(), pod, &pod.Spec.Containers[0], containerOpts())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range envs {
		got[e.Key] = string(e.Value)
	}
	want := map[string]string{"CPU": "2", "MEM": "536870912", "C1_MEM": "134217728"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("env = %v, want %v", got, want)
	}
}

func TestDetectHost(t *testing.T) {
	dir := t.TempDir()
	pages := filepath.Join(dir, "hugepages")
	for _, d := range []string{"hugepages-2048kB", "hugepages-1048576kB", "hugepages-64kB", "other", "hugepages-12MB"} {
		if err := os.MkdirAll(filepath.Join(pages, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	for _, s := range hugePageSizes(pages) {
		got[s] = true
	}
	if want := map[string]bool{"2MB": true, "1GB": true, "64KB": true}; !reflect.DeepEqual(got, want) {
		t.Errorf("huge page sizes %v, want %v", got, want)
	}
	if hugePageSizes(filepath.Join(dir, "missing")) != nil {
		t.Error("huge page sizes from a missing directory")
	}

	cgroupRoot := filepath.Join(dir, "cgroup")
	self := filepath.Join(dir, "self-cgroup")
	if err := os.WriteFile(self, []byte("0::/system.slice/kubelet.service\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if swapController(true, cgroupRoot, self) || swapController(false, cgroupRoot, self) {
		t.Error("swap accounting found without its files")
	}
	for _, f := range []string{"memory/memory.memsw.limit_in_bytes", "system.slice/kubelet.service/memory.swap.max"} {
		p := filepath.Join(cgroupRoot, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !swapController(true, cgroupRoot, self) || !swapController(false, cgroupRoot, self) {
		t.Error("swap accounting not found")
	}
}
