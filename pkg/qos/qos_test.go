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
		{"pod-level resources win", func() *v1.Pod {
			p := podWith(res("", "", "", ""))
			r := res("1", "1Gi", "1", "1Gi")
			p.Spec.Resources = &r
			return p
		}(), v1.PodQOSGuaranteed},
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

func TestOOMScoreAdjSidecar(t *testing.T) {
	const gi = int64(1) << 30
	always := v1.ContainerRestartPolicyAlways
	pod := podWith(res("", "2Gi", "", ""))
	pod.Spec.InitContainers = []v1.Container{
		{Name: "small-sidecar", Resources: res("", "1Gi", "", ""), RestartPolicy: &always},
		{Name: "big-sidecar", Resources: res("", "4Gi", "", ""), RestartPolicy: &always},
	}
	// The smaller sidecar scores from its own request, plus one: killed before the app.
	if got := OOMScoreAdj(pod, &pod.Spec.InitContainers[0], 8*gi); got != 876 {
		t.Errorf("small sidecar: %d, want 876", got)
	}
	// The bigger one is scored like the app's request, plus one.
	if got := OOMScoreAdj(pod, &pod.Spec.InitContainers[1], 8*gi); got != 751 {
		t.Errorf("big sidecar: %d, want 751", got)
	}
	if got := OOMScoreAdj(pod, &pod.Spec.Containers[0], 8*gi); got != 750 {
		t.Errorf("app: %d, want 750", got)
	}
}
