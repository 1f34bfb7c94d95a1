package qos

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// res builds requirements from "cpu"/"memory" request and limit strings; "" leaves one out.
func res(cpuReq, memReq, cpuLim, memLim string) v1.ResourceRequirements {
	list := func(cpu, mem string) v1.ResourceList {
		l := v1.ResourceList{}
		if cpu != "" {
			l[v1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			l[v1.ResourceMemory] = resource.MustParse(mem)
		}
		if len(l) == 0 {
			return nil
		}
		return l
	}
	return v1.ResourceRequirements{Requests: list(cpuReq, memReq), Limits: list(cpuLim, memLim)}
}

func podWith(rs ...v1.ResourceRequirements) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	for i, r := range rs {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: string(rune('a' + i)), Resources: r})
	}
	return pod
}

func withPodLevel(pod *v1.Pod, r v1.ResourceRequirements) *v1.Pod {
	pod.Spec.Resources = &r
	return pod
}

func TestComputePodQOS(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	tests := []struct {
		name string
		pod  *v1.Pod
		want v1.PodQOSClass
	}{
		{"nothing set", podWith(res("", "", "", "")), v1.PodQOSBestEffort},
		{"zero quantities only", podWith(res("0", "0", "", "")), v1.PodQOSBestEffort},
		{"requests equal limits", podWith(res("1", "1Gi", "1", "1Gi")), v1.PodQOSGuaranteed},
		{"equal in two containers", podWith(res("1", "1Gi", "1", "1Gi"), res("500m", "2Gi", "500m", "2Gi")), v1.PodQOSGuaranteed},
		{"one container besteffort", podWith(res("1", "1Gi", "1", "1Gi"), res("", "", "", "")), v1.PodQOSBurstable},
		{"request below limit", podWith(res("500m", "1Gi", "1", "1Gi")), v1.PodQOSBurstable},
		{"memory limit only", podWith(res("1", "", "1", "")), v1.PodQOSBurstable},
		{"request only", podWith(res("", "1Gi", "", "")), v1.PodQOSBurstable},
		// Not defaulted: requests missing although limits are set.
		{"limits only, undefaulted", podWith(res("", "", "1", "1Gi")), v1.PodQOSBurstable},
		{"other resources ignored", &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Gi")},
		}}}}}, v1.PodQOSBestEffort},
		{"init container counts", func() *v1.Pod {
			p := podWith(res("1", "1Gi", "1", "1Gi"))
			p.Spec.InitContainers = []v1.Container{{Name: "init", Resources: res("", "", "", ""), RestartPolicy: &always}}
			return p
		}(), v1.PodQOSBurstable},
		// Each container by itself: requests and limits are not summed across them.
		{"crossed requests and limits", podWith(res("1", "1Gi", "2", "1Gi"), res("2", "1Gi", "1", "1Gi")), v1.PodQOSBurstable},
		{"pod-level resources win", withPodLevel(podWith(res("", "", "", "")), res("1", "1Gi", "1", "1Gi")), v1.PodQOSGuaranteed},
		{"pod-level over guaranteed containers", withPodLevel(podWith(res("1", "1Gi", "1", "1Gi")), res("1", "1Gi", "2", "2Gi")), v1.PodQOSBurstable},
		{"pod-level CPU only", withPodLevel(podWith(res("1", "1Gi", "1", "1Gi")), res("1", "", "1", "")), v1.PodQOSBurstable},
		// Huge pages are pod-level resources too: without CPU or memory the pod is
		// BestEffort, whatever its containers ask.
		{"pod-level huge pages only", withPodLevel(podWith(res("1", "1Gi", "1", "1Gi")), v1.ResourceRequirements{
			Limits: v1.ResourceList{"hugepages-2Mi": resource.MustParse("4Mi")}}), v1.PodQOSBestEffort},
		// PodLevelResourcesFixKubeletQOSClass: a pod-level resource that pod-level resources
		// do not support leaves the class to the containers.
		{"pod-level ephemeral storage only", withPodLevel(podWith(res("1", "1Gi", "1", "1Gi")), v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("1Gi")}}), v1.PodQOSGuaranteed},
		{"empty pod-level resources", withPodLevel(podWith(res("1", "1Gi", "1", "1Gi")), v1.ResourceRequirements{}), v1.PodQOSGuaranteed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ComputePodQOS(tt.pod); got != tt.want {
				t.Errorf("ComputePodQOS = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestGetPodQOSPrefersStatus(t *testing.T) {
	pod := podWith(res("", "", "", ""))
	pod.Status.QOSClass = v1.PodQOSGuaranteed
	if got := GetPodQOS(pod); got != v1.PodQOSGuaranteed {
		t.Errorf("GetPodQOS = %s, want the status's Guaranteed", got)
	}
	pod.Status.QOSClass = ""
	if got := GetPodQOS(pod); got != v1.PodQOSBestEffort {
		t.Errorf("GetPodQOS = %s, want computed BestEffort", got)
	}
}

func TestOOMScoreAdj(t *testing.T) {
	const gi = int64(1) << 30
	critical := podWith(res("", "", "", ""))
	critical.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	critical.Spec.PriorityClassName = "system-node-critical"
	staticNotNodeCritical := podWith(res("", "", "", ""))
	staticNotNodeCritical.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	priority := int32(2000001000)
	byPriority := podWith(res("", "100Mi", "", ""))
	byPriority.Spec.Priority = &priority
	byPriority.Spec.PriorityClassName = "system-node-critical"

	tests := []struct {
		name     string
		pod      *v1.Pod
		capacity int64
		want     int
	}{
		{"guaranteed", podWith(res("1", "1Gi", "1", "1Gi")), 8 * gi, -997},
		{"besteffort", podWith(res("", "", "", "")), 8 * gi, 1000},
		{"burstable 1/8 of memory", podWith(res("100m", "1Gi", "", "2Gi")), 8 * gi, 875},
		{"burstable no memory request", podWith(res("100m", "", "", "")), 8 * gi, 999},
		{"burstable request above capacity", podWith(res("", "16Gi", "", "")), 8 * gi, 3},
		{"burstable request equals capacity", podWith(res("", "8Gi", "", "")), 8 * gi, 3},
		{"burstable capacity unknown", podWith(res("", "1Gi", "", "")), 0, 999},
		{"static node-critical pod", critical, 8 * gi, -997},
		{"static pod, other class", staticNotNodeCritical, 8 * gi, 1000},
		{"system priority node-critical pod", byPriority, 8 * gi, -997},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := OOMScoreAdj(tt.pod, &tt.pod.Spec.Containers[0], tt.capacity); got != tt.want {
				t.Errorf("OOMScoreAdj = %d, want %d", got, tt.want)
			}
		})
	}
}

// Upstream's policy_test.go pods: 8e9 bytes of memory, containers requesting 1e9
// (limit 1e9+1000), sidecars 4e8 and 4e9.
func TestOOMScoreAdjSidecar(t *testing.T) {
	const capacity = 8000000000
	always := v1.ContainerRestartPolicyAlways
	pod := podWith(res("", "1000000000", "", "1000001000"))
	pod.Spec.InitContainers = []v1.Container{
		{Name: "small-sidecar", Resources: res("", "400000000", "", "1000001000"), RestartPolicy: &always},
		{Name: "big-sidecar", Resources: res("", "4000000000", "", "1000001000"), RestartPolicy: &always},
		{Name: "init", Resources: res("", "1000000000", "", "1000001000")},
	}
	for _, tt := range []struct {
		c    *v1.Container
		want int
	}{
		// Its own request would score 950: it takes the regular container's 875.
		{&pod.Spec.InitContainers[0], 875},
		// Scored by its own, larger request.
		{&pod.Spec.InitContainers[1], 500},
		// An init container that is not a sidecar scores by its own request.
		{&pod.Spec.InitContainers[2], 875},
		{&pod.Spec.Containers[0], 875},
	} {
		if got := OOMScoreAdj(pod, tt.c, capacity); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.c.Name, got, tt.want)
		}
	}
}

// Pod-level memory requests: the part no container requests is shared by all of them
// (upstream's policy_test.go pod-level cases, 4e9 bytes of memory).
func TestOOMScoreAdjPodLevelResources(t *testing.T) {
	const capacity = 4000000000
	always := v1.ContainerRestartPolicyAlways
	burstable := res("5m", "2000000000", "5m", "2000001000")
	withSidecar := func(pod *v1.Pod, r v1.ResourceRequirements) *v1.Pod {
		pod.Spec.InitContainers = []v1.Container{{Name: "sidecar", Resources: r, RestartPolicy: &always}}
		return pod
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		want map[string]int
	}{
		{"no container resources", withPodLevel(podWith(res("", "", "", ""), res("", "", "", "")), burstable),
			map[string]int{"a": 750, "b": 750}},
		{"containers request it all", withPodLevel(podWith(res("5m", "1000000000", "5m", "1000000000"), res("5m", "1000000000", "5m", "1000000000")), burstable),
			map[string]int{"a": 750, "b": 750}},
		{"unequal container requests", withPodLevel(podWith(res("3m", "1000000000", "5m", "1000001000"), res("", "", "", "")), burstable),
			map[string]int{"a": 625, "b": 875}},
		{"guaranteed at pod level", withPodLevel(podWith(res("3m", "1000000000", "5m", "1000001000"), res("", "", "", "")), res("5m", "2000000000", "5m", "2000000000")),
			map[string]int{"a": -997, "b": -997}},
		{"sidecar, no container resources", withSidecar(withPodLevel(podWith(res("", "", "", "")), burstable), res("", "", "", "")),
			map[string]int{"a": 750, "sidecar": 750}},
		{"sidecar, unequal requests", withSidecar(withPodLevel(podWith(res("5m", "1000000000", "5m", "2000001000"), res("5m", "500000000", "5m", "2000001000")),
			res("5m", "2000000000", "5m", "2000001000")), res("5m", "200000000", "5m", "2000001000")),
			map[string]int{"a": 725, "b": 850, "sidecar": 850}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			all := append(append([]v1.Container{}, tt.pod.Spec.Containers...), tt.pod.Spec.InitContainers...)
			for i := range all {
				if got, want := OOMScoreAdj(tt.pod, &all[i], capacity), tt.want[all[i].Name]; got != want {
					t.Errorf("%s: %d, want %d", all[i].Name, got, want)
				}
			}
		})
	}
}
