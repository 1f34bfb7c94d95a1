package podvalidation

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// APIObjectReference reports the first API object kind (plural resource, as upstream
// words it) that the pod depends on, or "" if it depends on none. A static pod has no
// API server to fetch secrets, config maps, service account tokens or claims from, so
// upstream's kubelet (PreventStaticPodAPIReferences, on by default) refuses such pods
// with "static pods may not reference <resource>". Order and wording follow upstream's
// HasAPIObjectReference: the service account first, then any secret, then any config
// map, then resource claims, then volume types that need the API.
func APIObjectReference(pod *v1.Pod) (string, error) {
	switch {
	case pod.Spec.ServiceAccountName != "" || pod.Spec.DeprecatedServiceAccount != "":
		return "serviceaccounts", nil
	case referencesSecret(pod):
		return "secrets", nil
	case referencesConfigMap(pod):
		return "configmaps", nil
	case len(pod.Spec.ResourceClaims) > 0:
		return "resourceclaims", nil
	}
	for i := range pod.Spec.Volumes {
		if resource, err := volumeAPIReference(&pod.Spec.Volumes[i]); resource != "" || err != nil {
			return resource, err
		}
	}
	return "", nil
}

// volumeAPIReference covers the volume types that the secret and config map checks did
// not already catch.
func volumeAPIReference(v *v1.Volume) (string, error) {
	switch {
	case v.CSI != nil:
		return "csidrivers (via CSI volumes)", nil
	case v.Glusterfs != nil:
		return "endpoints (via glusterFS volumes)", nil
	case v.PersistentVolumeClaim != nil:
		return "persistentvolumeclaims", nil
	case v.Ephemeral != nil:
		return "persistentvolumeclaims (via ephemeral volumes)", nil
	case v.Projected != nil:
		return projectedAPIReference(v)
	}
	return "", nil
}

func projectedAPIReference(v *v1.Volume) (string, error) {
	for _, s := range v.Projected.Sources {
		switch {
		case s.ServiceAccountToken != nil:
			return "serviceaccounts (via projected volumes)", nil
		case s.ClusterTrustBundle != nil:
			return "clustertrustbundles", nil
		case s.PodCertificate != nil:
			return "podcertificates", nil
		case s.DownwardAPI != nil, s.Secret != nil, s.ConfigMap != nil:
			continue
		default:
			return "", fmt.Errorf("unknown source for projected volume %q", v.Name)
		}
	}
	return "", nil
}

func referencesSecret(pod *v1.Pod) bool {
	if len(pod.Spec.ImagePullSecrets) > 0 {
		return true
	}
	if anyContainer(pod, func(c *v1.Container) bool {
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil {
				return true
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				return true
			}
		}
		return false
	}) {
		return true
	}
	for i := range pod.Spec.Volumes {
		if volumeReferencesSecret(&pod.Spec.Volumes[i].VolumeSource) {
			return true
		}
	}
	return false
}

func volumeReferencesSecret(src *v1.VolumeSource) bool {
	switch {
	case src.Secret != nil, src.AzureFile != nil:
		return true
	case src.CephFS != nil && src.CephFS.SecretRef != nil,
		src.Cinder != nil && src.Cinder.SecretRef != nil,
		src.FlexVolume != nil && src.FlexVolume.SecretRef != nil,
		src.RBD != nil && src.RBD.SecretRef != nil,
		src.ScaleIO != nil && src.ScaleIO.SecretRef != nil,
		src.ISCSI != nil && src.ISCSI.SecretRef != nil,
		src.StorageOS != nil && src.StorageOS.SecretRef != nil,
		src.CSI != nil && src.CSI.NodePublishSecretRef != nil:
		return true
	case src.Projected != nil:
		for _, s := range src.Projected.Sources {
			if s.Secret != nil {
				return true
			}
		}
	}
	return false
}

func referencesConfigMap(pod *v1.Pod) bool {
	if anyContainer(pod, func(c *v1.Container) bool {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				return true
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				return true
			}
		}
		return false
	}) {
		return true
	}
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil {
			return true
		}
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ConfigMap != nil {
				return true
			}
		}
	}
	return false
}

// anyContainer reports whether match holds for any init, regular or ephemeral container.
func anyContainer(pod *v1.Pod, match func(*v1.Container) bool) bool {
	for i := range pod.Spec.InitContainers {
		if match(&pod.Spec.InitContainers[i]) {
			return true
		}
	}
	for i := range pod.Spec.Containers {
		if match(&pod.Spec.Containers[i]) {
			return true
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		c := v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		if match(&c) {
			return true
		}
	}
	return false
}
