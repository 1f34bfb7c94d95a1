package status

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// fakePodCgroup is a pod cgroup read back; reads counts the reads.
type fakePodCgroup struct {
	shares         uint64
	quota          int64
	period         uint64
	memory         int64
	cpuErr, memErr error
	reads          int
}

func (f *fakePodCgroup) PodCgroupCPU(*v1.Pod) (uint64, int64, uint64, error) {
	f.reads++
	return f.shares, f.quota, f.period, f.cpuErr
}

func (f *fakePodCgroup) PodCgroupMemoryLimit(*v1.Pod) (int64, error) {
	f.reads++
	return f.memory, f.memErr
}

// The pod cgroups of the pods below as cgroup v1 and v2 hold them (cm's read-back).
func burstableV1() *fakePodCgroup {
	return &fakePodCgroup{shares: 102, quota: 20000, period: 100000, memory: 64 << 20}
}

func burstableV2() *fakePodCgroup {
	return &fakePodCgroup{shares: 80, quota: 20000, period: 100000, memory: 64 << 20} // cpu.weight 4
}

func bestEffortV1() *fakePodCgroup {
	return &fakePodCgroup{shares: 2, quota: -1, period: 100000, memory: 9223372036854771712}
}

func bestEffortV2() *fakePodCgroup {
	return &fakePodCgroup{shares: 2, quota: -1, period: 100000, memory: -1}
}

// burstablePod requests cpu 100m/memory 32Mi and limits 200m/64Mi in its container.
func burstablePod(phase v1.PodPhase) *v1.Pod {
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("200m"), v1.ResourceMemory: resource.MustParse("64Mi")},
	}
	pod.Status.Phase = phase
	return pod
}

// withPodLevel moves the container's resources to the pod level.
func withPodLevel(pod *v1.Pod) *v1.Pod {
	pod.Spec.Resources = pod.Spec.Containers[0].Resources.DeepCopy()
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{}
	return pod
}

func bestEffortPod(phase v1.PodPhase) *v1.Pod {
	pod := testPod(v1.RestartPolicyAlways, "a")
	pod.Status.Phase = phase
	return pod
}

// podResourcesJSON is the status's allocatedResources and resources as the API stores them.
func podResourcesJSON(t *testing.T, s v1.PodStatus) string {
	t.Helper()
	b, err := json.Marshal(struct {
		AllocatedResources v1.ResourceList          `json:"allocatedResources,omitempty"`
		Resources          *v1.ResourceRequirements `json:"resources,omitempty"`
	}{s.AllocatedResources, s.Resources})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPodLevelResourcesStatus(t *testing.T) {
	const (
		burstableAllocated = `"allocatedResources":{"cpu":"100m","memory":"32Mi"}`
		burstableResources = `"resources":{"limits":{"cpu":"200m","memory":"64Mi"},"requests":{"cpu":"100m","memory":"32Mi"}}`
	)
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		cgroup *fakePodCgroup // nil: no reader
		want   string
		reads  int
	}{
		// What upstream's kubelet v1.37.2 writes on this project's cgroup v1 machine.
		{"static Burstable pod", burstablePod(""), burstableV1(), "{" + burstableAllocated + "," + burstableResources + "}", 0},
		{"Running Burstable pod, v1", burstablePod(v1.PodRunning), burstableV1(), "{" + burstableAllocated + "," + burstableResources + "}", 2},
		{"Running BestEffort pod, v1", bestEffortPod(v1.PodRunning), bestEffortV1(), `{"resources":{"limits":{"memory":"9007199254740988Ki"}}}`, 2},
		// Until the API shows the pod Running: the effective allocated resources.
		{"Pending BestEffort pod", bestEffortPod(v1.PodPending), bestEffortV1(), `{"resources":{}}`, 0},
		{"Pending Burstable pod", burstablePod(v1.PodPending), burstableV1(), "{" + burstableAllocated + "," + burstableResources + "}", 0},
		{"no reader", burstablePod(v1.PodRunning), nil, "{" + burstableAllocated + "," + burstableResources + "}", 0},
		// cgroup v2: 100m is weight 4, read back as 80 shares (79m); with no pod-level
		// request the allocated request is 2 shares, which does not round-trip to 80.
		{"Running Burstable pod, v2", burstablePod(v1.PodRunning), burstableV2(),
			"{" + burstableAllocated + `,"resources":{"limits":{"cpu":"200m","memory":"64Mi"},"requests":{"cpu":"79m","memory":"32Mi"}}}`, 2},
		// A pod-level request whose shares read back through the weight keeps its value.
		{"Running pod-level pod, v2", withPodLevel(burstablePod(v1.PodRunning)), burstableV2(), "{" + burstableAllocated + "," + burstableResources + "}", 2},
		{"Running BestEffort pod, v2", bestEffortPod(v1.PodRunning), bestEffortV2(), `{"resources":{}}`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := GenerateOptions{}
			if tc.cgroup != nil {
				opts.PodCgroup = tc.cgroup
			}
			got := generate(tc.pod, runtimeStatus(running("a", "c1", 1)), tc.pod.Status, opts)
			if s := podResourcesJSON(t, got); s != tc.want {
				t.Errorf("got  %s\nwant %s", s, tc.want)
			}
			if tc.cgroup != nil && tc.cgroup.reads != tc.reads {
				t.Errorf("pod cgroup read %d times, want %d", tc.cgroup.reads, tc.reads)
			}
		})
	}
}

// resources formats the status's pod-level requests and limits of CPU and memory.
func resources(r *v1.ResourceRequirements) string {
	if r == nil {
		return "<nil>"
	}
	q := func(l v1.ResourceList, n v1.ResourceName) string {
		if v, ok := l[n]; ok {
			return v.String()
		}
		return "-"
	}
	return fmt.Sprintf("requests %s/%s limits %s/%s", q(r.Requests, v1.ResourceCPU), q(r.Requests, v1.ResourceMemory),
		q(r.Limits, v1.ResourceCPU), q(r.Limits, v1.ResourceMemory))
}

// At or below the cgroup's floor (2 shares, a 10m quota) the allocated values stay.
func TestPodLevelResourcesFloors(t *testing.T) {
	pod := bestEffortPod(v1.PodRunning)
	pod.Spec.Resources = &v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1m")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("5m")},
	}
	cgroup := &fakePodCgroup{shares: 2, quota: 1000, period: 100000, memory: 9223372036854771712}
	got := podLevelResources(pod, v1.PodStatus{}, cgroup)
	if s, want := resources(got), "requests 1m/- limits 5m/9007199254740988Ki"; s != want {
		t.Errorf("at the floors: %s, want %s", s, want)
	}
	// Above them the cgroup's values show.
	cgroup.shares, cgroup.quota = 1024, 50000
	got = podLevelResources(pod, v1.PodStatus{}, cgroup)
	if s, want := resources(got), "requests 1/- limits 500m/9007199254740988Ki"; s != want {
		t.Errorf("above the floors: %s, want %s", s, want)
	}
}

// What the cgroup does not say (unreadable, no quota, v2's unlimited memory) keeps the
// previous status's value while the pod runs.
func TestPodLevelResourcesKeepPrevious(t *testing.T) {
	pod := burstablePod(v1.PodRunning)
	old := v1.PodStatus{Phase: v1.PodRunning, Resources: &v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("300m"), v1.ResourceMemory: resource.MustParse("1Gi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("400m"), v1.ResourceMemory: resource.MustParse("128Mi")},
	}}
	unreadable := &fakePodCgroup{cpuErr: errors.New("no such file"), memErr: errors.New("no such file")}
	// The memory request is the pod's own, never the previous one.
	if s, want := resources(podLevelResources(pod, old, unreadable)), "requests 300m/32Mi limits 400m/128Mi"; s != want {
		t.Errorf("unreadable cgroup: %s, want %s", s, want)
	}
	unsupported := &fakePodCgroup{cpuErr: errors.ErrUnsupported, memErr: errors.ErrUnsupported}
	if s, want := resources(podLevelResources(pod, old, unsupported)), "requests 300m/32Mi limits 400m/128Mi"; s != want {
		t.Errorf("unmanaged cgroups: %s, want %s", s, want)
	}
	// Minimum shares are a value (below the floor, so the request is left out), not silence.
	unlimited := &fakePodCgroup{shares: 2, quota: -1, period: 100000, memory: -1}
	if s, want := resources(podLevelResources(pod, old, unlimited)), "requests -/32Mi limits 400m/128Mi"; s != want {
		t.Errorf("unlimited cgroup: %s, want %s", s, want)
	}
	// Only the values of a pod that was Running already stay.
	old.Phase = v1.PodPending
	if s, want := resources(podLevelResources(pod, old, unreadable)), "requests -/32Mi limits -/-"; s != want {
		t.Errorf("unreadable cgroup, previously Pending: %s, want %s", s, want)
	}
}

func TestSharesThroughCPUWeight(t *testing.T) {
	for _, tc := range []struct{ shares, want uint64 }{
		{2, 2}, {102, 80}, {1024, 998}, {262144, 262144}, {300000, 262144},
	} {
		if got := sharesThroughCPUWeight(tc.shares); got != tc.want {
			t.Errorf("sharesThroughCPUWeight(%d) = %d, want %d", tc.shares, got, tc.want)
		}
	}
}
