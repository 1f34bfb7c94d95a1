package criconfig

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// splitSubscriptedPath splits "metadata.labels['key']" into
// ("metadata.labels", "key", true).
func splitSubscriptedPath(fieldPath string) (path, subscript string, ok bool) {
	s, found := strings.CutSuffix(fieldPath, "']")
	if !found {
		return fieldPath, "", false
	}
	path, subscript, found = strings.Cut(s, "['")
	if !found || path == "" {
		return fieldPath, "", false
	}
	return path, subscript, true
}

// PodMetadataField returns one of the pod's metadata fields a downward API
// reference (env var or volume file) may name: name, namespace, uid, and labels
// or annotations whole (one `key="value"` per line, sorted) or by key.
func PodMetadataField(pod *v1.Pod, fieldPath string) (string, error) {
	if path, key, ok := splitSubscriptedPath(fieldPath); ok {
		switch path {
		case "metadata.annotations":
			if errs := validation.IsQualifiedName(strings.ToLower(key)); len(errs) != 0 {
				return "", fmt.Errorf("invalid key subscript in %s: %s", fieldPath, strings.Join(errs, ";"))
			}
			return pod.Annotations[key], nil
		case "metadata.labels":
			if errs := validation.IsQualifiedName(key); len(errs) != 0 {
				return "", fmt.Errorf("invalid key subscript in %s: %s", fieldPath, strings.Join(errs, ";"))
			}
			return pod.Labels[key], nil
		default:
			return "", fmt.Errorf("fieldPath %q does not support subscript", fieldPath)
		}
	}
	switch fieldPath {
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	}
	return "", fmt.Errorf("unsupported fieldPath: %v", fieldPath)
}

// formatMap prints a map as sorted key="value" lines.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	lines := make([]string, len(keys))
	for i, k := range keys {
		lines[i] = fmt.Sprintf("%v=%q", k, m[k])
	}
	return strings.Join(lines, "\n")
}
