package eviction

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The metric labels of evictions for local storage limits, as upstream's.
const (
	signalEmptyDirFsLimit           = "emptydirfs.limit"
	signalEphemeralPodFsLimit       = "ephemeralpodfs.limit"
	signalEphemeralContainerFsLimit = "ephemeralcontainerfs.limit"
)

// localStorageEviction evicts, at once, every pod that uses more local
// storage than it may: an emptyDir over its sizeLimit, the pod over the sum
// of its containers' ephemeral-storage limits, or a container over its own.
func (m *Manager) localStorageEviction(ctx context.Context, pods []*v1.Pod, stats podStatsFunc) []*v1.Pod {
	var evicted []*v1.Pod
	for _, pod := range pods {
		ps, ok := stats(pod)
		if !ok {
			continue
		}
		message, signal, over := m.localStorageViolation(pod, ps)
		if over && m.evictPod(ctx, pod, hardEvictionGracePeriodSeconds, message, nil, nil, signal) {
			evicted = append(evicted, pod)
		}
	}
	return evicted
}

// localStorageViolation reports the first local storage limit the pod
// exceeds, with upstream's message and metric label.
func (m *Manager) localStorageViolation(pod *v1.Pod, ps statsapi.PodStats) (message, signal string, over bool) {
	if name, limit, ok := emptyDirOverLimit(pod, ps); ok {
		return fmt.Sprintf("Usage of EmptyDir volume %q exceeds the limit %q. ", name, limit.String()), signalEmptyDirFsLimit, true
	}
	if limit, ok := podOverEphemeralLimit(pod, ps); ok {
		return fmt.Sprintf("Pod ephemeral local storage usage exceeds the total limit of containers %s. ", limit.String()), signalEphemeralPodFsLimit, true
	}
	if name, limit, ok := containerOverEphemeralLimit(pod, ps, m.dedicatedImageFs); ok {
		return fmt.Sprintf("Container %s exceeded its local ephemeral storage limit %q. ", name, limit.String()), signalEphemeralContainerFsLimit, true
	}
	return "", "", false
}

// emptyDirOverLimit finds an emptyDir volume using more than its sizeLimit.
func emptyDirOverLimit(pod *v1.Pod, ps statsapi.PodStats) (string, resource.Quantity, bool) {
	used := map[string]uint64{}
	for _, vs := range ps.VolumeStats {
		if vs.UsedBytes != nil {
			used[vs.Name] = *vs.UsedBytes
		}
	}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Sign() <= 0 {
			continue
		}
		u, ok := used[v.Name]
		if ok && resource.NewQuantity(int64(u), resource.BinarySI).Cmp(*v.EmptyDir.SizeLimit) > 0 {
			return v.Name, *v.EmptyDir.SizeLimit, true
		}
	}
	return "", resource.Quantity{}, false
}

// podOverEphemeralLimit reports whether the pod's ephemeral storage (its
// containers' writable layers and logs, its local volumes, its logs and
// /etc/hosts, as the summary sums them) exceeds its ephemeral-storage limit.
func podOverEphemeralLimit(pod *v1.Pod, ps statsapi.PodStats) (resource.Quantity, bool) {
	limit, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceEphemeralStorage]
	if !ok {
		return resource.Quantity{}, false
	}
	used, _ := fsUsed(ps.EphemeralStorage)
	return limit, resource.NewQuantity(int64(used), resource.BinarySI).Cmp(limit) > 0
}

// containerOverEphemeralLimit finds a container (or sidecar) whose logs,
// plus its writable layer where that is on the node's filesystem, exceed
// its ephemeral-storage limit.
func containerOverEphemeralLimit(pod *v1.Pod, ps statsapi.PodStats, dedicatedImageFs bool) (string, resource.Quantity, bool) {
	limits := map[string]resource.Quantity{}
	addLimit := func(c *v1.Container) {
		if l, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]; ok && l.Value() != 0 {
			limits[c.Name] = l
		}
	}
	for i := range pod.Spec.Containers {
		addLimit(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			addLimit(c)
		}
	}
	for _, cs := range ps.Containers {
		limit, ok := limits[cs.Name]
		if !ok {
			continue
		}
		used, _ := fsUsed(cs.Logs)
		if !dedicatedImageFs {
			rootfs, _ := fsUsed(cs.Rootfs)
			used += rootfs
		}
		if limit.Cmp(*resource.NewQuantity(int64(used), resource.BinarySI)) < 0 {
			return cs.Name, limit, true
		}
	}
	return "", resource.Quantity{}, false
}

// hasLocalStorageLimit reports a pod whose local storage usage eviction must check: an
// emptyDir with a sizeLimit, or an ephemeral-storage limit on the pod or a container.
func hasLocalStorageLimit(pod *v1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && v.EmptyDir.SizeLimit.Sign() > 0 {
			return true
		}
	}
	if r := pod.Spec.Resources; r != nil {
		if _, ok := r.Limits[v1.ResourceEphemeralStorage]; ok {
			return true
		}
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if _, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]; ok {
				return true
			}
		}
	}
	return false
}
