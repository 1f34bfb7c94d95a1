package csi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"strconv"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/node/volumes/ownership"
)

// The volume context keys the kubelet adds for drivers that ask for them.
const (
	attrPodName            = "csi.storage.k8s.io/pod.name"
	attrPodNamespace       = "csi.storage.k8s.io/pod.namespace"
	attrPodUID             = "csi.storage.k8s.io/pod.uid"
	attrServiceAccountName = "csi.storage.k8s.io/serviceAccount.name"
	attrEphemeral          = "csi.storage.k8s.io/ephemeral"
	attrTokens             = "csi.storage.k8s.io/serviceAccount.tokens"
)

// PodInfo is the pod a volume is published for, as drivers with podInfoOnMount see it.
type PodInfo struct {
	Name, Namespace, UID, ServiceAccountName string
}

// PublishRequest asks for a volume to be published into a pod's volume directory.
type PublishRequest struct {
	Driver string
	// VolumeHandle is the PV's csi.volumeHandle; for an inline volume,
	// EphemeralVolumeHandle(podUID, volumeName).
	VolumeHandle string
	PodUID       string
	// SpecName is the PV's name, or the pod's volume name for an inline volume.
	SpecName string
	// Ephemeral marks an inline CSI volume of the pod (volumeLifecycleMode
	// Ephemeral): never staged, no publish context, mounted ReadWriteOnce without
	// mount flags.
	Ephemeral bool
	ReadOnly  bool
	// Capability describes the volume; for an inline volume only FSType counts.
	Capability VolumeCapability
	// PublishContext is the VolumeAttachment's status.attachmentMetadata.
	PublishContext map[string]string
	// VolumeContext is the PV's csi.volumeAttributes or the inline volume's
	// volumeAttributes. It is not modified.
	VolumeContext map[string]string
	// Secrets are the contents of the nodePublishSecretRef.
	Secrets map[string]string
	// PodInfo, set when the CSIDriver has podInfoOnMount, adds the pod's name,
	// namespace, UID, service account and whether the volume is ephemeral to the
	// volume context.
	PodInfo *PodInfo
	// ServiceAccountTokens are the tokens requested for the CSIDriver's
	// tokenRequests, by audience. They are handed over in the volume context, or in
	// the secrets when TokensInSecrets (the CSIDriver's serviceAccountTokenInSecrets).
	ServiceAccountTokens map[string]authenticationv1.TokenRequestStatus
	TokensInSecrets      bool
	// FSGroup is the pod's fsGroup: handed to drivers with VOLUME_MOUNT_GROUP,
	// otherwise applied by Publish after mounting when FSGroupPolicy says so.
	FSGroup *int64
	// FSGroupPolicy is the CSIDriver's fsGroupPolicy; empty is the default for a
	// driver without CSIDriver object, ReadWriteOnceWithFSType.
	FSGroupPolicy       storagev1.FSGroupPolicy
	FSGroupChangePolicy *v1.PodFSGroupChangePolicy
	// SELinuxMountContext: see StageRequest.
	SELinuxMountContext string
	// Remount is a publish of a volume already published to the pod (the CSIDriver
	// requiresRepublish) or reconstructed after a restart: a failure then leaves the
	// target directory alone, since the pod may be using it.
	Remount bool
}

// Publish publishes a volume at TargetPath(PodUID, SpecName) and returns that path.
// It creates the target's parent and writes vol_data.json there for Unpublish; the
// driver creates the target itself. The staging path is passed when the driver has
// STAGE_UNSTAGE_VOLUME, so persistent volumes must have been staged first.
//
// When the driver certainly failed, the directories and vol_data.json are removed
// (unless Remount); an uncertain failure (IsUncertain) leaves them for Unpublish. When
// the kubelet has to apply the fsGroup (no VOLUME_MOUNT_GROUP capability and the
// policy says so), Publish changes the volume's ownership recursively; a failure there
// is uncertain, as the volume is mounted. SELinux relabeling is the caller's.
func (m *Manager) Publish(ctx context.Context, req PublishRequest) (string, error) {
	if err := validatePublish(req); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	c, err := m.connect(ctx, req.Driver)
	if err != nil {
		return "", err
	}
	defer c.close()
	dir := m.TargetPath(req.PodUID, req.SpecName)
	nreq, err := m.publishRequest(ctx, c, req, dir)
	if err != nil {
		return "", err
	}
	if err := mkdirAllWithPathCheck(filepath.Dir(dir)); err != nil {
		return "", fmt.Errorf("%s: %w", logf("mounter.SetUpAt failed to create dir %q", filepath.Dir(dir)), err)
	}
	if err := writeVolumeData(filepath.Dir(dir), m.publishData(req)); err != nil {
		cleanUpAfterFailure(dir)
		return "", err
	}
	if _, err := c.node.NodePublishVolume(ctx, nreq); err != nil {
		err = classify(err)
		if !IsUncertain(err) && !req.Remount {
			cleanUpAfterFailure(dir)
		}
		return "", fmt.Errorf("NodePublishVolume: %w", err)
	}
	// A driver handed the fsGroup (VOLUME_MOUNT_GROUP) has applied it itself.
	if nreq.GetVolumeCapability().GetMount().GetVolumeMountGroup() == "" && kubeletAppliesFSGroup(req) {
		if err := ownership.Set(dir, req.FSGroup, req.FSGroupChangePolicy, req.ReadOnly); err != nil {
			return "", &uncertainError{err: fmt.Errorf("applyFSGroup failed for vol %s: %w", req.VolumeHandle, err)}
		}
	}
	return dir, nil
}

func validatePublish(req PublishRequest) error {
	switch {
	case req.Capability.Block:
		return errBlockUnsupported
	case req.Driver == "", req.VolumeHandle == "", req.PodUID == "", req.SpecName == "":
		return errors.New(logf("mounter.SetUpAt failed, driver, volume handle, pod UID and spec name are required"))
	}
	return nil
}

func (m *Manager) publishRequest(ctx context.Context, c *driverClient, req PublishRequest, dir string) (*csipb.NodePublishVolumeRequest, error) {
	modes, flags, publishContext := req.Capability.AccessModes, req.Capability.MountFlags, req.PublishContext
	stagingPath := ""
	if req.Ephemeral {
		modes, flags, publishContext = nil, nil, nil
	} else {
		staged, err := c.has(ctx, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", logf("mounter.SetUpAt failed to check for STAGE_UNSTAGE_VOLUME capability"), err)
		}
		if staged {
			stagingPath = m.StagingPath(req.Driver, req.VolumeHandle)
		}
	}
	mode, err := c.accessModeFor(ctx, modes)
	if err != nil {
		return nil, err
	}
	mountGroup, err := c.mountGroup(ctx, req.FSGroup)
	if err != nil {
		return nil, err
	}
	volumeContext, secrets, err := publishAttributes(req)
	if err != nil {
		return nil, err
	}
	flags = withSELinuxContext(flags, req.SELinuxMountContext)
	return &csipb.NodePublishVolumeRequest{
		VolumeId:          req.VolumeHandle,
		PublishContext:    publishContext,
		StagingTargetPath: stagingPath,
		TargetPath:        dir,
		VolumeCapability:  volumeCapability(mode, false, req.Capability.FSType, flags, mountGroup),
		Readonly:          req.ReadOnly,
		Secrets:           secrets,
		VolumeContext:     volumeContext,
	}, nil
}

// publishAttributes merges pod information and service account tokens into copies of
// the volume context and secrets.
func publishAttributes(req PublishRequest) (volumeContext, secrets map[string]string, err error) {
	volumeContext, secrets = maps.Clone(req.VolumeContext), maps.Clone(req.Secrets)
	if req.PodInfo != nil {
		volumeContext = merge(volumeContext, podInfoAttributes(req.PodInfo, req.Ephemeral))
	}
	if len(req.ServiceAccountTokens) == 0 {
		return volumeContext, secrets, nil
	}
	tokens, err := json.Marshal(req.ServiceAccountTokens)
	if err != nil {
		return nil, nil, err
	}
	if req.TokensInSecrets {
		secrets = merge(secrets, map[string]string{attrTokens: string(tokens)})
	} else {
		volumeContext = merge(volumeContext, map[string]string{attrTokens: string(tokens)})
	}
	return volumeContext, secrets, nil
}

// podInfoAttributes are the volume context keys of podInfoOnMount.
func podInfoAttributes(pi *PodInfo, ephemeral bool) map[string]string {
	return map[string]string{
		attrPodName:            pi.Name,
		attrPodNamespace:       pi.Namespace,
		attrPodUID:             pi.UID,
		attrServiceAccountName: pi.ServiceAccountName,
		attrEphemeral:          strconv.FormatBool(ephemeral),
	}
}

func merge(into, from map[string]string) map[string]string {
	if into == nil {
		into = map[string]string{}
	}
	maps.Copy(into, from)
	return into
}

// publishData is the pod's vol_data.json: what Unpublish and a restarted kubelet need
// to find the volume's driver and spec.
func (m *Manager) publishData(req PublishRequest) map[string]string {
	mode := lifecyclePersistent
	if req.Ephemeral {
		mode = lifecycleEphemeral
	}
	data := map[string]string{
		keySpecVolID:           req.SpecName,
		keyVolumeHandle:        req.VolumeHandle,
		keyDriverName:          req.Driver,
		keyNodeName:            m.nodeName,
		keyVolumeLifecycleMode: mode,
		keyAttachmentID:        AttachmentName(req.VolumeHandle, req.Driver, m.nodeName),
	}
	if req.SELinuxMountContext != "" {
		data[keySELinuxMountContext] = req.SELinuxMountContext
	}
	return data
}

// kubeletAppliesFSGroup is upstream's supportsFSGroup: whether the fsGroup policy has
// the kubelet change the volume's ownership. The default policy only does so for
// volumes with a filesystem type, written by one node.
func kubeletAppliesFSGroup(req PublishRequest) bool {
	policy := req.FSGroupPolicy
	if policy == "" {
		policy = storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy
	}
	switch {
	case req.FSGroup == nil || policy == storagev1.NoneFSGroupPolicy || req.ReadOnly:
		return false
	case policy == storagev1.FileFSGroupPolicy:
		return true
	case req.Capability.FSType == "":
		return false
	case req.Ephemeral:
		// Inline volumes are always published ReadWriteOnce.
		return true
	}
	for _, mode := range req.Capability.AccessModes {
		if mode == v1.ReadWriteOnce || mode == v1.ReadWriteOncePod {
			return true
		}
	}
	return false
}

// Unpublish unpublishes a pod's volume, finding its driver and handle in the pod's
// vol_data.json, and removes the target directory (when the driver left it unmounted
// and empty), vol_data.json and their parent. It is idempotent: nothing published, or
// a driver answering NOT_FOUND, is success. A target left without vol_data.json is
// removed when it is not mounted and an error otherwise, as nobody knows its driver.
func (m *Manager) Unpublish(ctx context.Context, podUID, specName string) error {
	dir := m.TargetPath(podUID, specName)
	data, err := readVolumeData(filepath.Dir(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return removeOrphanTarget(dir, err)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	c, err := m.connect(ctx, data.DriverName)
	if err != nil {
		return err
	}
	defer c.close()
	if err := unpublishVolume(ctx, c, data.VolumeHandle, dir, "Unmounter.TearDownAt failed"); err != nil {
		return err
	}
	// The driver must remove the target; some don't, so an unmounted, empty one is
	// removed here, as upstream does.
	return removeMountDir(dir)
}

// unpublishVolume is NodeUnpublishVolume; a driver that no longer knows the volume has
// it unpublished. failure words the error as upstream's caller does.
func unpublishVolume(ctx context.Context, c *driverClient, volumeHandle, target, failure string) error {
	_, err := c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: volumeHandle, TargetPath: target})
	switch {
	case isNotFound(err):
		klog.V(2).InfoS(logf("Driver does not know the volume any more, treating it as unpublished"), "volumeHandle", volumeHandle, "err", err)
	case err != nil:
		return fmt.Errorf("%s: %w", logf("%s", failure), err)
	}
	return nil
}

// removeOrphanTarget cleans up a target without vol_data.json.
func removeOrphanTarget(dir string, dataErr error) error {
	mounted, err := isMountPoint(dir)
	if err != nil {
		return err
	}
	if mounted {
		return fmt.Errorf("%s: %w", logf("unmounter failed to find the volume of mounted dir [%s]", dir), dataErr)
	}
	return removeMountDir(dir)
}
