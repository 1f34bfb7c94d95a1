package volumes

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
)

// csiPluginName prefixes the unique names of CSI volumes, as upstream's CSI plugin.
const csiPluginName = "kubernetes.io/csi"

// Upstream's WaitForAttachAndMount timing: a pod waits this long for its volumes to be
// attached, checking this often.
const (
	attachTimeout      = 2*time.Minute + 3*time.Second
	attachPollInterval = 300 * time.Millisecond
)

// csiUniqueVolumeName is the name status.volumesInUse and status.volumesAttached give a
// CSI volume: kubernetes.io/csi/<driver>^<volume handle>.
func csiUniqueVolumeName(driver, handle string) v1.UniqueVolumeName {
	return v1.UniqueVolumeName(csiPluginName + "/" + driver + "^" + handle)
}

// inUse is what status.volumesInUse is made of (upstream's GetVolumesInUse): an
// attachable volume is in use from the moment a pod that needs it is set up until it is
// unmounted from the node, so that the attach/detach controller never detaches a
// mounted volume. What is mounted is read from disk (the staging and publish
// directories), so a restarted nodelet, or one taking over from upstream's kubelet,
// reports what was mounted before it started.
type inUse struct {
	mu sync.Mutex
	// wanted are the attachable volumes of the pods being set up or running.
	wanted map[types.UID]sets.Set[v1.UniqueVolumeName]
	// reported is the node's status.volumesInUse as last written.
	reported sets.Set[v1.UniqueVolumeName]
	// attachRequired is what each driver's CSIDriver says; a driver not looked up yet
	// (a volume found on disk after a restart) counts as attachable.
	attachRequired map[string]bool
	// changed asks for a node status sync; nil: none.
	changed func()
}

// SetVolumesInUseChanged gives the manager what asks for a node status sync when the
// volumes in use change, so that a pod does not wait for the periodic one.
func (m *Manager) SetVolumesInUseChanged(f func()) {
	m.inUse.mu.Lock()
	defer m.inUse.mu.Unlock()
	m.inUse.changed = f
}

// VolumesInUse lists, sorted, the attachable volumes pods need or that are still
// mounted on the node (status.volumesInUse).
func (m *Manager) VolumesInUse() []v1.UniqueVolumeName {
	if m.csi == nil {
		return nil
	}
	mounted := m.mountedCSIVolumes()
	u := &m.inUse
	u.mu.Lock()
	defer u.mu.Unlock()
	out := sets.New[v1.UniqueVolumeName]()
	for _, names := range u.wanted {
		out = out.Union(names)
	}
	for driver, handles := range mounted {
		if attachable, known := u.attachRequired[driver]; known && !attachable {
			continue
		}
		for _, h := range handles {
			out.Insert(csiUniqueVolumeName(driver, h))
		}
	}
	return sets.List(out)
}

// MarkVolumesAsReportedInUse records the node's status.volumesInUse as the API server
// has it: a wanted volume is mounted only once it is listed there.
func (m *Manager) MarkVolumesAsReportedInUse(names []v1.UniqueVolumeName) {
	m.inUse.mu.Lock()
	defer m.inUse.mu.Unlock()
	m.inUse.reported = sets.New(names...)
}

// mountedCSIVolumes are the persistent CSI volumes staged, published or mapped (raw
// block) on the node, volume handles by driver. Inline volumes are never attached.
func (m *Manager) mountedCSIVolumes() map[string][]string {
	out := map[string][]string{}
	add := func(driver, handle string) {
		if driver != "" && handle != "" && !slices.Contains(out[driver], handle) {
			out[driver] = append(out[driver], handle)
		}
	}
	if staged, err := m.csi.ListStaged(); err == nil {
		for _, s := range staged {
			if s.DataErr == nil {
				add(s.Driver, s.Data.VolumeHandle)
			}
		}
	}
	if mapped, err := m.csi.ListBlockMapped(); err == nil {
		for _, b := range mapped {
			if b.DataErr == nil {
				add(b.Data.DriverName, b.Data.VolumeHandle)
			}
		}
	}
	if published, err := m.csi.ListPublished(); err == nil {
		for _, p := range published {
			if p.DataErr == nil && p.Data.VolumeLifecycleMode != string(storagev1.VolumeLifecycleEphemeral) {
				add(p.Data.DriverName, p.Data.VolumeHandle)
			}
		}
	}
	return out
}

// noteDriver remembers whether the driver's volumes need attaching.
func (u *inUse) noteDriver(name string, attachRequired bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.attachRequired == nil {
		u.attachRequired = map[string]bool{}
	}
	u.attachRequired[name] = attachRequired
}

// want adds a pod's attachable volume; a volume new to the node asks for a status sync.
func (u *inUse) want(uid types.UID, name v1.UniqueVolumeName) {
	u.mu.Lock()
	if u.wanted == nil {
		u.wanted = map[types.UID]sets.Set[v1.UniqueVolumeName]{}
	}
	if u.wanted[uid] == nil {
		u.wanted[uid] = sets.New[v1.UniqueVolumeName]()
	}
	u.wanted[uid].Insert(name)
	changed := u.changed
	if u.reported.Has(name) {
		changed = nil
	}
	u.mu.Unlock()
	if changed != nil {
		changed()
	}
}

// forget drops a pod's wanted volumes (what is still mounted stays in use).
func (u *inUse) forget(uid types.UID) {
	u.mu.Lock()
	_, had := u.wanted[uid]
	delete(u.wanted, uid)
	changed := u.changed
	u.mu.Unlock()
	if had && changed != nil {
		changed()
	}
}

// mountsChanged asks for a status sync after volumes were unmounted.
func (u *inUse) mountsChanged() {
	u.mu.Lock()
	changed := u.changed
	u.mu.Unlock()
	if changed != nil {
		changed()
	}
}

func (u *inUse) isReported(name v1.UniqueVolumeName) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.reported.Has(name)
}

// waitForAttach waits, as upstream's WaitForAttachAndMount, until the attachable volume
// is listed in the node's volumesInUse, the attach/detach controller has listed it in
// volumesAttached and its VolumeAttachment is attached; it returns the attachment's
// publish context. The last reason it was not ready is in the error on timeout.
func (m *Manager) waitForAttach(ctx context.Context, uid types.UID, src *v1.CSIPersistentVolumeSource) (map[string]string, error) {
	name := csiUniqueVolumeName(src.Driver, src.VolumeHandle)
	m.inUse.want(uid, name)
	var publishContext map[string]string
	var last error
	err := wait.PollUntilContextTimeout(ctx, attachPollInterval, attachTimeout, true, func(ctx context.Context) (bool, error) {
		publishContext, last = m.attachedVolume(ctx, name, src)
		return last == nil, nil
	})
	if err != nil && last != nil {
		return nil, fmt.Errorf("volume %q is not attached: %w", src.VolumeHandle, last)
	}
	return publishContext, err
}

// attachedVolume is one check of waitForAttach, with upstream's messages.
func (m *Manager) attachedVolume(ctx context.Context, name v1.UniqueVolumeName, src *v1.CSIPersistentVolumeSource) (map[string]string, error) {
	if !m.inUse.isReported(name) {
		return nil, fmt.Errorf("volume %s has not been added to the list of VolumesInUse in the node's volume status", name)
	}
	attached, err := m.csiObjects.AttachedVolumes(ctx, m.nodeName)
	if err != nil {
		return nil, fmt.Errorf("VerifyControllerAttachedVolume failed fetching node from API server: %w", err)
	}
	if !slices.ContainsFunc(attached, func(a v1.AttachedVolume) bool { return a.Name == name }) {
		return nil, fmt.Errorf("volume %s not attached according to node status", name)
	}
	return m.attachment(ctx, src)
}
