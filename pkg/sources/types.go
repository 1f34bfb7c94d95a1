// Package sources reads the pods a node should run from its pod sources (a manifest
// directory or file, a manifest URL, and later the API server) and merges them into one
// ordered stream of changes for the kubelet loop. It follows upstream's
// pkg/kubelet/config (PodConfig, file, http, common) and pkg/kubelet/types/pod_update.go.
package sources

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// PodOperation says what a PodUpdate does to the pods of its source.
type PodOperation int

// The operations, in upstream's order (their values are upstream's).
const (
	// SET is the complete current set of pods of a source.
	SET PodOperation = iota
	// ADD: pods new to the source.
	ADD
	// DELETE: pods being gracefully deleted (their DeletionTimestamp is set).
	DELETE
	// REMOVE: pods gone from the source.
	REMOVE
	// UPDATE: pods whose spec, labels, annotations or deletion fields changed.
	UPDATE
	// RECONCILE: pods whose status alone changed; the kubelet reconciles status.
	RECONCILE
)

func (op PodOperation) String() string {
	switch op {
	case SET:
		return "SET"
	case ADD:
		return "ADD"
	case DELETE:
		return "DELETE"
	case REMOVE:
		return "REMOVE"
	case UPDATE:
		return "UPDATE"
	case RECONCILE:
		return "RECONCILE"
	}
	return fmt.Sprintf("PodOperation(%d)", int(op))
}

// Source names.
const (
	FileSource      = "file"
	HTTPSource      = "http"
	APIServerSource = "api"
	// AllSource names the merged state of every source (used by Config.Sync).
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

// PodUpdate is what sources send to a Config channel and what Config.Updates delivers.
// A source sends its whole current set of pods with Op SET (it may also send ADD,
// UPDATE, DELETE and REMOVE); Updates delivers ADD, UPDATE, DELETE, REMOVE and
// RECONCILE, and SET from Sync. Pods is never nil in updates Config delivers.
type PodUpdate struct {
	Pods   []*v1.Pod
	Op     PodOperation
	Source string
}

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

// podFullName is upstream's kubecontainer.GetPodFullName: unique per node.
func podFullName(pod *v1.Pod) string {
	return pod.Name + "_" + pod.Namespace
}

// podDesc is upstream's format.Pod, used in log and event messages.
func podDesc(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}
