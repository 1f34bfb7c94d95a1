package kuberuntime

import (
	"fmt"
	"path/filepath"
	"strings"
)

const (
	legacyLogSuffix    = "log"
	ext4MaxFileNameLen = 255
)

// legacyLogSymlink is the path of a container's log link in the legacy directory:
// <pod>_<namespace>_<container>-<containerID>.log, cut to ext4's 255-byte name limit.
func (m *Manager) legacyLogSymlink(containerID, containerName, podName, podNamespace string) string {
	suffix := "." + legacyLogSuffix
	name := fmt.Sprintf("%s_%s_%s-%s", podName, podNamespace, containerName, containerID)
	if len(name) > ext4MaxFileNameLen-len(suffix) {
		name = name[:ext4MaxFileNameLen-len(suffix)]
	}
	return filepath.Join(m.opts.LegacyLogSymlinkDir, name+suffix)
}

// containerIDFromLegacyLogSymlink recovers the (possibly truncated) container ID from a
// legacy link name.
func containerIDFromLegacyLogSymlink(link string) (string, error) {
	parts := strings.Split(link, "-")
	idWithSuffix := parts[len(parts)-1]
	suffix := "." + legacyLogSuffix
	if !strings.HasSuffix(idWithSuffix, suffix) {
		return "", fmt.Errorf("%q doesn't end with %q", link, suffix)
	}
	id := strings.TrimSuffix(idWithSuffix, suffix)
	// Runtimes find a container by an ID prefix of six characters or more.
	if len(id) < 6 {
		return "", fmt.Errorf("container Id %q is too short", id)
	}
	return id, nil
}
