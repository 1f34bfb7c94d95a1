package status

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// PodLookup is what the API syncer needs from the pod manager: the pods as the API source
// last delivered them, and mirror pods mapped to their static pods.
type PodLookup interface {
	GetPodByUID(uid types.UID) (*v1.Pod, bool)
	GetMirrorPodByPod(pod *v1.Pod) (*v1.Pod, bool)
	TranslatePodUID(uid types.UID) types.UID
}

// APISyncer writes pod statuses to the API server (upstream's status manager syncPod): it
// reads the pod, merges the kubelet's status into the API's (keeping conditions others
// own, holding back a terminal phase while containers may still run), patches only what
// changed with the pod's UID as a precondition, and deletes a pod whose deletion was
// requested once its termination has finished. Static pods' statuses go to their mirror
// pods.
type APISyncer struct {
	client kubernetes.Interface
	pods   PodLookup
	// couldHaveRunningContainers is false once the pod workers know the pod's containers
	// are all stopped for good.
	couldHaveRunningContainers func(uid types.UID) bool
}

// NewAPISyncer returns a syncer for the status manager (NewManager(syncer, pods)).
func NewAPISyncer(client kubernetes.Interface, pods PodLookup, couldHaveRunningContainers func(types.UID) bool) *APISyncer {
	return &APISyncer{client: client, pods: pods, couldHaveRunningContainers: couldHaveRunningContainers}
}

// SyncPodStatus implements PodStatusSyncer. The pod to merge into is the one the watch
// last delivered, with its resourceVersion as the patch's precondition: upstream reads
// the pod from the API server before every status patch, a third of the requests a pod's
// start costs the API server and etcd. Where the watch is behind (the API server answers
// Conflict) or has no such pod, the pod is read, as upstream does.
func (s *APISyncer) SyncPodStatus(ctx context.Context, u PodStatusUpdate) (bool, error) {
	if pod, ok := s.watchedPod(u.UID); ok {
		forget, err := s.syncWith(ctx, u, pod, true)
		if !apierrors.IsConflict(err) {
			return forget, err
		}
		klog.V(4).InfoS("Pod changed since the watch delivered it, reading it", "pod", klog.KObj(pod), "podUID", u.UID)
	}
	pod, err := s.client.CoreV1().Pods(u.Namespace).Get(ctx, u.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		klog.V(3).InfoS("Pod does not exist on the server", "podUID", u.UID, "pod", klog.KRef(u.Namespace, u.Name))
		return false, nil // its status goes when the pod leaves the pod manager
	}
	if err != nil {
		return false, fmt.Errorf("get pod: %w", err)
	}
	return s.syncWith(ctx, u, pod, false)
}

// watchedPod is the API's pod for the status of uid as the pod manager has it from the
// watch: the pod itself, or a static pod's mirror pod.
func (s *APISyncer) watchedPod(uid types.UID) (*v1.Pod, bool) {
	pod, ok := s.pods.GetPodByUID(uid)
	if ok && kubetypes.IsStaticPod(pod) {
		pod, ok = s.pods.GetMirrorPodByPod(pod)
	}
	if !ok || pod.ResourceVersion == "" {
		return nil, false
	}
	return pod, true
}

// syncWith merges the status into pod's, patches what changed (with pod's resourceVersion
// as a precondition when precondition is set) and deletes the pod once it can go.
func (s *APISyncer) syncWith(ctx context.Context, u PodStatusUpdate, pod *v1.Pod, precondition bool) (bool, error) {
	if translated := s.pods.TranslatePodUID(pod.UID); translated != u.UID {
		klog.V(2).InfoS("Pod was deleted and then recreated, skipping status update", "pod", klog.KObj(pod), "oldPodUID", u.UID, "podUID", translated)
		return true, nil
	}
	merged := mergePodStatus(pod, pod.Status, u.Status, s.couldHaveRunningContainers(u.UID))
	// A status equal to the watched pod's is still sent, as a patch of the preconditions
	// alone, unless the pod is to be deleted: the watch may be behind a write of ours, and
	// only the API server can say (Conflict). Where it is not behind, the patch changes
	// nothing and costs no write.
	verify := precondition && !canBeDeleted(pod, u.PodIsFinished)
	newPod, patch, unchanged, err := patchPodStatus(ctx, s.client, pod, merged, precondition, verify)
	klog.V(3).InfoS("Patch status for pod", "pod", klog.KObj(pod), "podUID", u.UID, "patch", string(patch))
	if apierrors.IsNotFound(err) {
		klog.V(3).InfoS("Pod does not exist on the server", "podUID", u.UID, "pod", klog.KObj(pod))
		return false, nil
	}
	if apierrors.IsConflict(err) {
		return false, err
	}
	if err != nil {
		return false, fmt.Errorf("patch status: %w", err)
	}
	if !unchanged {
		klog.V(3).InfoS("Status for pod updated successfully", "pod", klog.KObj(pod), "statusVersion", u.Version)
		pod = newPod
	}
	if !canBeDeleted(pod, u.PodIsFinished) {
		return false, nil
	}
	if err := s.deletePod(ctx, pod); err != nil {
		return false, err
	}
	return true, nil
}

// NeedsReconcile implements PodStatusSyncer: an acknowledged status is offered again when
// the pod as last seen from the API shows another status (someone else wrote it, or an
// update was lost), or when the pod can now be deleted. A status found consistent with the
// pod at a resourceVersion is not compared again until the pod changes: the comparison
// (a deep copy and a deep compare per pod every 10 s) was a tenth of an idle nodelet's CPU
// with 110 pods.
func (s *APISyncer) NeedsReconcile(u PodStatusUpdate) (bool, string) {
	pod, ok := s.pods.GetPodByUID(u.UID)
	if !ok {
		return false, ""
	}
	if !isMirrorOrStatic(pod) && canBeDeleted(pod, u.PodIsFinished) {
		return true, ""
	}
	if kubetypes.IsStaticPod(pod) {
		if pod, ok = s.pods.GetMirrorPodByPod(pod); !ok {
			return false, ""
		}
	}
	if u.ConsistentWith != "" && u.ConsistentWith == pod.ResourceVersion {
		return false, u.ConsistentWith
	}
	apiStatus := pod.Status.DeepCopy()
	normalizeStatus(pod, apiStatus)
	if statusByKubeletEqual(apiStatus, &u.Status) {
		return false, pod.ResourceVersion
	}
	klog.V(3).InfoS("Pod status is inconsistent with cached status for pod, a reconciliation should be triggered", "pod", klog.KObj(pod))
	return true, ""
}

func isMirrorOrStatic(pod *v1.Pod) bool {
	return kubetypes.IsMirrorPod(pod) || kubetypes.IsStaticPod(pod)
}

// canBeDeleted: a pod whose deletion was requested goes from the API once the API shows a
// terminal phase and the kubelet has finished with it (volumes and cgroup released).
// Mirror pods are deleted by the kubelet's mirror pod handling, never here.
func canBeDeleted(pod *v1.Pod, podIsFinished bool) bool {
	if pod.DeletionTimestamp == nil || isMirrorOrStatic(pod) {
		return false
	}
	if !isTerminal(pod.Status.Phase) {
		klog.V(3).InfoS("Delaying pod deletion as the phase is non-terminal", "phase", pod.Status.Phase, "pod", klog.KObj(pod), "podUID", pod.UID)
		return false
	}
	return podIsFinished
}

// deletePod removes the API object with grace 0 and the UID as a precondition, so a new
// pod of the same name is never deleted by mistake.
func (s *APISyncer) deletePod(ctx context.Context, pod *v1.Pod) error {
	zero := int64(0)
	err := s.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod: %w", err)
	}
	klog.V(3).InfoS("Pod fully terminated and removed from etcd", "pod", klog.KObj(pod))
	return nil
}

// patchPodStatus sends the two-way strategic merge patch from the API's status to the new
// one. The UID appears only in the new object, so the patch carries it and the API server
// refuses it for another pod of the same name; with precondition, the resourceVersion too,
// and the API server refuses it (Conflict) if the pod has changed since. unchanged means
// nothing but the metadata differs; such a patch is sent only with always.
func patchPodStatus(ctx context.Context, client kubernetes.Interface, pod *v1.Pod, status v1.PodStatus, precondition, always bool) (*v1.Pod, []byte, bool, error) {
	oldData, err := json.Marshal(v1.Pod{Status: pod.Status})
	if err != nil {
		return nil, nil, false, err
	}
	meta := metav1.ObjectMeta{UID: pod.UID}
	if precondition {
		meta.ResourceVersion = pod.ResourceVersion
	}
	newData, err := json.Marshal(v1.Pod{ObjectMeta: meta, Status: status})
	if err != nil {
		return nil, nil, false, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, v1.Pod{})
	if err != nil {
		return nil, nil, false, fmt.Errorf("create patch for pod %q: %w", klog.KObj(pod), err)
	}
	unchanged := !patchesStatus(patch)
	if unchanged && !always {
		return pod, patch, true, nil
	}
	updated, err := client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return updated, patch, unchanged, err
}

// mergePodStatus combines the API's status with the kubelet's (upstream's mergePodStatus):
// conditions the kubelet does not own stay as the API has them, DisruptionTarget is sent
// only with the terminal phase, a terminal phase waits until no container can run, and a
// terminal pod is never reported ready.
func mergePodStatus(pod *v1.Pod, oldStatus, newStatus v1.PodStatus, couldHaveRunningContainers bool) v1.PodStatus {
	conditions := make([]v1.PodCondition, 0, len(oldStatus.Conditions)+len(newStatus.Conditions))
	for _, c := range oldStatus.Conditions {
		if !kubeletOwnsCondition(c.Type) {
			conditions = append(conditions, c)
		}
	}
	toTerminal := !isTerminal(oldStatus.Phase) && isTerminal(newStatus.Phase)
	for i := range newStatus.Conditions {
		c := newStatus.Conditions[i]
		switch {
		case kubeletOwnsCondition(c.Type):
			conditions = append(conditions, c)
		case c.Type == v1.DisruptionTarget && toTerminal && !couldHaveRunningContainers:
			updateLastTransitionTime(&newStatus, &oldStatus, c.Type, metav1.Now())
			conditions = replaceOrAppendCondition(conditions, findCondition(newStatus.Conditions, c.Type))
		}
	}
	newStatus.Conditions = conditions
	// Resource claim statuses belong to the scheduler and DRA drivers.
	newStatus.ResourceClaimStatuses = oldStatus.ResourceClaimStatuses
	newStatus.ExtendedResourceClaimStatus = oldStatus.ExtendedResourceClaimStatus
	if toTerminal && couldHaveRunningContainers {
		newStatus.Phase, newStatus.Reason, newStatus.Message = oldStatus.Phase, oldStatus.Reason, oldStatus.Message
	}
	if isTerminal(newStatus.Phase) {
		notReadyWhenTerminal(pod, &newStatus)
	}
	return newStatus
}

// notReadyWhenTerminal turns Ready and ContainersReady false for a terminal phase: the
// readiness of stopped containers may not have been recomputed yet.
func notReadyWhenTerminal(pod *v1.Pod, status *v1.PodStatus) {
	for _, t := range []v1.PodConditionType{v1.ContainersReady, v1.PodReady} {
		if c := findCondition(status.Conditions, t); c != nil && c.Status == v1.ConditionTrue {
			*c = terminalCondition(pod, t, status.Phase)
			c.LastTransitionTime = metav1.Now()
		}
	}
}

// patchesStatus reports whether a patch made by patchPodStatus changes the status, not
// only carries the metadata.
func patchesStatus(patch []byte) bool {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(patch, &fields); err != nil {
		return true // send it: the API server will say what is wrong
	}
	_, ok := fields["status"]
	return ok
}
