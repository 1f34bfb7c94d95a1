// Package resourcename classifies resource names as upstream's v1helper does: which are
// Kubernetes' own (native) and which are extended resources, the names device plugins
// register, pods request and DRA may serve.
package resourcename

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// IsNative: unprefixed names are implicitly in kubernetes.io, and any name containing
// "kubernetes.io/" is in it explicitly.
func IsNative(name v1.ResourceName) bool {
	s := string(name)
	return !strings.Contains(s, "/") || strings.Contains(s, v1.ResourceDefaultNamespacePrefix)
}

// IsExtended is upstream's IsExtendedResourceName: a domain-prefixed name outside the
// kubernetes.io namespace, not starting with "requests.", that stays a valid qualified
// name once prefixed with "requests." (so that a quota can name it).
func IsExtended(name v1.ResourceName) bool {
	if IsNative(name) || strings.HasPrefix(string(name), v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(v1.DefaultResourceRequestsPrefix+string(name))) == 0
}

// IsDRAExtended tells whether a container's resource request may be served by DRA: an
// extended resource, or the implicit "deviceclass.resource.kubernetes.io/<class>" name a
// device class gives.
func IsDRAExtended(name v1.ResourceName) bool {
	return IsExtended(name) || strings.HasPrefix(string(name), resourceapi.ResourceDeviceClassPrefix)
}
