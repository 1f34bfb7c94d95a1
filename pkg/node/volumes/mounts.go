package volumes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// MountsFor translates the container's volumeMounts into CRI mounts. The
// pod's volumes must have been set up by SetUpPod. env is the container's
// environment, for subPathExpr.
func (m *Manager) MountsFor(pod *v1.Pod, c *v1.Container, env map[string]string) ([]*runtimeapi.Mount, error) {
	volumes := make(map[string]*v1.Volume, len(pod.Spec.Volumes))
	for i := range pod.Spec.Volumes {
		volumes[pod.Spec.Volumes[i].Name] = &pod.Spec.Volumes[i]
	}
	mounts := make([]*runtimeapi.Mount, 0, len(c.VolumeMounts))
	for i := range c.VolumeMounts {
		vm := &c.VolumeMounts[i]
		vol, ok := volumes[vm.Name]
		if !ok {
			return nil, fmt.Errorf("cannot find volume %q to mount into container %q", vm.Name, c.Name)
		}
		mount, err := m.mountFor(pod, c, vm, vol, env)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, mount)
	}
	return mounts, nil
}

// mountFor builds the CRI mount of one volumeMount.
func (m *Manager) mountFor(pod *v1.Pod, c *v1.Container, vm *v1.VolumeMount, vol *v1.Volume, env map[string]string) (*runtimeapi.Mount, error) {
	hostPath, attrs, err := m.volumePath(pod, vol)
	if err != nil {
		return nil, err
	}
	subPath := vm.SubPath
	if vm.SubPathExpr != "" {
		if subPath, err = expandSubPathExpr(vm.SubPathExpr, env); err != nil {
			return nil, fmt.Errorf("volume %q: unable to expand subPathExpr %q: %w", vm.Name, vm.SubPathExpr, err)
		}
	}
	if subPath != "" {
		if hostPath, err = prepareSubPath(hostPath, subPath, vm.Name, c.Name); err != nil {
			return nil, err
		}
	}
	propagation, err := translateMountPropagation(vm.MountPropagation)
	if err != nil {
		return nil, err
	}
	rro, err := resolveRecursiveReadOnly(vm, m.runtimeSupportsRRO)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve recursive read-only mode: %w", err)
	}
	return &runtimeapi.Mount{
		ContainerPath:     absoluteContainerPath(vm.MountPath),
		HostPath:          hostPath,
		Readonly:          vm.ReadOnly || attrs.readOnly,
		SelinuxRelabel:    attrs.relabel,
		Propagation:       propagation,
		RecursiveReadOnly: rro,
	}, nil
}

// volumeAttrs say how a volume must be mounted whatever the volumeMount asks.
type volumeAttrs struct {
	// readOnly: always read-only (files projected from API objects, read-only claims).
	readOnly bool
	// relabel: the runtime should relabel it for SELinux. Only volumes the kubelet creates
	// are relabeled; relabeling a hostPath would change the labels of host files.
	relabel bool
}

// volumePath returns where the volume lives on the host and how it must be mounted.
func (m *Manager) volumePath(pod *v1.Pod, vol *v1.Volume) (string, volumeAttrs, error) {
	var dir string
	attrs := volumeAttrs{relabel: m.selinuxEnabled}
	switch {
	case vol.EmptyDir != nil:
		dir = m.emptyDirPath(pod.UID, vol.Name)
	case isProjection(vol):
		dir, attrs.readOnly = m.projectionPath(pod.UID, vol), true
	case vol.HostPath != nil:
		return vol.HostPath.Path, volumeAttrs{}, nil
	case vol.PersistentVolumeClaim != nil, vol.Ephemeral != nil:
		cm, ok := m.claims.get(pod.UID, vol.Name)
		if !ok {
			return "", volumeAttrs{}, fmt.Errorf("volume %q: claim is not mounted", vol.Name)
		}
		return cm.path, volumeAttrs{readOnly: cm.readOnly, relabel: cm.relabel && m.selinuxEnabled}, nil
	default:
		return "", volumeAttrs{}, fmt.Errorf("volume %q: %w", vol.Name, unsupportedVolumeError(vol))
	}
	if _, err := os.Stat(dir); err != nil {
		return "", volumeAttrs{}, fmt.Errorf("volume %q is not set up: %w", vol.Name, err)
	}
	return dir, attrs, nil
}

// expandSubPathExpr expands $(VAR) references in a subPathExpr from the container's
// environment; as upstream, a reference to a variable that is unset or empty is an error.
func expandSubPathExpr(expr string, env map[string]string) (string, error) {
	var missing []string
	expanded := criconfig.Expand(expr, func(name string) string {
		v := env[name]
		if v == "" && !slices.Contains(missing, name) {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		slices.Sort(missing)
		return "", fmt.Errorf("missing value for %s", strings.Join(missing, ", "))
	}
	return expanded, nil
}

// absoluteContainerPath makes a relative mountPath absolute, as upstream does.
func absoluteContainerPath(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Clean("/" + p)
}

// translateMountPropagation maps the API's propagation mode to CRI's.
func translateMountPropagation(mode *v1.MountPropagationMode) (runtimeapi.MountPropagation, error) {
	switch {
	case mode == nil, *mode == v1.MountPropagationNone:
		return runtimeapi.MountPropagation_PROPAGATION_PRIVATE, nil
	case *mode == v1.MountPropagationHostToContainer:
		return runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, nil
	case *mode == v1.MountPropagationBidirectional:
		return runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL, nil
	default:
		return 0, fmt.Errorf("invalid MountPropagation mode: %q", *mode)
	}
}

// resolveRecursiveReadOnly decides whether the mount is made read-only
// recursively (submounts included), which needs runtime support.
func resolveRecursiveReadOnly(vm *v1.VolumeMount, runtimeSupportsRRO bool) (bool, error) {
	if vm.RecursiveReadOnly == nil || *vm.RecursiveReadOnly == v1.RecursiveReadOnlyDisabled {
		return false, nil
	}
	if !vm.ReadOnly {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not read-only", vm.Name)
	}
	if vm.MountPropagation != nil && *vm.MountPropagation != v1.MountPropagationNone {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not compatible with propagation %q", vm.Name, *vm.MountPropagation)
	}
	switch mode := *vm.RecursiveReadOnly; mode {
	case v1.RecursiveReadOnlyIfPossible:
		return runtimeSupportsRRO, nil
	case v1.RecursiveReadOnlyEnabled:
		if !runtimeSupportsRRO {
			return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not supported by the runtime", vm.Name)
		}
		return true, nil
	default:
		return false, fmt.Errorf("unknown recursive read-only mode %q", mode)
	}
}

// prepareSubPath returns the host path of subPath inside volumePath,
// creating it as a directory (with the volume's mode) when it is missing.
// Neither the subPath nor any symlink in it may lead out of the volume.
// Detailed errors are logged rather than returned because they could tell
// the pod's author about the host's filesystem.
func prepareSubPath(volumePath, subPath, mountName, containerName string) (string, error) {
	if filepath.IsAbs(subPath) {
		return "", fmt.Errorf("error SubPath `%s` must not be an absolute path", subPath)
	}
	if err := validatePathNoBacksteps(subPath); err != nil {
		return "", fmt.Errorf("unable to provision SubPath `%s`: %v", subPath, err)
	}
	path := filepath.Join(volumePath, subPath)
	if !pathExists(path) {
		if err := safeMakeDir(volumePath, subPath); err != nil {
			klog.ErrorS(err, "Failed to create subPath directory for volumeMount of the container", "containerName", containerName, "volumeMountName", mountName)
			return "", fmt.Errorf("failed to create subPath directory for volumeMount %q of container %q", mountName, containerName)
		}
	}
	resolved, err := resolveWithin(volumePath, path)
	if err != nil {
		klog.ErrorS(err, "Failed to prepare subPath for volumeMount of the container", "containerName", containerName, "volumeMountName", mountName)
		return "", fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q", mountName, containerName)
	}
	return resolved, nil
}

// safeMakeDir creates the missing directories of subPath under base with
// base's mode. The part that exists already must resolve inside base, and
// each directory created must not have been replaced by a symlink.
func safeMakeDir(base, subPath string) error {
	info, err := os.Stat(base)
	if err != nil {
		return err
	}
	perm := info.Mode().Perm()
	existing, missing := splitExisting(base, subPath)
	if _, err := resolveWithin(base, existing); err != nil {
		return err
	}
	dir := existing
	for _, name := range missing {
		dir = filepath.Join(dir, name)
		if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		// Mkdir's mode is reduced by the umask; the subPath must match the volume.
		if err := os.Chmod(dir, perm); err != nil {
			return err
		}
	}
	return nil
}

// splitExisting splits base/subPath into its longest existing prefix and the
// path elements below it that do not exist.
func splitExisting(base, subPath string) (string, []string) {
	existing := base
	elems := strings.Split(filepath.Clean(subPath), string(filepath.Separator))
	for i, elem := range elems {
		next := filepath.Join(existing, elem)
		if _, err := os.Lstat(next); err != nil {
			return existing, elems[i:]
		}
		existing = next
	}
	return existing, nil
}

// resolveWithin resolves every symlink in path and fails unless the result
// lies inside base (itself resolved).
func resolveWithin(base, path string) (string, error) {
	resolvedBase, err := filepath.EvalSymlinks(base)
	if err != nil {
		return "", err
	}
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(resolvedBase, resolved)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("path %s is outside of allowed base %s", resolved, resolvedBase)
	}
	return resolved, nil
}

// selinuxEnabled reports whether the host enforces SELinux labels: selinuxfs
// is mounted and processes run with a real label.
func selinuxEnabled() bool {
	mounts, err := readMountInfo(selfMountInfo)
	if err != nil {
		return false
	}
	found := false
	for _, mnt := range mounts {
		found = found || mnt.fsType == "selinuxfs"
	}
	if !found {
		return false
	}
	label, err := os.ReadFile("/proc/self/attr/current")
	if err != nil {
		return false
	}
	l := strings.Trim(string(label), "\x00\n ")
	return l != "" && l != "kernel"
}
