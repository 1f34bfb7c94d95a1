package memorymanager

import (
	"errors"

	v1 "k8s.io/api/core/v1"
)

var errQuantity = errors.New("[memorymanager] failed to represent quantity as int64")

// containerRequests is the memory and huge pages the container requests, in bytes
// (zero requests included, as upstream).
func containerRequests(c *v1.Container) (map[v1.ResourceName]uint64, error) {
	out := map[v1.ResourceName]uint64{}
	for name, q := range c.Resources.Requests {
		if name != v1.ResourceMemory && !isHugePages(name) {
			continue
		}
		v, ok := q.AsInt64()
		if !ok {
			return nil, errQuantity
		}
		out[name] = uint64(v)
	}
	return out, nil
}

// podRequests is what the pod needs at its peak (upstream's getPodRequestedResources):
// the larger of what its long-running containers (app containers and sidecars) need
// together and what any regular init container needs alongside the sidecars started
// before it. Types only init containers ask for are left out, as upstream does.
func podRequests(pod *v1.Pod) (map[v1.ResourceName]uint64, error) {
	initPeak := map[v1.ResourceName]uint64{}
	sidecars := map[v1.ResourceName]uint64{}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		reqs, err := containerRequests(c)
		if err != nil {
			return nil, err
		}
		for name, v := range reqs {
			if isRestartable(c) {
				sidecars[name] += v
			} else {
				initPeak[name] = max(initPeak[name], sidecars[name]+v)
			}
		}
	}
	apps := map[v1.ResourceName]uint64{}
	for i := range pod.Spec.Containers {
		reqs, err := containerRequests(&pod.Spec.Containers[i])
		if err != nil {
			return nil, err
		}
		for name, v := range reqs {
			apps[name] += v
		}
	}
	out := map[v1.ResourceName]uint64{}
	for name, v := range apps {
		out[name] = max(v+sidecars[name], initPeak[name])
	}
	return out, nil
}

// isRestartable reports a sidecar: an init container that runs as long as the pod.
func isRestartable(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// isRegularInitContainer reports whether the pod's container of that name is an init
// container that runs to completion before the next one starts.
func isRegularInitContainer(pod *v1.Pod, name string) bool {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return !isRestartable(&pod.Spec.InitContainers[i])
		}
	}
	return false
}
