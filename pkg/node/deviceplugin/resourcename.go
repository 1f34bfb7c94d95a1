package deviceplugin

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// isExtendedResourceName is upstream's v1helper.IsExtendedResourceName, which decides
// which resource names a device plugin may register: a domain-prefixed name outside the
// kubernetes.io namespace, not starting with "requests.", that stays a valid qualified
// name once prefixed with "requests." (so that a quota can name it).
func isExtendedResourceName(name string) bool {
	if isNativeResource(name) || strings.HasPrefix(name, v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(v1.DefaultResourceRequestsPrefix+name)) == 0
}

// isNativeResource: unprefixed names are implicitly in kubernetes.io, and any name
// containing "kubernetes.io/" is in it explicitly.
func isNativeResource(name string) bool {
	return !strings.Contains(name, "/") || strings.Contains(name, v1.ResourceDefaultNamespacePrefix)
}
