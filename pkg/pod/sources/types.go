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

// PodUpdate is what sources send to a Config channel and what Config.Updates delivers.
// A source sends its whole current set of pods with Op SET (it may also send ADD,
// UPDATE, DELETE and REMOVE); Updates delivers ADD, UPDATE, DELETE, REMOVE and
// RECONCILE, and SET from Sync. Pods is never nil in updates Config delivers.
type PodUpdate struct {
	Pods   []*v1.Pod
	Op     PodOperation
	Source string
}

// podFullName is upstream's kubecontainer.GetPodFullName: unique per node.
func podFullName(pod *v1.Pod) string {
	return pod.Name + "_" + pod.Namespace
}

// podDesc is upstream's format.Pod, used in log and event messages.
func podDesc(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}
