package podvalidation

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateVolumeMounts requires every mount to name a volume of the pod and every mount
// path in a container to be distinct.
func validateVolumeMounts(ctr *v1.Container, vols map[string]v1.VolumeSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	mountPaths := sets.New[string]()
	devices := deviceNamesAndPaths(ctr.VolumeDevices)
	for i, mnt := range ctr.VolumeMounts {
		idxPath := fldPath.Index(i)
		if mnt.Name == "" {
			allErrs = append(allErrs, field.Required(idxPath.Child("name"), ""))
		}
		if _, ok := vols[mnt.Name]; !ok {
			allErrs = append(allErrs, field.NotFound(idxPath.Child("name"), mnt.Name))
		}
		if mnt.MountPath == "" {
			allErrs = append(allErrs, field.Required(idxPath.Child("mountPath"), ""))
		}
		if mountPaths.Has(mnt.MountPath) {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("mountPath"), mnt.MountPath, "must be unique"))
		}
		mountPaths.Insert(mnt.MountPath)
		if devices.names.Has(mnt.Name) {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("name"), mnt.Name, "must not already exist in volumeDevices"))
		}
		if devices.paths.Has(mnt.MountPath) {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("mountPath"), mnt.MountPath, "must not already exist as a path in volumeDevices"))
		}
		allErrs = append(allErrs, validateSubPaths(mnt, idxPath)...)
		allErrs = append(allErrs, validateMountPropagation(mnt.MountPropagation, ctr, idxPath.Child("mountPropagation"))...)
		allErrs = append(allErrs, validateRecursiveReadOnly(mnt, idxPath.Child("recursiveReadOnly"))...)
	}
	return allErrs
}

func validateSubPaths(mnt v1.VolumeMount, idxPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if mnt.SubPath != "" {
		allErrs = append(allErrs, validateLocalDescendingPath(mnt.SubPath, idxPath.Child("subPath"))...)
	}
	if mnt.SubPathExpr != "" {
		if mnt.SubPath != "" {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("subPathExpr"), mnt.SubPathExpr, "subPathExpr and subPath are mutually exclusive"))
		}
		allErrs = append(allErrs, validateLocalDescendingPath(mnt.SubPathExpr, idxPath.Child("subPathExpr"))...)
	}
	return allErrs
}

var supportedMountPropagations = sets.New(v1.MountPropagationBidirectional, v1.MountPropagationHostToContainer, v1.MountPropagationNone)

// validateMountPropagation: mounts made in a container reach the host only from a
// privileged container.
func validateMountPropagation(mode *v1.MountPropagationMode, ctr *v1.Container, fldPath *field.Path) field.ErrorList {
	if mode == nil {
		return nil
	}
	if !supportedMountPropagations.Has(*mode) {
		return field.ErrorList{field.NotSupported(fldPath, *mode, sets.List(supportedMountPropagations))}
	}
	privileged := ctr.SecurityContext != nil && ctr.SecurityContext.Privileged != nil && *ctr.SecurityContext.Privileged
	if *mode == v1.MountPropagationBidirectional && !privileged {
		return field.ErrorList{field.Forbidden(fldPath, "Bidirectional mount propagation is available only to privileged containers")}
	}
	return nil
}

var supportedRecursiveReadOnly = sets.New(v1.RecursiveReadOnlyDisabled, v1.RecursiveReadOnlyIfPossible, v1.RecursiveReadOnlyEnabled)

func validateRecursiveReadOnly(mnt v1.VolumeMount, fldPath *field.Path) field.ErrorList {
	if mnt.RecursiveReadOnly == nil {
		return nil
	}
	var allErrs field.ErrorList
	switch *mnt.RecursiveReadOnly {
	case v1.RecursiveReadOnlyDisabled:
	case v1.RecursiveReadOnlyEnabled, v1.RecursiveReadOnlyIfPossible:
		if !mnt.ReadOnly {
			allErrs = append(allErrs, field.Forbidden(fldPath, "may only be specified when readOnly is true"))
		}
		if mnt.MountPropagation != nil && *mnt.MountPropagation != v1.MountPropagationNone {
			allErrs = append(allErrs, field.Forbidden(fldPath, "may only be specified when mountPropagation is None or not specified"))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath, *mnt.RecursiveReadOnly, sets.List(supportedRecursiveReadOnly)))
	}
	return allErrs
}

// validateVolumeDevices: raw block devices come only from claims (which a static pod
// cannot use); nodelet's runtime manager would otherwise ignore them silently.
func validateVolumeDevices(ctr *v1.Container, vols map[string]v1.VolumeSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	names, paths := sets.New[string](), sets.New[string]()
	mounts := mountNamesAndPaths(ctr.VolumeMounts)
	for i, dev := range ctr.VolumeDevices {
		idxPath := fldPath.Index(i)
		namePath, devPath := idxPath.Child("name"), idxPath.Child("devicePath")
		if dev.Name == "" {
			allErrs = append(allErrs, field.Required(namePath, ""))
		}
		if names.Has(dev.Name) {
			allErrs = append(allErrs, field.Invalid(namePath, dev.Name, "must be unique"))
		}
		switch src, ok := vols[dev.Name]; {
		case !ok:
			allErrs = append(allErrs, field.NotFound(namePath, dev.Name))
		case src.PersistentVolumeClaim == nil && src.Ephemeral == nil:
			allErrs = append(allErrs, field.Invalid(namePath, dev.Name, "can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode"))
		}
		if dev.DevicePath == "" {
			allErrs = append(allErrs, field.Required(devPath, ""))
		}
		if paths.Has(dev.DevicePath) {
			allErrs = append(allErrs, field.Invalid(devPath, dev.DevicePath, "must be unique"))
		}
		if len(validatePathNoBacksteps(dev.DevicePath, devPath)) > 0 {
			allErrs = append(allErrs, field.Invalid(devPath, dev.DevicePath, "can not contain backsteps ('..')"))
		} else {
			paths.Insert(dev.DevicePath)
		}
		if mounts.names.Has(dev.Name) {
			allErrs = append(allErrs, field.Invalid(namePath, dev.Name, "must not already exist in volumeMounts"))
		}
		if mounts.paths.Has(dev.DevicePath) {
			allErrs = append(allErrs, field.Invalid(devPath, dev.DevicePath, "must not already exist as a path in volumeMounts"))
		}
		if dev.Name != "" {
			names.Insert(dev.Name)
		}
	}
	return allErrs
}

// namesAndPaths indexes a container's volume mounts or devices, which may not share a
// volume or a path.
type namesAndPaths struct {
	names, paths sets.Set[string]
}

func deviceNamesAndPaths(devices []v1.VolumeDevice) namesAndPaths {
	idx := namesAndPaths{sets.New[string](), sets.New[string]()}
	for _, d := range devices {
		idx.names.Insert(d.Name)
		idx.paths.Insert(d.DevicePath)
	}
	return idx
}

func mountNamesAndPaths(mounts []v1.VolumeMount) namesAndPaths {
	idx := namesAndPaths{sets.New[string](), sets.New[string]()}
	for _, m := range mounts {
		idx.names.Insert(m.Name)
		idx.paths.Insert(m.MountPath)
	}
	return idx
}
