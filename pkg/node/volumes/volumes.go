// Package volumes prepares a pod's volumes on the host and tells the runtime
// manager how to mount them into containers.
//
// It supports emptyDir (on disk, or on tmpfs for medium Memory), hostPath,
// and, with an API server, configMap, secret, downwardAPI, projected
// (including service-account tokens) and persistentVolumeClaim / ephemeral
// volumes bound to local or hostPath persistent volumes, laid out on disk as
// the kubelet lays them out: <rootDir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>.
// Other volume types fail to mount with an error that names the type.
//
// The pod worker is the reconciler: every sync of a pod sets its volumes up
// (idempotently: what is mounted stays, changed API objects are written
// anew), its containers start only once all are ready, and a pod that is gone
// has its volumes torn down before its API object may be deleted.
package volumes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/node/volumes/csi"
)

// dirPerm is the mode of the kubelet-owned directories above volumes, as
// upstream creates them: only root and the root group may look inside.
const dirPerm = 0o750

// emptyDirPluginDir is the emptyDir plugin's directory name under a pod's
// volumes directory (the escaped plugin name "kubernetes.io/empty-dir").
const emptyDirPluginDir = "kubernetes.io~empty-dir"

// Manager sets up and tears down pod volumes under the kubelet root dir.
type Manager struct {
	rootDir string
	// mountInfoPath is the mount table consulted for tmpfs and cleanup.
	mountInfoPath string
	// selinuxEnabled says whether emptyDir mounts ask the runtime to
	// relabel them; relabeling only makes sense on SELinux hosts.
	selinuxEnabled bool
	// supportsRRO says whether the runtime handler of a pod can make mounts recursively
	// read-only (SetRecursiveReadOnlySupport); nil means none can (containerd 1.6).
	supportsRRO func(pod *v1.Pod) bool
	// api serves the volume types backed by API objects (SetAPI).
	api API
	// claims are where the pods' claims (and inline CSI volumes) are mounted, for
	// MountsFor.
	claims claimMounts
	// csi publishes CSI volumes through the node's drivers (SetCSI); nil standalone.
	csi        *csi.Manager
	csiObjects CSIObjects
	nodeName   string
	// inUse makes status.volumesInUse.
	inUse inUse
	// claimStatus writes expanded claims' status (from SetAPI); nil: no expansion.
	claimStatus ClaimStatusPatcher
	// expandOnNode replaces the driver call of an expansion in tests.
	expandOnNode func(ctx context.Context, pv *v1.PersistentVolume, targetPath string, size int64) error
}

// NewManager returns a Manager for the kubelet root dir rootDir.
func NewManager(rootDir string) *Manager {
	m := &Manager{
		rootDir:        rootDir,
		mountInfoPath:  selfMountInfo,
		selinuxEnabled: selinuxEnabled(),
	}
	m.SetAPI(API{})
	return m
}

// SetRecursiveReadOnlySupport tells the manager which pods' runtime handlers support
// recursively read-only mounts (recursiveReadOnly: IfPossible uses them, Enabled needs
// them).
func (m *Manager) SetRecursiveReadOnlySupport(supports func(pod *v1.Pod) bool) {
	m.supportsRRO = supports
}

// runtimeSupportsRRO is whether pod's runtime handler supports recursively read-only mounts.
func (m *Manager) runtimeSupportsRRO(pod *v1.Pod) bool {
	return m.supportsRRO != nil && m.supportsRRO(pod)
}

// PodDir is the directory holding everything the kubelet keeps for a pod.
func (m *Manager) PodDir(uid types.UID) string {
	return filepath.Join(m.podsDir(), string(uid))
}

func (m *Manager) podsDir() string {
	return filepath.Join(m.rootDir, "pods")
}

func (m *Manager) podVolumesDir(uid types.UID) string {
	return filepath.Join(m.PodDir(uid), "volumes")
}

func (m *Manager) emptyDirPath(uid types.UID, volumeName string) string {
	return filepath.Join(m.podVolumesDir(uid), emptyDirPluginDir, volumeName)
}

// SetUpPod creates the pod's directory and makes each of its volumes ready:
// emptyDirs are created (and tmpfs-mounted for medium Memory), hostPaths are
// checked against their type (and created for the *OrCreate types), API
// objects are projected into files, claims are mounted. It reports every
// volume that failed, each as a *MountError, not just the first.
func (m *Manager) SetUpPod(ctx context.Context, pod *v1.Pod) error {
	if err := validateUID(pod.UID); err != nil {
		return err
	}
	if err := mkdirAll(m.podVolumesDir(pod.UID)); err != nil {
		return err
	}
	var errs []error
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		if err := m.setUpVolume(ctx, pod, vol); err != nil {
			errs = append(errs, &MountError{Volume: vol.Name, Err: err})
		}
	}
	return utilerrors.NewAggregate(errs)
}

// MountError is one volume's failure to mount, worded as upstream's FailedMount event.
type MountError struct {
	Volume string
	Err    error
}

func (e *MountError) Error() string {
	return fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", e.Volume, e.Err)
}

func (e *MountError) Unwrap() error { return e.Err }

// MountErrors lists the volumes SetUpPod's error says failed to mount.
func MountErrors(err error) []*MountError {
	var agg utilerrors.Aggregate
	if !errors.As(err, &agg) {
		return nil
	}
	var out []*MountError
	for _, e := range agg.Errors() {
		var me *MountError
		if errors.As(e, &me) {
			out = append(out, me)
		}
	}
	return out
}

func (m *Manager) setUpVolume(ctx context.Context, pod *v1.Pod, vol *v1.Volume) error {
	switch {
	case vol.EmptyDir != nil:
		return m.setUpEmptyDir(pod, vol)
	case vol.HostPath != nil:
		return setUpHostPath(vol.HostPath)
	case isProjection(vol):
		return m.setUpProjection(ctx, pod, vol)
	case vol.PersistentVolumeClaim != nil, vol.Ephemeral != nil:
		return m.setUpClaim(ctx, pod, vol)
	case vol.CSI != nil:
		return m.setUpCSIInline(ctx, pod, vol)
	case vol.Image != nil:
		return nil // the runtime mounts the image (a CRI image mount); nothing on the host
	default:
		return unsupportedVolumeError(vol)
	}
}

// CleanupPod unmounts whatever is mounted under the pod's directory (subPath bind
// mounts first, then tmpfs emptyDirs and claims) and removes the directory. It refuses
// to remove anything while a mount remains, so that it can never delete through a
// mount into data that is not the pod's.
func (m *Manager) CleanupPod(uid types.UID) error {
	if err := validateUID(uid); err != nil {
		return err
	}
	m.forgetPod(uid)
	dir := m.PodDir(uid)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := m.cleanSubPaths(dir); err != nil {
		return err
	}
	if err := m.tearDownCSI(context.Background(), uid); err != nil {
		return err
	}
	if err := m.unmountAllUnder(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing pod directory: %w", err)
	}
	return nil
}

// TearDownPod unmounts and removes the volumes of a pod that terminated but is still
// in the API (Succeeded, Failed, evicted): its emptyDirs and projected files go, so
// their disk comes back, as upstream's volume manager tears down every terminated pod's
// volumes. The containers' subPath bind mounts go first, as upstream unmounts them
// before the volume. The rest of the pod's directory stays until the pod is deleted
// (CleanupPod). Like CleanupPod, it removes nothing while a mount remains.
func (m *Manager) TearDownPod(uid types.UID) error {
	if err := validateUID(uid); err != nil {
		return err
	}
	m.forgetPod(uid)
	if err := m.cleanSubPaths(m.PodDir(uid)); err != nil {
		return err
	}
	if err := m.tearDownCSI(context.Background(), uid); err != nil {
		return err
	}
	dir := m.podVolumesDir(uid)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := m.unmountAllUnder(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing pod volumes: %w", err)
	}
	return nil
}

// PodDirs lists the UIDs of the pods that have a directory, so that
// housekeeping can clean up after pods that no longer exist.
func (m *Manager) PodDirs() ([]types.UID, error) {
	entries, err := os.ReadDir(m.podsDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var uids []types.UID
	for _, e := range entries {
		if e.IsDir() {
			uids = append(uids, types.UID(e.Name()))
		}
	}
	return uids, nil
}

// validateUID rejects UIDs that would not name a single directory under
// pods/; an empty UID would make PodDir the parent of every pod's directory.
func validateUID(uid types.UID) error {
	s := string(uid)
	if s == "" || s == "." || s == ".." || strings.ContainsRune(s, '/') {
		return fmt.Errorf("invalid pod UID %q", uid)
	}
	return nil
}

// mkdirAll creates dir and its missing parents with dirPerm.
func mkdirAll(dir string) error {
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	return nil
}

// unsupportedVolumeError names the volume's type the way the pod spec does
// (its field name: secret, configMap, persistentVolumeClaim, ...).
func unsupportedVolumeError(vol *v1.Volume) error {
	typ := volumeTypeName(&vol.VolumeSource)
	if typ == "" {
		return errors.New("no volume source is set")
	}
	klog.V(4).InfoS("Unsupported volume type", "volume", vol.Name, "type", typ)
	return fmt.Errorf("volume type %s is not supported by nodelet yet", typ)
}

// volumeTypeName returns the JSON name of the source's set field. Using
// reflection keeps the list of volume types in one place: the API type.
func volumeTypeName(src *v1.VolumeSource) string { return setFieldName(src) }

// setFieldName is the JSON name of the first non-nil pointer field of the struct src
// points to: the type of a volume source.
func setFieldName(src any) string {
	v := reflect.ValueOf(src).Elem()
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return ""
}
