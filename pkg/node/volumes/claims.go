package volumes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/pkg/node/volumes/mountpoint"
	"github.com/nodelet/nodelet/pkg/node/volumes/ownership"
)

// localVolumePluginDir holds the bind mounts of local persistent volumes, as upstream's
// "kubernetes.io/local-volume" plugin lays them out (named after the PV).
const localVolumePluginDir = "kubernetes.io~local-volume"

// Claims reads the claims and volumes behind persistentVolumeClaim and ephemeral volumes.
type Claims interface {
	GetPersistentVolumeClaim(ctx context.Context, namespace, name string) (*v1.PersistentVolumeClaim, error)
	GetPersistentVolume(ctx context.Context, name string) (*v1.PersistentVolume, error)
}

// claimMount is where a pod's claim is on the host.
type claimMount struct {
	path     string
	readOnly bool
	// pvName is the persistent volume's name, which names the claim's subPath mounts.
	pvName string
	// relabel: a directory nodelet made for the pod (a local volume's bind mount).
	relabel bool
	// csi: published by a CSI driver, which is not asked again while the pod runs
	// (upstream's volume manager publishes once; the driver keeps the mount).
	csi bool
	// block: a raw block volume; path is the pod's link to the device.
	block bool
	// republish: the driver asks for the volume to be published again at every sync of
	// the pod (CSIDriver requiresRepublish), with fresh tokens.
	republish bool
}

// claimMounts remembers, per pod and volume, where its claim was mounted by SetUpPod,
// for MountsFor.
type claimMounts struct {
	mu     sync.Mutex
	mounts map[types.UID]map[string]claimMount
}

func (c *claimMounts) set(uid types.UID, volume string, cm claimMount) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mounts == nil {
		c.mounts = map[types.UID]map[string]claimMount{}
	}
	if c.mounts[uid] == nil {
		c.mounts[uid] = map[string]claimMount{}
	}
	c.mounts[uid][volume] = cm
}

func (c *claimMounts) get(uid types.UID, volume string) (claimMount, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cm, ok := c.mounts[uid][volume]
	return cm, ok
}

func (c *claimMounts) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.mounts, uid)
}

// claimName is the claim a persistentVolumeClaim or generic ephemeral volume uses: the
// ephemeral volume controller names it <pod>-<volume>.
func claimName(pod *v1.Pod, vol *v1.Volume) (name string, readOnly, ephemeral bool) {
	if vol.PersistentVolumeClaim != nil {
		return vol.PersistentVolumeClaim.ClaimName, vol.PersistentVolumeClaim.ReadOnly, false
	}
	return pod.Name + "-" + vol.Name, false, true
}

// setUpClaim finds the volume bound to the pod's claim and makes it ready: a local
// volume is bind-mounted into the pod's directory, a hostPath one is used in place.
// a CSI volume is staged and published by its driver. Other types (NFS, ...) are
// refused by type.
func (m *Manager) setUpClaim(ctx context.Context, pod *v1.Pod, vol *v1.Volume) error {
	if m.api.Claims == nil {
		return errNoAPI
	}
	mounted, isMounted := m.claims.get(pod.UID, vol.Name)
	if isMounted && mounted.csi && m.claimStatus == nil && !mounted.republish {
		return nil
	}
	pvc, pv, readOnly, err := m.boundVolume(ctx, pod, vol)
	if err != nil {
		return err
	}
	if isMounted && mounted.csi {
		return m.resyncCSIClaim(ctx, pod, vol, pvc, pv, mounted)
	}
	var cm claimMount
	switch {
	case pv.Spec.Local != nil:
		cm.path, cm.relabel = filepath.Join(m.podVolumesDir(pod.UID), localVolumePluginDir, pv.Name), true
		err = m.bindMount(pv.Spec.Local.Path, cm.path)
		if err == nil && !readOnly {
			err = ownership.Set(cm.path, podFSGroup(pod), podFSGroupChangePolicy(pod), false)
		}
	case pv.Spec.HostPath != nil:
		cm.path = pv.Spec.HostPath.Path
		err = setUpHostPath(pv.Spec.HostPath)
	case pv.Spec.CSI != nil && isBlock(pv):
		cm.csi, cm.block = true, true
		cm.path, err = m.setUpCSIBlock(ctx, pod, pv, readOnly)
	case pv.Spec.CSI != nil:
		cm.csi = true
		cm.path, cm.republish, err = m.setUpCSIPersistent(ctx, pod, pv, readOnly, false)
		if err == nil {
			err = m.expandCSIClaim(ctx, pod, vol, pvc, pv, cm.path)
		}
	default:
		err = fmt.Errorf("persistent volume %q: type %s is not supported yet", pv.Name, persistentVolumeTypeName(&pv.Spec.PersistentVolumeSource))
	}
	if err != nil {
		return err
	}
	cm.readOnly, cm.pvName = readOnly, pv.Name
	m.claims.set(pod.UID, vol.Name, cm)
	return nil
}

// resyncCSIClaim is what a sync does for a CSI claim published already: publish it
// again when its driver requires republishing, and grow it when the claim was resized.
func (m *Manager) resyncCSIClaim(ctx context.Context, pod *v1.Pod, vol *v1.Volume, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, mounted claimMount) error {
	if mounted.block {
		return nil // a grown raw block volume needs no node expansion here
	}
	if mounted.republish {
		if _, _, err := m.setUpCSIPersistent(ctx, pod, pv, mounted.readOnly, true); err != nil {
			return err
		}
	}
	return m.expandCSIClaim(ctx, pod, vol, pvc, pv, mounted.path)
}

// boundVolume checks the claim as upstream's volume manager does and returns its volume.
func (m *Manager) boundVolume(ctx context.Context, pod *v1.Pod, vol *v1.Volume) (*v1.PersistentVolumeClaim, *v1.PersistentVolume, bool, error) {
	name, readOnly, ephemeral := claimName(pod, vol)
	pvc, err := m.api.Claims.GetPersistentVolumeClaim(ctx, pod.Namespace, name)
	if err != nil {
		return nil, nil, false, fmt.Errorf("error processing PVC %s/%s: %w", pod.Namespace, name, err)
	}
	if ephemeral && !metav1.IsControlledBy(pvc, pod) {
		return nil, nil, false, fmt.Errorf("PVC %s/%s was not created for pod %s/%s (pod is not owner)", pod.Namespace, name, pod.Namespace, pod.Name)
	}
	if pvc.DeletionTimestamp != nil {
		return nil, nil, false, fmt.Errorf("can't start pod because PVC %s/%s is being deleted", pod.Namespace, name)
	}
	if pvc.Status.Phase != v1.ClaimBound || pvc.Spec.VolumeName == "" {
		return nil, nil, false, fmt.Errorf("error processing PVC %s/%s: PVC is not bound", pod.Namespace, name)
	}
	pv, err := m.api.Claims.GetPersistentVolume(ctx, pvc.Spec.VolumeName)
	if err != nil {
		return nil, nil, false, fmt.Errorf("error processing PVC %s/%s: %w", pod.Namespace, name, err)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != pvc.UID {
		return nil, nil, false, fmt.Errorf("error processing PVC %s/%s: persistent volume %q is not bound to it", pod.Namespace, name, pv.Name)
	}
	return pvc, pv, readOnly, nil
}

// bindMount bind-mounts the directory src on dst, unless something is mounted there.
func (m *Manager) bindMount(src, dst string) error {
	info, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("local volume path %s: %w", src, err)
	}
	if !info.IsDir() {
		return fmt.Errorf("local volume path %s is not a directory (block and file local volumes are not supported yet)", src)
	}
	if err := mkdirAll(dst); err != nil {
		return err
	}
	mounted, err := m.isMountPoint(dst)
	if err != nil || mounted {
		return err
	}
	klog.V(3).InfoS("Bind-mounting local volume", "source", src, "path", dst)
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s on %s: %w", src, dst, err)
	}
	return nil
}

// isMountPoint reports whether anything is mounted exactly at dir. The kernel says so
// since Linux 5.8; the mount table is read only on older kernels.
func (m *Manager) isMountPoint(dir string) (bool, error) {
	if root, known, err := mountpoint.Root(dir, true); err != nil || known {
		return root, err
	}
	fsType, err := m.mountedAt(dir)
	return fsType != "", err
}

// mountedAt is the type of the filesystem mounted exactly at dir (the last one stacked
// there), "" when nothing is.
func (m *Manager) mountedAt(dir string) (string, error) {
	mounts, err := readMountInfo(m.mountInfoPath)
	if err != nil {
		return "", err
	}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	fsType := ""
	for _, mnt := range mounts {
		if mnt.mountPoint == resolved {
			fsType = mnt.fsType
		}
	}
	return fsType, nil
}

// persistentVolumeTypeName is the JSON name of the PV source's set field.
func persistentVolumeTypeName(src *v1.PersistentVolumeSource) string {
	return setFieldName(src)
}
