package kubelet

import (
	"context"
	"errors"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
	"github.com/nodelet/nodelet/pkg/pod/mirror"
	"github.com/nodelet/nodelet/pkg/pod/podmanager"
)

// syncMirrorPod keeps a static pod's mirror pod in line (upstream's SyncPod mirror step):
// an outdated mirror (another hash, or being deleted) is deleted at once, and a missing one
// is created. Failures are logged and retried on the next sync; they never stop the pod.
func (k *Kubelet) syncMirrorPod(ctx context.Context, pod *v1.Pod) {
	if k.deps.Mirror == nil || !kubetypes.IsStaticPod(pod) {
		return
	}
	existing, ok := k.pods.GetMirrorPodByPod(pod)
	deleted := false
	if ok && (existing.DeletionTimestamp != nil || !podmanager.IsMirrorPodOf(existing, pod)) {
		klog.InfoS("Trying to delete pod", "pod", klog.KObj(pod), "podUID", existing.UID)
		var err error
		deleted, err = k.deps.Mirror.DeleteMirrorPod(ctx, podmanager.FullName(pod), &existing.UID)
		switch {
		case deleted:
			klog.InfoS("Deleted mirror pod because it is outdated", "pod", klog.KObj(existing))
		case err != nil:
			klog.ErrorS(err, "Failed deleting mirror pod", "pod", klog.KObj(existing))
		}
	}
	if ok && !deleted {
		return
	}
	klog.V(4).InfoS("Creating a mirror pod for static pod", "pod", klog.KObj(pod))
	err := k.deps.Mirror.CreateMirrorPod(ctx, pod)
	switch {
	case errors.Is(err, mirror.ErrNoNode):
		klog.V(4).InfoS("No need to create a mirror pod, since there is no node object to own it", "pod", klog.KObj(pod), "err", err)
	case err != nil && !apierrors.IsAlreadyExists(err):
		klog.ErrorS(err, "Failed creating a mirror pod for", "pod", klog.KObj(pod))
	}
}

// deleteOrphanedMirrorPods removes mirror pods whose static pod is no longer desired
// (upstream's housekeeping step). Upstream keeps the mirror while the static pod is still
// being torn down; nodelet removes it at once, which only shortens what the API shows.
func (k *Kubelet) deleteOrphanedMirrorPods(ctx context.Context) {
	if k.deps.Mirror == nil {
		return
	}
	for _, name := range k.pods.GetOrphanedMirrorPodNames() {
		if _, err := k.deps.Mirror.DeleteMirrorPod(ctx, name, nil); err != nil {
			klog.ErrorS(err, "Encountered error when deleting mirror pod", "podName", name)
		} else {
			klog.V(3).InfoS("Deleted mirror pod", "podName", name)
		}
	}
}
