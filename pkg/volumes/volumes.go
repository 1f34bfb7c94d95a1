// Package volumes prepares a pod's volumes on the host and tells the runtime
// manager how to mount them into containers.
//
// This first cut supports emptyDir (on disk, or on tmpfs for medium Memory)
// and hostPath volumes, laid out on disk as the kubelet lays them out:
// <rootDir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>. Other volume
// types are refused with a clear error.
package volumes

import (
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
	// runtimeSupportsRRO says whether the runtime can make mounts
	// recursively read-only. containerd 1.6 cannot; a later change can
	// learn it from the runtime's status.
	runtimeSupportsRRO bool
}

// NewManager returns a Manager for the kubelet root dir rootDir.
func NewManager(rootDir string) *Manager {
	return &Manager{
		rootDir:        rootDir,
		mountInfoPath:  selfMountInfo,
		selinuxEnabled: selinuxEnabled(),
	}
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

// SetUpPod creates the pod's directory and prepares each of its volumes:
// emptyDirs are created (and tmpfs-mounted for medium Memory), hostPaths are
// checked against their type (and created for the *OrCreate types). It
// reports every volume that failed, not just the first.
func (m *Manager) SetUpPod(pod *v1.Pod) error {
	if err := validateUID(pod.UID); err != nil {
		return err
	}
	if err := mkdirAll(m.podVolumesDir(pod.UID)); err != nil {
		return err
	}
	var errs []error
	for i := range pod.Spec.Volumes {
		if err := m.setUpVolume(pod, &pod.Spec.Volumes[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return utilerrors.NewAggregate(errs)
}

func (m *Manager) setUpVolume(pod *v1.Pod, vol *v1.Volume) error {
	var err error
	switch {
	case vol.EmptyDir != nil:
		err = m.setUpEmptyDir(pod, vol)
	case vol.HostPath != nil:
		err = setUpHostPath(vol.HostPath)
	default:
		return unsupportedVolumeError(vol)
	}
	if err != nil {
		return fmt.Errorf("volume %q: %w", vol.Name, err)
	}
	return nil
}

// CleanupPod unmounts whatever is mounted under the pod's directory (tmpfs
// emptyDirs) and removes the directory. It refuses to remove anything while a
// mount remains, so that it can never delete through a mount into data that
// is not the pod's.
func (m *Manager) CleanupPod(uid types.UID) error {
	if err := validateUID(uid); err != nil {
		return err
	}
	dir := m.PodDir(uid)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := m.unmountAllUnder(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing pod directory: %w", err)
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
		return fmt.Errorf("volume %q: no volume source is set", vol.Name)
	}
	klog.V(4).InfoS("Unsupported volume type", "volume", vol.Name, "type", typ)
	return fmt.Errorf("volume %q: type %s is not supported yet", vol.Name, typ)
}

// volumeTypeName returns the JSON name of the source's set field. Using
// reflection keeps the list of volume types in one place: the API type.
func volumeTypeName(src *v1.VolumeSource) string {
	v := reflect.ValueOf(src).Elem()
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return ""
}
