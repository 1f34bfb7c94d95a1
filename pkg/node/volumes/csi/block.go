package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	utilstrings "k8s.io/utils/strings"

	"github.com/nodelet/nodelet/pkg/node/volumes/mountpoint"

	"k8s.io/klog/v2"
)

// Raw block volumes (volumeMode: Block) live in upstream's layout under
// plugins/kubernetes.io/csi/volumeDevices: staging/<pv> is the staging path,
// publish/<pv>/<pod UID> the file the driver publishes the device on,
// <pv>/data/vol_data.json names the driver and volume, and <pv>/dev/<pod UID> is a bind
// mount of the published device that keeps it referenced while the pod has it. The pod
// sees pods/<uid>/volumeDevices/kubernetes.io~csi/<pv>, a symlink to the published
// device, which is what the runtime is given.
const volumeDevicesDir = "volumeDevices"

func (m *Manager) blockDir() string { return filepath.Join(m.pluginDir(), volumeDevicesDir) }

// BlockStagingPath is where a raw block volume is staged.
func (m *Manager) BlockStagingPath(specName string) string {
	return filepath.Join(m.blockDir(), "staging", specName)
}

func (m *Manager) blockPublishDir(specName string) string {
	return filepath.Join(m.blockDir(), "publish", specName)
}

func (m *Manager) blockPublishPath(specName, podUID string) string {
	return filepath.Join(m.blockPublishDir(specName), podUID)
}

func (m *Manager) blockVolumeDir(specName string) string {
	return filepath.Join(m.blockDir(), utilstrings.EscapeQualifiedName(specName))
}

// BlockDevicePath is the pod's link to its published raw block volume: the host path
// the runtime maps into the containers.
func (m *Manager) BlockDevicePath(podUID, specName string) string {
	return filepath.Join(m.podBlockDir(podUID), specName)
}

// podBlockDir holds the pod's links to its raw block volumes.
func (m *Manager) podBlockDir(podUID string) string {
	return filepath.Join(m.podsDir(), podUID, "volumeDevices", escapedPluginName)
}

// BlockRequest asks for a persistent raw block volume to be staged and published for a
// pod. The capability's access modes are used; its Block flag is implied.
type BlockRequest struct {
	Stage    StageRequest
	PodUID   string
	Spec     string // the PersistentVolume's name
	ReadOnly bool
	// Secrets and VolumeContext of the publish (the stage's are in Stage).
	PublishSecrets, PublishContext, VolumeContext map[string]string
	// PodInfo, when the CSIDriver has podInfoOnMount, is added to the publish's
	// volume context.
	PodInfo *PodInfo
}

// SetUpBlock stages the raw block volume (when the driver has STAGE_UNSTAGE_VOLUME),
// publishes it for the pod and links it into the pod's volumeDevices directory, as
// upstream's csiBlockMapper and MapBlockVolume do; it returns the pod's device path.
// Every step is idempotent: a volume set up before (by nodelet or upstream's kubelet) is
// asked again, which drivers answer as a no-op.
func (m *Manager) SetUpBlock(ctx context.Context, req BlockRequest) (string, error) {
	if req.Stage.Driver == "" || req.Stage.VolumeHandle == "" || req.PodUID == "" || req.Spec == "" {
		return "", errors.New(logf("blockMapper.SetUpDevice failed, driver, volume handle, pod UID and spec name are required"))
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	c, err := m.connect(ctx, req.Stage.Driver)
	if err != nil {
		return "", err
	}
	defer c.close()
	mode, err := c.accessModeFor(ctx, req.Stage.Capability.AccessModes)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(m.blockDataDir(req.Spec), dirPerm); err != nil {
		return "", err
	}
	if err := writeVolumeData(m.blockDataDir(req.Spec), blockData(req, m.nodeName)); err != nil {
		return "", err
	}
	staging, err := m.stageBlock(ctx, c, req, mode)
	if err != nil {
		return "", err
	}
	publish, err := m.publishBlock(ctx, c, req, mode, staging)
	if err != nil {
		return "", err
	}
	return m.mapBlock(publish, req.PodUID, req.Spec)
}

func (m *Manager) blockDataDir(specName string) string {
	return filepath.Join(m.blockVolumeDir(specName), "data")
}

// blockData is upstream's vol_data.json of a block volume.
func blockData(req BlockRequest, nodeName string) map[string]string {
	return map[string]string{keySpecVolID: req.Spec, keyVolumeHandle: req.Stage.VolumeHandle, keyDriverName: req.Stage.Driver,
		keyNodeName: nodeName, keyAttachmentID: AttachmentName(req.Stage.VolumeHandle, req.Stage.Driver, nodeName)}
}

// stageBlock is NodeStageVolume for a block volume; "" when the driver does not stage.
func (m *Manager) stageBlock(ctx context.Context, c *driverClient, req BlockRequest, mode csipb.VolumeCapability_AccessMode_Mode) (string, error) {
	staged, err := c.has(ctx, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if err != nil {
		return "", fmt.Errorf("%s: %w", logf("blockMapper.stageVolumeForBlock failed to check STAGE_UNSTAGE_VOLUME capability"), err)
	}
	if !staged {
		klog.InfoS(logf("blockMapper.stageVolumeForBlock STAGE_UNSTAGE_VOLUME capability not set. Skipping MountDevice..."), "driver", req.Stage.Driver)
		return "", nil
	}
	path := m.BlockStagingPath(req.Spec)
	if err := os.MkdirAll(path, dirPerm); err != nil {
		return "", fmt.Errorf("%s: %w", logf("blockMapper.stageVolumeForBlock failed to create dir %s", path), err)
	}
	_, err = c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: req.Stage.VolumeHandle,
		PublishContext: req.Stage.PublishContext, StagingTargetPath: path, VolumeCapability: volumeCapability(mode, true, "", nil, nil),
		Secrets: req.Stage.Secrets, VolumeContext: req.Stage.VolumeContext})
	if err != nil {
		return "", fmt.Errorf("NodeStageVolume: %w", classify(err))
	}
	return path, nil
}

// publishBlock is NodePublishVolume for a block volume: the driver makes the publish
// path (a file) the device.
func (m *Manager) publishBlock(ctx context.Context, c *driverClient, req BlockRequest, mode csipb.VolumeCapability_AccessMode_Mode, staging string) (string, error) {
	path := m.blockPublishPath(req.Spec, req.PodUID)
	if err := os.MkdirAll(filepath.Dir(path), dirPerm); err != nil {
		return "", fmt.Errorf("%s: %w", logf("blockMapper.publishVolumeForBlock failed to create dir %s", filepath.Dir(path)), err)
	}
	volumeContext := maps.Clone(req.VolumeContext)
	if req.PodInfo != nil {
		volumeContext = merge(volumeContext, podInfoAttributes(req.PodInfo, false))
	}
	_, err := c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: req.Stage.VolumeHandle,
		PublishContext: req.PublishContext, StagingTargetPath: staging, TargetPath: path,
		VolumeCapability: volumeCapability(mode, true, "", nil, nil), Readonly: req.ReadOnly,
		Secrets: req.PublishSecrets, VolumeContext: volumeContext})
	if err != nil {
		return "", fmt.Errorf("NodePublishVolume: %w", classify(err))
	}
	return path, nil
}

// mapBlock bind-mounts the published device on <pv>/dev/<pod UID> and links it from the
// pod's volumeDevices directory (upstream's MapBlockVolume, without its loop-device
// descriptor lock).
func (m *Manager) mapBlock(publish, podUID, specName string) (string, error) {
	global := filepath.Join(m.blockVolumeDir(specName), "dev", podUID)
	if err := bindFile(publish, global); err != nil {
		return "", fmt.Errorf("%s: %w", logf("blockMapper.MapPodDevice failed to map %s", publish), err)
	}
	link := m.BlockDevicePath(podUID, specName)
	if err := os.MkdirAll(filepath.Dir(link), dirPerm); err != nil {
		return "", err
	}
	if target, err := os.Readlink(link); err == nil && target == publish {
		return link, nil
	}
	_ = os.Remove(link)
	if err := os.Symlink(publish, link); err != nil {
		return "", fmt.Errorf("%s: %w", logf("blockMapper.MapPodDevice failed to link %s", link), err)
	}
	return link, nil
}

// bindFile bind-mounts the file src on dst (created empty), unless dst is mounted.
func bindFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), dirPerm); err != nil {
		return err
	}
	if mounted, err := isMountRoot(dst); err != nil || mounted {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	return unix.Mount(src, dst, "", unix.MS_BIND, "")
}

// BlockMapped is a raw block volume linked into a pod.
type BlockMapped struct {
	PodUID, SpecName string
	Data             VolumeData
	DataErr          error
}

// ListBlockMapped lists the raw block volumes linked into pods
// (pods/*/volumeDevices/kubernetes.io~csi/*), with their vol_data.json.
func (m *Manager) ListBlockMapped() ([]BlockMapped, error) {
	pods, err := readDirNames(m.podsDir())
	if err != nil {
		return nil, err
	}
	var out []BlockMapped
	for _, pod := range pods {
		entries, err := os.ReadDir(m.podBlockDir(pod))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			b := BlockMapped{PodUID: pod, SpecName: e.Name()}
			b.Data, b.DataErr = readVolumeData(m.blockDataDir(e.Name()))
			out = append(out, b)
		}
	}
	return out, nil
}

// TearDownBlock unlinks a pod's raw block volume, unmaps it and asks the driver to
// unpublish it; once no pod has it published any more, the volume is unstaged and its
// directories go. It is idempotent.
func (m *Manager) TearDownBlock(ctx context.Context, podUID, specName string) error {
	if err := os.Remove(m.BlockDevicePath(podUID, specName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	data, err := readVolumeData(m.blockDataDir(specName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // nothing left of the volume: torn down before
	}
	if err != nil {
		return err
	}
	global := filepath.Join(m.blockVolumeDir(specName), "dev", podUID)
	if err := unmountAndRemoveFile(global); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	c, err := m.connect(ctx, data.DriverName)
	if err != nil {
		return err
	}
	defer c.close()
	publish := m.blockPublishPath(specName, podUID)
	if err := unpublishVolume(ctx, c, data.VolumeHandle, publish, "blockMapper.unpublishVolumeForBlock failed"); err != nil {
		return err
	}
	if err := unmountAndRemoveFile(publish); err != nil {
		return err
	}
	if hasEntries(m.blockPublishDir(specName)) {
		return nil // another pod still has it
	}
	return m.unstageBlock(ctx, c, data, specName)
}

// unstageBlock is NodeUnstageVolume of a block volume no pod has any more, then the
// removal of its directories.
func (m *Manager) unstageBlock(ctx context.Context, c *driverClient, data VolumeData, specName string) error {
	staged, err := c.has(ctx, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if err != nil {
		return err
	}
	path := m.BlockStagingPath(specName)
	if staged {
		if err := unstageVolume(ctx, c, data.VolumeHandle, path); err != nil {
			return err
		}
	}
	for _, p := range []string{path, m.blockPublishDir(specName), m.blockVolumeDir(specName)} {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}

// unmountAndRemoveFile unmounts a bind-mounted file if it is mounted, then removes it.
func unmountAndRemoveFile(path string) error {
	if mounted, err := isMountRoot(path); err != nil {
		return err
	} else if mounted {
		if err := unix.Unmount(path, 0); err != nil {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// isMountRoot reports whether path is the root of a mount: a bind-mounted file is, even
// from the same filesystem (which isMountPoint's device comparison misses). statx says
// so since Linux 5.8; older kernels fall back to isMountPoint.
func isMountRoot(path string) (bool, error) {
	root, known, err := mountpoint.Root(path, false)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil || known {
		return root, err
	}
	return isMountPoint(path)
}

// hasEntries reports whether dir has any entry at all (files included).
func hasEntries(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) > 0
}
