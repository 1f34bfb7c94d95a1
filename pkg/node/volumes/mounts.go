package volumes

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
)

// MountsFor translates the container's volumeMounts into CRI mounts. The
// pod's volumes must have been set up by SetUpPod. env is the container's
// environment, for subPathExpr. Image volumes are left out: the runtime manager pulls
// their images and adds them as CRI image mounts.
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
		if vol.Image != nil {
			continue // an image volume is the runtime's to mount: the runtime manager adds it
		}
		mount, err := m.mountFor(pod, c, i, vol, env)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, mount)
	}
	return mounts, nil
}

// DevicesFor translates the container's volumeDevices into CRI devices: each raw block
// claim's device, read-write unless the claim is read-only, as upstream's
// makeBlockVolumes. The pod's volumes must have been set up by SetUpPod.
func (m *Manager) DevicesFor(pod *v1.Pod, c *v1.Container) ([]*runtimeapi.Device, error) {
	devices := make([]*runtimeapi.Device, 0, len(c.VolumeDevices))
	for _, vd := range c.VolumeDevices {
		cm, ok := m.claims.get(pod.UID, vd.Name)
		switch {
		case !ok:
			return nil, fmt.Errorf("cannot find volume %q to pass into container %q", vd.Name, c.Name)
		case !cm.block:
			return nil, fmt.Errorf("volume %s has volumeMode Filesystem, but is specified in volumeDevices", vd.Name)
		}
		permissions := "mrw"
		if cm.readOnly {
			permissions = "r"
		}
		devices = append(devices, &runtimeapi.Device{ContainerPath: vd.DevicePath, HostPath: cm.path, Permissions: permissions})
	}
	return devices, nil
}

// mountFor builds the CRI mount of the container's volumeMount number index. A subPath
// is bind-mounted into the pod's directory and that mount is what the runtime gets.
func (m *Manager) mountFor(pod *v1.Pod, c *v1.Container, index int, vol *v1.Volume, env map[string]string) (*runtimeapi.Mount, error) {
	vm := &c.VolumeMounts[index]
	hostPath, attrs, err := m.volumePath(pod, vol)
	if err != nil {
		return nil, err
	}
	sub := vm.SubPath
	if vm.SubPathExpr != "" {
		if sub, err = criconfig.ExpandSubPathExpr(vm.SubPathExpr, env); err != nil {
			return nil, fmt.Errorf("volume %q: unable to expand subPathExpr %q: %w", vm.Name, vm.SubPathExpr, err)
		}
	}
	if sub != "" {
		if err := validateUID(pod.UID); err != nil {
			return nil, err
		}
		sp := &subPath{
			volumePath: hostPath,
			path:       sub,
			mountName:  vm.Name,
			podDir:     m.PodDir(pod.UID),
			volumeName: attrs.specName,
			container:  c.Name,
			index:      index,
		}
		if hostPath, err = m.prepareSubPath(sp); err != nil {
			return nil, err
		}
	}
	propagation, err := criconfig.MountPropagation(vm.MountPropagation)
	if err != nil {
		return nil, err
	}
	rro, err := criconfig.RecursiveReadOnly(vm, m.runtimeSupportsRRO(pod))
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
	// specName names the volume in the layout of subPath mounts, as upstream's
	// InnerVolumeSpecName: the persistent volume's name for a claim, else the pod's.
	specName string
}

// volumePath returns where the volume lives on the host and how it must be mounted.
func (m *Manager) volumePath(pod *v1.Pod, vol *v1.Volume) (string, volumeAttrs, error) {
	var dir string
	attrs := volumeAttrs{relabel: m.selinuxEnabled, specName: vol.Name}
	switch {
	case vol.EmptyDir != nil:
		dir = m.emptyDirPath(pod.UID, vol.Name)
	case isProjection(vol):
		dir, attrs.readOnly = m.projectionPath(pod.UID, vol), true
	case vol.HostPath != nil:
		return vol.HostPath.Path, volumeAttrs{specName: vol.Name}, nil
	case vol.PersistentVolumeClaim != nil, vol.Ephemeral != nil, vol.CSI != nil:
		cm, ok := m.claims.get(pod.UID, vol.Name)
		if !ok {
			return "", volumeAttrs{}, fmt.Errorf("volume %q: claim is not mounted", vol.Name)
		}
		if cm.block {
			return "", volumeAttrs{}, fmt.Errorf("volume %s has volumeMode Block, but is specified in volumeMounts", vol.Name)
		}
		return cm.path, volumeAttrs{readOnly: cm.readOnly, relabel: cm.relabel && m.selinuxEnabled, specName: cm.pvName}, nil
	default:
		return "", volumeAttrs{}, fmt.Errorf("volume %q: %w", vol.Name, unsupportedVolumeError(vol))
	}
	if _, err := os.Stat(dir); err != nil {
		return "", volumeAttrs{}, fmt.Errorf("volume %q is not set up: %w", vol.Name, err)
	}
	return dir, attrs, nil
}

// absoluteContainerPath makes a relative mountPath absolute, as upstream does.
func absoluteContainerPath(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Clean("/" + p)
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
