package eviction

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Keys of the Evicted event's annotations, as upstream names them.
const (
	OffendingContainersKey      = "offending_containers"
	OffendingContainersUsageKey = "offending_containers_usage"
	OffendingPodKey             = "offending_pod"
	OffendingPodUsageKey        = "offending_pod_usage"
	StarvedResourceKey          = "starved_resource"
)

// evictionMessage is upstream's message for a pod evicted for resource
// pressure, with the event annotations naming the containers (and, with
// pod-level resources, the pod) using more than they request:
//
//	The node was low on resource: memory. Threshold quantity: 100Mi, available: 90Mi.
//	Container c was using 200Mi, request is 0, has larger consumption of memory.
func evictionMessage(res v1.ResourceName, pod *v1.Pod, stats podStatsFunc, thresholds []Threshold, obs observations) (string, map[string]string) {
	var b strings.Builder
	fmt.Fprintf(&b, "The node was low on resource: %v. ", res)
	if quantity, available, ok := thresholdMetInfo(res, thresholds, obs); ok {
		fmt.Fprintf(&b, "Threshold quantity: %v, available: %v. ", quantity, available)
	}
	annotations := map[string]string{}
	ps, ok := stats(pod)
	if !ok {
		return b.String(), annotations
	}
	if res == v1.ResourceMemory && resourcehelper.IsPodLevelResourcesSet(pod) {
		if request, ok := pod.Spec.Resources.Requests[res]; ok && ps.Memory != nil {
			usage := resource.NewQuantity(int64(workingSet(ps.Memory)), resource.BinarySI)
			fmt.Fprintf(&b, "Pod %s was using %s, request is %s, has larger consumption of %v. ", pod.Name, usage.String(), request.String(), res)
			annotations[OffendingPodKey] = pod.Name
			annotations[OffendingPodUsageKey] = usage.String()
		}
	}
	// Ephemeral containers cannot have requests, so they are never blamed.
	containers := append(append([]v1.Container(nil), pod.Spec.Containers...), pod.Spec.InitContainers...)
	var names, usages []string
	for _, cs := range ps.Containers {
		i := containerIndex(containers, cs.Name)
		if i < 0 {
			continue
		}
		var usage *resource.Quantity
		switch res {
		case v1.ResourceEphemeralStorage:
			if cs.Rootfs != nil && cs.Rootfs.UsedBytes != nil && cs.Logs != nil && cs.Logs.UsedBytes != nil {
				usage = resource.NewQuantity(int64(*cs.Rootfs.UsedBytes+*cs.Logs.UsedBytes), resource.BinarySI)
			}
		case v1.ResourceMemory:
			if cs.Memory != nil && cs.Memory.WorkingSetBytes != nil {
				usage = resource.NewQuantity(int64(*cs.Memory.WorkingSetBytes), resource.BinarySI)
			}
		}
		request := containers[i].Resources.Requests[res]
		if usage != nil && usage.Cmp(request) > 0 {
			fmt.Fprintf(&b, "Container %s was using %s, request is %s, has larger consumption of %v. ", cs.Name, usage.String(), request.String(), res)
			names = append(names, cs.Name)
			usages = append(usages, usage.String())
		}
	}
	annotations[OffendingContainersKey] = strings.Join(names, ",")
	annotations[OffendingContainersUsageKey] = strings.Join(usages, ",")
	annotations[StarvedResourceKey] = string(res)
	return b.String(), annotations
}

func containerIndex(containers []v1.Container, name string) int {
	for i := range containers {
		if containers[i].Name == name {
			return i
		}
	}
	return -1
}

// thresholdMetInfo is the first met threshold on res, in absolute terms,
// and what is available of it.
func thresholdMetInfo(res v1.ResourceName, thresholds []Threshold, obs observations) (quantity, available *resource.Quantity, ok bool) {
	for _, t := range thresholds {
		if signalInfos[t.Signal].resource != res {
			continue
		}
		if o, found := obs[t.Signal]; found {
			return t.Value.Of(o.capacity), o.available, true
		}
	}
	return nil, nil, false
}
