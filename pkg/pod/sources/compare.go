package sources

import (
	"reflect"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// localAnnotations are the annotations the kubelet itself sets; a source changing them
// is not a change to the pod.
var localAnnotations = []string{
	kubetypes.ConfigSourceAnnotationKey,
	kubetypes.ConfigMirrorAnnotationKey,
	kubetypes.ConfigFirstSeenAnnotationKey,
}

func isLocalAnnotation(key string) bool {
	for _, k := range localAnnotations {
		if k == key {
			return true
		}
	}
	return false
}

// annotationsEqual compares two annotation maps, ignoring local annotations.
func annotationsEqual(existing, candidate map[string]string) bool {
	for k, v := range candidate {
		if isLocalAnnotation(k) {
			continue
		}
		if ev, ok := existing[k]; !ok || ev != v {
			return false
		}
	}
	for k := range existing {
		if isLocalAnnotation(k) {
			continue
		}
		if _, ok := candidate[k]; !ok {
			return false
		}
	}
	return true
}

// podsDifferSemantically: a change the kubelet must act on, as opposed to status only.
func podsDifferSemantically(existing, ref *v1.Pod) bool {
	return !reflect.DeepEqual(existing.Spec, ref.Spec) ||
		!reflect.DeepEqual(existing.Labels, ref.Labels) ||
		!reflect.DeepEqual(existing.DeletionTimestamp, ref.DeletionTimestamp) ||
		!reflect.DeepEqual(existing.DeletionGracePeriodSeconds, ref.DeletionGracePeriodSeconds) ||
		!annotationsEqual(existing.Annotations, ref.Annotations)
}

type podChange int

const (
	noChange podChange = iota
	needUpdate
	needReconcile
	needGracefulDelete
)

// checkAndUpdatePod folds ref into existing (which stays the stored object, keeping its
// UID and local annotations) and says what kind of change it was (upstream's
// checkAndUpdatePod): a semantic change with a DeletionTimestamp is a graceful delete,
// any other semantic change an update, and a change of status or resourceVersion only a
// reconcile. Unlike upstream, the resourceVersion follows the API's: the status manager
// patches the pod as the pod manager has it, with that resourceVersion as precondition,
// and skips comparing a status already found consistent at it.
func checkAndUpdatePod(existing, ref *v1.Pod) podChange {
	versionChanged := existing.ResourceVersion != ref.ResourceVersion
	existing.ResourceVersion = ref.ResourceVersion
	if !podsDifferSemantically(existing, ref) {
		if versionChanged || !reflect.DeepEqual(existing.Status, ref.Status) {
			existing.Status = ref.Status
			return needReconcile
		}
		return noChange
	}
	existing.Spec = ref.Spec
	existing.Labels = ref.Labels
	existing.DeletionTimestamp = ref.DeletionTimestamp
	existing.DeletionGracePeriodSeconds = ref.DeletionGracePeriodSeconds
	// The generation counts spec changes: status.observedGeneration and the resize
	// conditions report it.
	existing.Generation = ref.Generation
	existing.Status = ref.Status
	updateAnnotations(existing, ref)
	if ref.DeletionTimestamp != nil {
		return needGracefulDelete
	}
	return needUpdate
}

// updateAnnotations takes ref's annotations but keeps existing's local ones (the first
// seen time in particular).
func updateAnnotations(existing, ref *v1.Pod) {
	annotations := make(map[string]string, len(ref.Annotations)+len(localAnnotations))
	for k, v := range ref.Annotations {
		annotations[k] = v
	}
	for _, k := range localAnnotations {
		if v, ok := existing.Annotations[k]; ok {
			annotations[k] = v
		}
	}
	existing.Annotations = annotations
}
