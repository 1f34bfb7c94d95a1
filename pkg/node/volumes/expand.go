package volumes

import (
	"context"
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nodelet/nodelet/pkg/node/volumes/csi"
)

// ClaimStatusPatcher writes a claim's status: the node's part of volume expansion.
type ClaimStatusPatcher interface {
	// PatchPersistentVolumeClaimStatus sends the difference between old and updated as
	// a status patch, failing if the claim changed since old was read.
	PatchPersistentVolumeClaimStatus(ctx context.Context, old, updated *v1.PersistentVolumeClaim) (*v1.PersistentVolumeClaim, error)
}

// Upstream's event reason for a finished node expansion.
const eventFileSystemResizeSuccess = "FileSystemResizeSuccessful"

// resizeConditions are the claim conditions of an expansion, which a finished one clears.
var resizeConditions = []v1.PersistentVolumeClaimConditionType{
	v1.PersistentVolumeClaimFileSystemResizePending, v1.PersistentVolumeClaimResizing,
	v1.PersistentVolumeClaimControllerResizeError, v1.PersistentVolumeClaimNodeResizeError,
}

// expandCSIClaim grows a mounted CSI volume's filesystem when its claim was resized
// (upstream's NodeExpander): the controller side has grown the volume (the PV's
// capacity is above the claim's status) and marked the claim NodeResizePending. The
// driver is asked (NodeExpandVolume), then the claim's status gets the new capacity.
// It runs on every sync of a pod that has the claim mounted, as upstream's volume manager
// checks at each of its pod's reprocessing.
func (m *Manager) expandCSIClaim(ctx context.Context, pod *v1.Pod, vol *v1.Volume, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, targetPath string) error {
	if pv.Spec.CSI == nil || m.claimStatus == nil || m.csi == nil {
		return nil
	}
	newSize, current := pv.Spec.Capacity[v1.ResourceStorage], pvc.Status.Capacity[v1.ResourceStorage]
	if newSize.Cmp(current) <= 0 {
		return nil // nothing to grow
	}
	switch pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] {
	case v1.PersistentVolumeClaimNodeResizePending, v1.PersistentVolumeClaimNodeResizeInProgress:
	default:
		klog.V(3).InfoS("NodeExpandVolume is not allowed to proceed", "pod", klog.KObj(pod), "volume", vol.Name,
			"resizeStatus", pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage])
		return nil
	}
	pvc, err := m.markClaim(ctx, pvc, func(c *v1.PersistentVolumeClaim) {
		setStorageResizeStatus(c, v1.PersistentVolumeClaimNodeResizeInProgress)
	})
	if err != nil {
		return fmt.Errorf("MountVolume.NodeExpandVolume failed to mark node expansion in progress: %w", err)
	}
	expand := m.nodeExpand
	if m.expandOnNode != nil {
		expand = m.expandOnNode
	}
	if err := expand(ctx, pv, targetPath, newSize.Value()); err != nil {
		return m.expansionFailed(ctx, pvc, err)
	}
	msg := fmt.Sprintf("MountVolume.NodeExpandVolume succeeded for volume %q %s", pv.Name, m.nodeName)
	m.recordEvent(pod, v1.EventTypeNormal, eventFileSystemResizeSuccess, msg)
	m.recordEvent(pvc, v1.EventTypeNormal, eventFileSystemResizeSuccess, msg)
	klog.InfoS(msg, "pod", klog.KObj(pod))
	_, err = m.markClaim(ctx, pvc, func(c *v1.PersistentVolumeClaim) {
		if c.Status.Capacity == nil {
			c.Status.Capacity = v1.ResourceList{}
		}
		c.Status.Capacity[v1.ResourceStorage] = newSize
		setStorageResizeStatus(c, "")
		c.Status.Conditions = slices.DeleteFunc(c.Status.Conditions, func(cond v1.PersistentVolumeClaimCondition) bool {
			return slices.Contains(resizeConditions, cond.Type)
		})
	})
	if err != nil {
		return fmt.Errorf("mountVolume.NodeExpandVolume update pvc status failed: %w", err)
	}
	return nil
}

// nodeExpand asks the volume's driver to grow it to size bytes.
func (m *Manager) nodeExpand(ctx context.Context, pv *v1.PersistentVolume, targetPath string, size int64) error {
	src := pv.Spec.CSI
	secrets, err := m.secretData(ctx, src.NodeExpandSecretRef)
	if err != nil {
		return err
	}
	staging := ""
	if staged, err := m.csi.IsStaged(src.Driver, src.VolumeHandle); err == nil && staged {
		staging = m.csi.StagingPath(src.Driver, src.VolumeHandle)
	}
	_, err = m.csi.Expand(ctx, csi.ExpandRequest{Driver: src.Driver, VolumeHandle: src.VolumeHandle, VolumePath: targetPath,
		StagingPath: staging, RequiredBytes: size, Secrets: secrets,
		Capability: csi.VolumeCapability{FSType: src.FSType, MountFlags: pv.Spec.MountOptions, AccessModes: pv.Spec.AccessModes}})
	return err
}

// expansionFailed records a failed node expansion on the claim as upstream does: an
// infeasible one (the driver refused the size) is not retried; a driver that cannot grow
// a volume in use (FAILED_PRECONDITION) leaves it for the next mount; other failures are
// retried with the pod's next sync. Only the first two let the pod start.
func (m *Manager) expansionFailed(ctx context.Context, pvc *v1.PersistentVolumeClaim, err error) error {
	st, _ := status.FromError(err)
	code := st.Code()
	if errors.Is(err, csi.ErrNotSupported) {
		return fmt.Errorf("MountVolume.NodeExpandVolume failed: %w", err)
	}
	condition := v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue,
		LastTransitionTime: metav1.Now(), Message: fmt.Sprintf("failed to expand pvc with %v", err)}
	infeasible := code == codes.InvalidArgument || code == codes.OutOfRange || code == codes.NotFound
	if _, perr := m.markClaim(ctx, pvc, func(c *v1.PersistentVolumeClaim) {
		if infeasible {
			setStorageResizeStatus(c, v1.PersistentVolumeClaimNodeResizeInfeasible)
		}
		c.Status.Conditions = append(slices.DeleteFunc(c.Status.Conditions, func(cond v1.PersistentVolumeClaimCondition) bool {
			return cond.Type == condition.Type
		}), condition)
	}); perr != nil {
		klog.ErrorS(perr, "MountVolume.NodeExpandVolume failed to mark node expansion as failed", "pvc", klog.KObj(pvc))
	}
	if infeasible || code == codes.FailedPrecondition {
		klog.ErrorS(err, "MountVolume.NodeExpandVolume failed", "pvc", klog.KObj(pvc))
		return nil
	}
	return fmt.Errorf("MountVolume.NodeExpandVolume failed: %w", err)
}

// markClaim patches the claim's status with change applied to a copy.
func (m *Manager) markClaim(ctx context.Context, pvc *v1.PersistentVolumeClaim, change func(*v1.PersistentVolumeClaim)) (*v1.PersistentVolumeClaim, error) {
	updated := pvc.DeepCopy()
	change(updated)
	return m.claimStatus.PatchPersistentVolumeClaimStatus(ctx, pvc, updated)
}

// setStorageResizeStatus sets (or with "" clears) the claim's storage resize status.
func setStorageResizeStatus(c *v1.PersistentVolumeClaim, s v1.ClaimResourceStatus) {
	if s == "" {
		delete(c.Status.AllocatedResourceStatuses, v1.ResourceStorage)
		if len(c.Status.AllocatedResourceStatuses) == 0 {
			c.Status.AllocatedResourceStatuses = nil
		}
		return
	}
	if c.Status.AllocatedResourceStatuses == nil {
		c.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
	}
	c.Status.AllocatedResourceStatuses[v1.ResourceStorage] = s
}
