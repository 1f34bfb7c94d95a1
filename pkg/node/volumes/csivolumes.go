package volumes

import (
	"context"
	"errors"
	"fmt"
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/node/volumes/csi"
)

// CSIObjects are the API objects a CSI volume needs beyond its claim: the driver's
// CSIDriver object (nil, nil when there is none), and for an attachable driver's volume
// the node's status.volumesAttached and the VolumeAttachment it waits for.
type CSIObjects interface {
	GetCSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error)
	GetVolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error)
	AttachedVolumes(ctx context.Context, nodeName string) ([]v1.AttachedVolume, error)
}

// SetCSI gives the manager the node's CSI drivers and the objects their volumes need.
func (m *Manager) SetCSI(drivers *csi.Manager, objects CSIObjects, nodeName string) {
	m.csi, m.csiObjects, m.nodeName = drivers, objects, nodeName
}

// csiDriverInfo is what a CSIDriver object says of its volumes, with upstream's defaults
// for a driver without one.
type csiDriverInfo struct {
	name           string
	found          bool // the CSIDriver object exists
	attachRequired bool
	podInfoOnMount bool
	fsGroupPolicy  storagev1.FSGroupPolicy
	modes          []storagev1.VolumeLifecycleMode
	// tokenRequests are the service-account tokens the driver is given at publish, in
	// the secrets when tokensInSecrets; requiresRepublish has them (and the volume)
	// published again at every sync of the pod, as upstream's remount.
	tokenRequests     []storagev1.TokenRequest
	tokensInSecrets   bool
	requiresRepublish bool
}

func (m *Manager) csiDriverInfo(ctx context.Context, name string) (csiDriverInfo, error) {
	info := csiDriverInfo{name: name, attachRequired: true, fsGroupPolicy: storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy,
		modes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}}
	d, err := m.csiObjects.GetCSIDriver(ctx, name)
	if err != nil {
		return info, fmt.Errorf("failed to get CSIDriver %s: %w", name, err)
	}
	defer func() { m.inUse.noteDriver(name, info.attachRequired) }()
	if d == nil {
		return info, nil
	}
	info.found = true
	if d.Spec.AttachRequired != nil {
		info.attachRequired = *d.Spec.AttachRequired
	}
	if d.Spec.PodInfoOnMount != nil {
		info.podInfoOnMount = *d.Spec.PodInfoOnMount
	}
	if d.Spec.FSGroupPolicy != nil {
		info.fsGroupPolicy = *d.Spec.FSGroupPolicy
	}
	if len(d.Spec.VolumeLifecycleModes) > 0 {
		info.modes = d.Spec.VolumeLifecycleModes
	}
	info.tokenRequests = d.Spec.TokenRequests
	info.tokensInSecrets = d.Spec.ServiceAccountTokenInSecrets != nil && *d.Spec.ServiceAccountTokenInSecrets
	info.requiresRepublish = d.Spec.RequiresRepublish != nil && *d.Spec.RequiresRepublish
	return info, nil
}

// supports checks the volume's lifecycle mode against the CSIDriver's, with upstream's
// messages: without a CSIDriver object a driver supports persistent volumes only.
func (i csiDriverInfo) supports(mode storagev1.VolumeLifecycleMode) error {
	if slices.Contains(i.modes, mode) {
		return nil
	}
	if !i.found {
		return fmt.Errorf("volume mode %q not supported by driver %s (no CSIDriver object)", mode, i.name)
	}
	return fmt.Errorf("volume mode %q not supported by driver %s (only supports %q)", mode, i.name, i.modes)
}

// setUpCSIPersistent stages the persistent volume (once per node) and publishes it into
// the pod's directory, after its VolumeAttachment is attached when the driver needs one.
// remount publishes a volume the pod has again (requiresRepublish): no staging then. It
// returns the publish path and whether the driver wants the volume republished.
func (m *Manager) setUpCSIPersistent(ctx context.Context, pod *v1.Pod, pv *v1.PersistentVolume, readOnly, remount bool) (string, bool, error) {
	if m.csi == nil {
		return "", false, errNoAPI
	}
	src := pv.Spec.CSI
	info, publishContext, err := m.prepareCSIPersistent(ctx, pod, src)
	if err != nil {
		return "", false, err
	}
	capability := csi.VolumeCapability{FSType: src.FSType, MountFlags: pv.Spec.MountOptions, AccessModes: pv.Spec.AccessModes}
	if !remount {
		if err := m.stageCSI(ctx, pod, pv, capability, publishContext); err != nil {
			return "", false, err
		}
	}
	publishSecrets, err := m.secretData(ctx, src.NodePublishSecretRef)
	if err != nil {
		return "", false, err
	}
	tokens, err := m.csiTokens(ctx, pod, info)
	if err != nil {
		return "", false, err
	}
	path, err := m.csi.Publish(ctx, csi.PublishRequest{Driver: src.Driver, VolumeHandle: src.VolumeHandle, PodUID: string(pod.UID),
		SpecName: pv.Name, ReadOnly: readOnly || src.ReadOnly, Capability: capability, PublishContext: publishContext,
		VolumeContext: src.VolumeAttributes, Secrets: publishSecrets, PodInfo: podInfo(pod, info),
		ServiceAccountTokens: tokens, TokensInSecrets: info.tokensInSecrets, Remount: remount,
		FSGroup: podFSGroup(pod), FSGroupPolicy: info.fsGroupPolicy, FSGroupChangePolicy: podFSGroupChangePolicy(pod)})
	return path, info.requiresRepublish, err
}

// stageCSI stages a persistent volume with its node-stage secret.
func (m *Manager) stageCSI(ctx context.Context, pod *v1.Pod, pv *v1.PersistentVolume, capability csi.VolumeCapability, publishContext map[string]string) error {
	src := pv.Spec.CSI
	stageSecrets, err := m.secretData(ctx, src.NodeStageSecretRef)
	if err != nil {
		return err
	}
	if err := m.csi.Stage(ctx, csi.StageRequest{Driver: src.Driver, VolumeHandle: src.VolumeHandle, Capability: capability,
		PublishContext: publishContext, VolumeContext: src.VolumeAttributes, Secrets: stageSecrets, FSGroup: podFSGroup(pod)}); err != nil {
		return fmt.Errorf("MountVolume.MountDevice failed for volume %q : %w", pv.Name, err)
	}
	return nil
}

// csiTokens are the service-account tokens the CSIDriver's tokenRequests ask for, bound
// to the pod, by audience (upstream's podServiceAccountTokenAttrs).
func (m *Manager) csiTokens(ctx context.Context, pod *v1.Pod, info csiDriverInfo) (map[string]authenticationv1.TokenRequestStatus, error) {
	if len(info.tokenRequests) == 0 {
		return nil, nil
	}
	account := pod.Spec.ServiceAccountName
	if account == "" {
		account = "default"
	}
	out := make(map[string]authenticationv1.TokenRequestStatus, len(info.tokenRequests))
	for _, r := range info.tokenRequests {
		audiences := []string{}
		if r.Audience != "" {
			audiences = []string{r.Audience}
		}
		tr, err := m.api.Tokens.GetServiceAccountToken(ctx, pod.Namespace, account, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: r.ExpirationSeconds,
				BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}})
		if err != nil {
			return nil, err
		}
		out[r.Audience] = tr.Status
	}
	return out, nil
}

// prepareCSIPersistent reads the driver's CSIDriver and, for an attachable driver, waits
// for the volume to be attached; it returns the attachment's publish context.
func (m *Manager) prepareCSIPersistent(ctx context.Context, pod *v1.Pod, src *v1.CSIPersistentVolumeSource) (csiDriverInfo, map[string]string, error) {
	info, err := m.csiDriverInfo(ctx, src.Driver)
	if err != nil {
		return info, nil, err
	}
	if err := info.supports(storagev1.VolumeLifecyclePersistent); err != nil {
		return info, nil, err
	}
	if !info.attachRequired {
		return info, nil, nil
	}
	publishContext, err := m.waitForAttach(ctx, pod.UID, src)
	return info, publishContext, err
}

// setUpCSIBlock stages and publishes a raw block volume (volumeMode: Block) and links it
// into the pod's volumeDevices directory; it returns the link, the device's host path.
func (m *Manager) setUpCSIBlock(ctx context.Context, pod *v1.Pod, pv *v1.PersistentVolume, readOnly bool) (string, error) {
	if m.csi == nil {
		return "", errNoAPI
	}
	src := pv.Spec.CSI
	info, publishContext, err := m.prepareCSIPersistent(ctx, pod, src)
	if err != nil {
		return "", err
	}
	stageSecrets, err := m.secretData(ctx, src.NodeStageSecretRef)
	if err != nil {
		return "", err
	}
	publishSecrets, err := m.secretData(ctx, src.NodePublishSecretRef)
	if err != nil {
		return "", err
	}
	path, err := m.csi.SetUpBlock(ctx, csi.BlockRequest{
		Stage: csi.StageRequest{Driver: src.Driver, VolumeHandle: src.VolumeHandle, PublishContext: publishContext,
			VolumeContext: src.VolumeAttributes, Secrets: stageSecrets,
			Capability: csi.VolumeCapability{Block: true, AccessModes: pv.Spec.AccessModes}},
		PodUID: string(pod.UID), Spec: pv.Name, ReadOnly: readOnly || src.ReadOnly,
		PublishSecrets: publishSecrets, PublishContext: publishContext, VolumeContext: src.VolumeAttributes, PodInfo: podInfo(pod, info)})
	if err != nil {
		return "", fmt.Errorf("MapVolume.SetUpDevice failed for volume %q : %w", pv.Name, err)
	}
	return path, nil
}

// isBlock says whether the persistent volume is a raw block one.
func isBlock(pv *v1.PersistentVolume) bool {
	return pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock
}

// setUpCSIInline publishes a pod's inline (ephemeral) CSI volume; it is never staged.
func (m *Manager) setUpCSIInline(ctx context.Context, pod *v1.Pod, vol *v1.Volume) error {
	if m.csi == nil {
		return errNoAPI
	}
	cm, mounted := m.claims.get(pod.UID, vol.Name)
	if mounted && cm.csi && !cm.republish {
		return nil
	}
	src := vol.CSI
	info, err := m.csiDriverInfo(ctx, src.Driver)
	if err != nil {
		return err
	}
	if err := info.supports(storagev1.VolumeLifecycleEphemeral); err != nil {
		return err
	}
	secrets, err := m.secretData(ctx, localSecretRef(pod, src.NodePublishSecretRef))
	if err != nil {
		return err
	}
	readOnly := src.ReadOnly != nil && *src.ReadOnly
	fsType := ""
	if src.FSType != nil {
		fsType = *src.FSType
	}
	tokens, err := m.csiTokens(ctx, pod, info)
	if err != nil {
		return err
	}
	path, err := m.csi.Publish(ctx, csi.PublishRequest{Driver: src.Driver, VolumeHandle: csi.EphemeralVolumeHandle(string(pod.UID), vol.Name),
		PodUID: string(pod.UID), SpecName: vol.Name, Ephemeral: true, ReadOnly: readOnly, Capability: csi.VolumeCapability{FSType: fsType},
		VolumeContext: src.VolumeAttributes, Secrets: secrets, PodInfo: podInfo(pod, info), FSGroup: podFSGroup(pod),
		ServiceAccountTokens: tokens, TokensInSecrets: info.tokensInSecrets, Remount: mounted,
		FSGroupPolicy: info.fsGroupPolicy, FSGroupChangePolicy: podFSGroupChangePolicy(pod)})
	if err != nil {
		return err
	}
	m.claims.set(pod.UID, vol.Name, claimMount{path: path, readOnly: readOnly, pvName: vol.Name, csi: true, republish: info.requiresRepublish})
	return nil
}

// attachment is the publish context of an attached volume: its VolumeAttachment, made
// by the attach/detach controller, must report it attached.
func (m *Manager) attachment(ctx context.Context, src *v1.CSIPersistentVolumeSource) (map[string]string, error) {
	name := csi.AttachmentName(src.VolumeHandle, src.Driver, m.nodeName)
	va, err := m.csiObjects.GetVolumeAttachment(ctx, name)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("volume attachment %s for volume %q is not created yet", name, src.VolumeHandle)
	}
	if err != nil {
		return nil, fmt.Errorf("volume %v has GET error for volume attachment %v: %w", src.VolumeHandle, name, err)
	}
	if !va.Status.Attached {
		if e := va.Status.AttachError; e != nil {
			return nil, fmt.Errorf("volume attachment %s is not attached: %s", name, e.Message)
		}
		return nil, fmt.Errorf("volume attachment %s for volume %q is not attached yet", name, src.VolumeHandle)
	}
	return va.Status.AttachmentMetadata, nil
}

// secretData reads a secret referenced by a CSI volume; nil reference, no data.
func (m *Manager) secretData(ctx context.Context, ref *v1.SecretReference) (map[string]string, error) {
	if ref == nil {
		return nil, nil
	}
	s, err := m.api.Objects.GetSecret(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("fetching NodeStageSecretRef %s/%s failed: %w", ref.Namespace, ref.Name, err)
	}
	out := make(map[string]string, len(s.Data))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

// localSecretRef is an inline volume's secret, in the pod's namespace.
func localSecretRef(pod *v1.Pod, ref *v1.LocalObjectReference) *v1.SecretReference {
	if ref == nil {
		return nil
	}
	return &v1.SecretReference{Namespace: pod.Namespace, Name: ref.Name}
}

func podInfo(pod *v1.Pod, info csiDriverInfo) *csi.PodInfo {
	if !info.podInfoOnMount {
		return nil
	}
	return &csi.PodInfo{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID), ServiceAccountName: pod.Spec.ServiceAccountName}
}

// tearDownCSI unpublishes the pod's CSI volumes through their drivers (they unmount
// what they mounted), then unstages each persistent volume no other pod has published.
// It runs before the pod's remaining mounts are taken down.
func (m *Manager) tearDownCSI(ctx context.Context, uid types.UID) error {
	if m.csi == nil {
		return nil
	}
	if err := m.tearDownCSIBlock(ctx, uid); err != nil {
		return err
	}
	published, err := m.csi.ListPublished()
	if err != nil {
		return err
	}
	type staged struct{ driver, handle string }
	var mine []staged
	var errs []error
	for _, p := range published {
		if p.PodUID != string(uid) {
			continue
		}
		if err := m.csi.Unpublish(ctx, p.PodUID, p.SpecName); err != nil {
			errs = append(errs, fmt.Errorf("UnmountVolume.TearDown failed for volume %q: %w", p.SpecName, err))
			continue
		}
		if p.DataErr == nil && p.Data.VolumeLifecycleMode != string(storagev1.VolumeLifecycleEphemeral) {
			mine = append(mine, staged{p.Data.DriverName, p.Data.VolumeHandle})
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if len(mine) == 0 {
		return nil
	}
	defer m.inUse.mountsChanged()
	stillPublished, err := m.publishedVolumes()
	if err != nil {
		return nil // keep them staged rather than pull them from under a pod
	}
	for _, s := range mine {
		if stillPublished[[2]string{s.driver, s.handle}] {
			continue
		}
		if err := m.csi.Unstage(ctx, s.driver, s.handle); err != nil {
			return fmt.Errorf("UnmountDevice failed for volume %q: %w", s.handle, err)
		}
		klog.V(2).InfoS("Volume unstaged", "driver", s.driver, "volumeHandle", s.handle)
	}
	return nil
}

// tearDownCSIBlock unmaps and unpublishes the pod's raw block volumes (unstaging those no
// other pod has).
func (m *Manager) tearDownCSIBlock(ctx context.Context, uid types.UID) error {
	mapped, err := m.csi.ListBlockMapped()
	if err != nil {
		return err
	}
	var errs []error
	for _, b := range mapped {
		if b.PodUID != string(uid) {
			continue
		}
		if err := m.csi.TearDownBlock(ctx, b.PodUID, b.SpecName); err != nil {
			errs = append(errs, fmt.Errorf("UnmapVolume.UnmapBlockVolume failed for volume %q: %w", b.SpecName, err))
			continue
		}
		m.inUse.mountsChanged()
	}
	return errors.Join(errs...)
}

// publishedVolumes are the {driver, volume handle} pairs some pod still has published.
func (m *Manager) publishedVolumes() (map[[2]string]bool, error) {
	published, err := m.csi.ListPublished()
	if err != nil {
		return nil, err
	}
	out := make(map[[2]string]bool, len(published))
	for _, p := range published {
		if p.DataErr == nil {
			out[[2]string{p.Data.DriverName, p.Data.VolumeHandle}] = true
		}
	}
	return out, nil
}
