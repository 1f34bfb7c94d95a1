package podvalidation

import (
	"path"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const fileModeErrorMsg = "must be a number between 0 and 0777 (octal), both inclusive"

// validateVolumes checks names (DNS labels, unique) and that each volume names exactly
// one source. It returns the valid volumes so that mounts can be checked against them.
func validateVolumes(volumes []v1.Volume, fldPath *field.Path) (map[string]v1.VolumeSource, field.ErrorList) {
	var allErrs field.ErrorList
	valid := make(map[string]v1.VolumeSource)
	names := sets.New[string]()
	for i, vol := range volumes {
		idxPath := fldPath.Index(i)
		namePath := idxPath.Child("name")
		errs := validateVolumeSource(&vol.VolumeSource, idxPath)
		if vol.Name == "" {
			errs = append(errs, field.Required(namePath, ""))
		} else {
			errs = append(errs, validateDNS1123Label(vol.Name, namePath)...)
		}
		if names.Has(vol.Name) {
			errs = append(errs, field.Duplicate(namePath, vol.Name))
		}
		if len(errs) != 0 {
			allErrs = append(allErrs, errs...)
			continue
		}
		names.Insert(vol.Name)
		valid[vol.Name] = vol.VolumeSource
	}
	return valid, allErrs
}

// volumeSourceChecks lists the sources in upstream's order, each with the checks
// nodelet knows for it (nil: only counted).
func volumeSourceChecks(src *v1.VolumeSource) []struct {
	name     string
	set      bool
	validate func(*field.Path) field.ErrorList
} {
	type check = struct {
		name     string
		set      bool
		validate func(*field.Path) field.ErrorList
	}
	return []check{
		{"emptyDir", src.EmptyDir != nil, func(p *field.Path) field.ErrorList { return validateEmptyDir(src.EmptyDir, p) }},
		{"hostPath", src.HostPath != nil, func(p *field.Path) field.ErrorList { return validateHostPath(src.HostPath, p) }},
		{"gitRepo", src.GitRepo != nil, nil},
		{"gcePersistentDisk", src.GCEPersistentDisk != nil, nil},
		{"awsElasticBlockStore", src.AWSElasticBlockStore != nil, nil},
		{"secret", src.Secret != nil, func(p *field.Path) field.ErrorList { return validateSecretVolume(src.Secret, p) }},
		{"nfs", src.NFS != nil, func(p *field.Path) field.ErrorList { return validateNFS(src.NFS, p) }},
		{"iscsi", src.ISCSI != nil, nil},
		{"glusterfs", src.Glusterfs != nil, nil},
		{"flocker", src.Flocker != nil, nil},
		{"persistentVolumeClaim", src.PersistentVolumeClaim != nil, func(p *field.Path) field.ErrorList { return validatePVC(src.PersistentVolumeClaim, p) }},
		{"rbd", src.RBD != nil, nil},
		{"cinder", src.Cinder != nil, nil},
		{"cephFS", src.CephFS != nil, nil},
		{"quobyte", src.Quobyte != nil, nil},
		{"downwardAPI", src.DownwardAPI != nil, func(p *field.Path) field.ErrorList {
			return validateMode(src.DownwardAPI.DefaultMode, p.Child("defaultMode"))
		}},
		{"fc", src.FC != nil, nil},
		{"flexVolume", src.FlexVolume != nil, nil},
		{"configMap", src.ConfigMap != nil, func(p *field.Path) field.ErrorList { return validateConfigMapVolume(src.ConfigMap, p) }},
		{"azureFile", src.AzureFile != nil, nil},
		{"vsphereVolume", src.VsphereVolume != nil, nil},
		{"photonPersistentDisk", src.PhotonPersistentDisk != nil, nil},
		{"portworxVolume", src.PortworxVolume != nil, nil},
		{"azureDisk", src.AzureDisk != nil, nil},
		{"storageos", src.StorageOS != nil, nil},
		{"projected", src.Projected != nil, func(p *field.Path) field.ErrorList {
			return validateMode(src.Projected.DefaultMode, p.Child("defaultMode"))
		}},
		{"scaleIO", src.ScaleIO != nil, nil},
		{"csi", src.CSI != nil, func(p *field.Path) field.ErrorList { return validateCSI(src.CSI, p) }},
		{"ephemeral", src.Ephemeral != nil, nil},
		{"image", src.Image != nil, func(p *field.Path) field.ErrorList { return validateImageVolume(src.Image, p) }},
	}
}

func validateVolumeSource(src *v1.VolumeSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	count := 0
	for _, c := range volumeSourceChecks(src) {
		if !c.set {
			continue
		}
		if count > 0 {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child(c.name), "may not specify more than 1 volume type"))
			continue
		}
		count++
		if c.validate != nil {
			allErrs = append(allErrs, c.validate(fldPath.Child(c.name))...)
		}
	}
	if count == 0 {
		allErrs = append(allErrs, field.Required(fldPath, "must specify a volume type"))
	}
	return allErrs
}

func validateEmptyDir(dir *v1.EmptyDirVolumeSource, fldPath *field.Path) field.ErrorList {
	if dir.SizeLimit != nil && dir.SizeLimit.Cmp(resource.Quantity{}) < 0 {
		return field.ErrorList{field.Forbidden(fldPath.Child("sizeLimit"), "SizeLimit field must be a valid resource quantity")}
	}
	return nil
}

var supportedHostPathTypes = sets.New(
	v1.HostPathUnset, v1.HostPathDirectoryOrCreate, v1.HostPathDirectory, v1.HostPathFileOrCreate,
	v1.HostPathFile, v1.HostPathSocket, v1.HostPathCharDev, v1.HostPathBlockDev,
)

func validateHostPath(hp *v1.HostPathVolumeSource, fldPath *field.Path) field.ErrorList {
	if hp.Path == "" {
		return field.ErrorList{field.Required(fldPath.Child("path"), "")}
	}
	allErrs := validatePathNoBacksteps(hp.Path, fldPath.Child("path"))
	if hp.Type != nil && !supportedHostPathTypes.Has(*hp.Type) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("type"), *hp.Type, sets.List(supportedHostPathTypes)))
	}
	return allErrs
}

func validateSecretVolume(s *v1.SecretVolumeSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if s.SecretName == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("secretName"), ""))
	}
	allErrs = append(allErrs, validateMode(s.DefaultMode, fldPath.Child("defaultMode"))...)
	return append(allErrs, validateKeyToPaths(s.Items, fldPath.Child("items"))...)
}

func validateConfigMapVolume(cm *v1.ConfigMapVolumeSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if cm.Name == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), ""))
	}
	allErrs = append(allErrs, validateMode(cm.DefaultMode, fldPath.Child("defaultMode"))...)
	return append(allErrs, validateKeyToPaths(cm.Items, fldPath.Child("items"))...)
}

func validateKeyToPaths(items []v1.KeyToPath, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, kp := range items {
		idxPath := fldPath.Index(i)
		if kp.Key == "" {
			allErrs = append(allErrs, field.Required(idxPath.Child("key"), ""))
		}
		if kp.Path == "" {
			allErrs = append(allErrs, field.Required(idxPath.Child("path"), ""))
		} else {
			allErrs = append(allErrs, validateLocalDescendingPath(kp.Path, idxPath.Child("path"))...)
		}
		allErrs = append(allErrs, validateMode(kp.Mode, idxPath.Child("mode"))...)
	}
	return allErrs
}

func validateMode(mode *int32, fldPath *field.Path) field.ErrorList {
	if mode != nil && (*mode > 0777 || *mode < 0) {
		return field.ErrorList{field.Invalid(fldPath, *mode, fileModeErrorMsg)}
	}
	return nil
}

func validateNFS(nfs *v1.NFSVolumeSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if nfs.Server == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("server"), ""))
	}
	if nfs.Path == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("path"), ""))
	} else if !path.IsAbs(nfs.Path) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("path"), nfs.Path, "must be an absolute path"))
	}
	return allErrs
}

func validatePVC(pvc *v1.PersistentVolumeClaimVolumeSource, fldPath *field.Path) field.ErrorList {
	if pvc.ClaimName == "" {
		return field.ErrorList{field.Required(fldPath.Child("claimName"), "")}
	}
	return nil
}

func validateCSI(csi *v1.CSIVolumeSource, fldPath *field.Path) field.ErrorList {
	if csi.Driver == "" {
		return field.ErrorList{field.Required(fldPath.Child("driver"), "")}
	}
	return nil
}

func validateImageVolume(img *v1.ImageVolumeSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if img.Reference == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("reference"), ""))
	}
	return append(allErrs, validatePullPolicy(img.PullPolicy, fldPath.Child("pullPolicy"))...)
}
