// Package kubetypes holds the names the kubelet writes on the pods it runs — where a pod
// came from and whether it is a static pod's mirror — shared by the sources, the pod
// manager, the mirror client, status, QoS and the runtime manager (upstream's
// pkg/kubelet/types). It depends on nothing but the core API.
package kubetypes

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// Source names, as the kubernetes.io/config.source annotation holds them.
const (
	FileSource      = "file"
	HTTPSource      = "http"
	APIServerSource = "api"
	// AllSource names the merged state of every source.
	AllSource = "*"
)

// Annotations the kubelet manages on the pods it runs.
const (
	// ConfigSourceAnnotationKey holds the source a pod came from.
	ConfigSourceAnnotationKey = "kubernetes.io/config.source"
	// ConfigMirrorAnnotationKey marks a mirror pod (the API object for a static pod).
	ConfigMirrorAnnotationKey = "kubernetes.io/config.mirror"
	// ConfigFirstSeenAnnotationKey holds when this kubelet first saw the pod.
	ConfigFirstSeenAnnotationKey = "kubernetes.io/config.seen"
	// ConfigHashAnnotationKey holds the hash a static pod's UID was made from.
	ConfigHashAnnotationKey = "kubernetes.io/config.hash"
)

// GetPodSource returns the source recorded in the pod's annotations.
func GetPodSource(pod *v1.Pod) (string, error) {
	if source, ok := pod.Annotations[ConfigSourceAnnotationKey]; ok {
		return source, nil
	}
	return "", fmt.Errorf("cannot get source of pod %q", pod.UID)
}

// IsStaticPod reports whether the pod came from a source other than the API server.
func IsStaticPod(pod *v1.Pod) bool {
	source, err := GetPodSource(pod)
	return err == nil && source != APIServerSource
}

// IsMirrorPod reports whether the pod is the API server's mirror of a static pod.
func IsMirrorPod(pod *v1.Pod) bool {
	_, ok := pod.Annotations[ConfigMirrorAnnotationKey]
	return ok
}

// SystemCriticalPriority is scheduling.SystemCriticalPriority (2 × the highest
// user-definable priority): pods at or above it are critical.
const SystemCriticalPriority = 2 * 1000000000

// IsCriticalPod reports whether the pod is critical to the node, as upstream's
// IsCriticalPod: a static pod, a mirror pod, or one of system-critical priority.
func IsCriticalPod(pod *v1.Pod) bool {
	if IsStaticPod(pod) || IsMirrorPod(pod) {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= SystemCriticalPriority
}
