package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// VolumeCapability describes how a volume is used, from its PersistentVolume.
type VolumeCapability struct {
	// Block is a raw block volume (volumeMode: Block). Only Expand accepts it.
	Block bool
	// FSType is the PV's csi.fsType; empty lets the driver choose.
	FSType string
	// MountFlags are the PV's mountOptions.
	MountFlags []string
	// AccessModes are the PV's access modes. The first is the one sent, as upstream
	// does; none means ReadWriteOnce.
	AccessModes []v1.PersistentVolumeAccessMode
}

// StageRequest asks for a persistent volume to be staged on the node.
type StageRequest struct {
	Driver       string
	VolumeHandle string
	Capability   VolumeCapability
	// PublishContext is the VolumeAttachment's status.attachmentMetadata; nil for
	// drivers that need no attachment.
	PublishContext map[string]string
	// VolumeContext is the PV's csi.volumeAttributes.
	VolumeContext map[string]string
	// Secrets are the contents of the PV's csi.nodeStageSecretRef.
	Secrets map[string]string
	// FSGroup is the pod's fsGroup. It is handed to drivers with the
	// VOLUME_MOUNT_GROUP capability, which apply it themselves.
	FSGroup *int64
	// SELinuxMountContext, when set, is mounted as the "context" mount option and
	// recorded in vol_data.json. Set it when the CSIDriver has seLinuxMount and the
	// pod's volume has an SELinux label, as upstream does.
	SELinuxMountContext string
}

var errBlockUnsupported = errors.New(logf("raw block volumes are not supported"))

// Stage stages a volume at StagingPath when the driver has the STAGE_UNSTAGE_VOLUME
// capability, recording the driver and volume handle in vol_data.json beside it for
// Unstage. Without the capability only the directory is created, as upstream. Stage is
// idempotent, as drivers must make NodeStageVolume. When the driver certainly failed,
// the directory and vol_data.json are removed; when it may have succeeded, the error
// is uncertain (IsUncertain) and they stay.
func (m *Manager) Stage(ctx context.Context, req StageRequest) error {
	if req.Capability.Block {
		return errBlockUnsupported
	}
	if req.Driver == "" || req.VolumeHandle == "" {
		return errors.New(logf("attacher.MountDevice failed, driver name and volume handle are required"))
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	c, err := m.connect(ctx, req.Driver)
	if err != nil {
		return err
	}
	defer c.close()
	staged, err := c.has(ctx, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if err != nil {
		return err
	}
	path := m.StagingPath(req.Driver, req.VolumeHandle)
	if err := mkdirAllWithPathCheck(path); err != nil {
		return fmt.Errorf("%s: %w", logf("attacher.MountDevice failed to create dir %q", path), err)
	}
	if !staged {
		klog.InfoS(logf("attacher.MountDevice STAGE_UNSTAGE_VOLUME capability not set. Skipping MountDevice..."), "driver", req.Driver)
		return nil
	}
	nreq, err := m.stageRequest(ctx, c, req, path)
	if err != nil {
		return err
	}
	if err := writeVolumeData(filepath.Dir(path), stageData(req)); err != nil {
		cleanUpAfterFailure(path)
		return err
	}
	if _, err := c.node.NodeStageVolume(ctx, nreq); err != nil {
		err = classify(err)
		if !IsUncertain(err) {
			cleanUpAfterFailure(path)
		}
		return fmt.Errorf("NodeStageVolume: %w", err)
	}
	return nil
}

func (m *Manager) stageRequest(ctx context.Context, c *driverClient, req StageRequest, path string) (*csipb.NodeStageVolumeRequest, error) {
	mode, err := c.accessModeFor(ctx, req.Capability.AccessModes)
	if err != nil {
		return nil, err
	}
	mountGroup, err := c.mountGroup(ctx, req.FSGroup)
	if err != nil {
		return nil, err
	}
	flags := withSELinuxContext(req.Capability.MountFlags, req.SELinuxMountContext)
	return &csipb.NodeStageVolumeRequest{
		VolumeId:          req.VolumeHandle,
		PublishContext:    req.PublishContext,
		StagingTargetPath: path,
		VolumeCapability:  volumeCapability(mode, false, req.Capability.FSType, flags, mountGroup),
		Secrets:           req.Secrets,
		VolumeContext:     req.VolumeContext,
	}, nil
}

// stageData is the staged vol_data.json: enough for Unstage to find the driver and
// volume without any spec.
func stageData(req StageRequest) map[string]string {
	data := map[string]string{keyVolumeHandle: req.VolumeHandle, keyDriverName: req.Driver}
	if req.SELinuxMountContext != "" {
		data[keySELinuxMountContext] = req.SELinuxMountContext
	}
	return data
}

// mountGroup returns the fsGroup to hand the driver: only drivers with the
// VOLUME_MOUNT_GROUP capability get it; for the others the kubelet applies it.
func (c *driverClient) mountGroup(ctx context.Context, fsGroup *int64) (*int64, error) {
	ok, err := c.has(ctx, csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP)
	if err != nil || !ok {
		return nil, err
	}
	klog.V(3).InfoS("Driver supports applying FSGroup (has VOLUME_MOUNT_GROUP node capability); delegating it to the driver", "driver", c.name)
	return fsGroup, nil
}

// withSELinuxContext appends the SELinux context mount option, quoted because
// contexts contain commas, to a copy of flags.
func withSELinuxContext(flags []string, context string) []string {
	if context == "" {
		return flags
	}
	return append(append([]string(nil), flags...), fmt.Sprintf("context=%q", context))
}

// Unstage unstages a volume staged by Stage (or by upstream's kubelet), finding the
// driver in the staged vol_data.json, and removes the staging directory, vol_data.json
// and their parent. It is idempotent: nothing staged, or a driver answering NOT_FOUND,
// is success. Without vol_data.json (a driver without STAGE_UNSTAGE_VOLUME) only the
// empty directories are removed, where upstream leaves them behind.
func (m *Manager) Unstage(ctx context.Context, driver, volumeHandle string) error {
	path := m.StagingPath(driver, volumeHandle)
	data, err := readVolumeData(filepath.Dir(path))
	if errors.Is(err, fs.ErrNotExist) {
		klog.V(4).InfoS(logf("attacher.UnmountDevice: no volume data file, nothing to unstage"), "path", path)
		return removeMountDir(path)
	}
	if err != nil {
		return err
	}
	if data.DriverName != "" {
		driver = data.DriverName
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	c, err := m.connect(ctx, driver)
	if err != nil {
		return err
	}
	defer c.close()
	staged, err := c.has(ctx, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	if err != nil {
		return fmt.Errorf("%s: %w", logf("attacher.UnmountDevice failed to check whether STAGE_UNSTAGE_VOLUME set"), err)
	}
	if staged {
		if err := unstageVolume(ctx, c, data.VolumeHandle, path); err != nil {
			return err
		}
	}
	return removeMountDir(path)
}

func unstageVolume(ctx context.Context, c *driverClient, volumeHandle, path string) error {
	_, err := c.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: volumeHandle, StagingTargetPath: path})
	if isNotFound(err) {
		klog.V(2).InfoS(logf("Driver does not know the volume any more, treating it as unstaged"), "volumeHandle", volumeHandle, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", logf("attacher.UnmountDevice failed"), err)
	}
	return nil
}
