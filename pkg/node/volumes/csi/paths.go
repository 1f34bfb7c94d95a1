package csi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	utilstrings "k8s.io/utils/strings"

	"github.com/nodelet/nodelet/pkg/atomicfile"
)

const (
	// pluginName is upstream's in-tree plugin name; escapedPluginName its form as a
	// directory name under a pod's volumes directory.
	pluginName        = "kubernetes.io/csi"
	escapedPluginName = "kubernetes.io~csi"
	// globalMountDir is the staging directory's name, beside the staged vol_data.json.
	globalMountDir = "globalmount"
	// publishDirName is the target directory's name, beside the pod's vol_data.json.
	publishDirName  = "mount"
	volDataFileName = "vol_data.json"
	// dirPerm is the mode of the directories the kubelet creates for volumes.
	dirPerm = 0o750
	// volDataPerm is what upstream's os.Create gives under the usual umask 022.
	volDataPerm = 0o644
)

// The keys of vol_data.json, as upstream names them.
const (
	keySpecVolID           = "specVolID"
	keyVolumeHandle        = "volumeHandle"
	keyDriverName          = "driverName"
	keyNodeName            = "nodeName"
	keyAttachmentID        = "attachmentID"
	keyVolumeLifecycleMode = "volumeLifecycleMode"
	keySELinuxMountContext = "seLinuxMountContext"
)

// Volume lifecycle modes recorded in a pod's vol_data.json (storage.k8s.io/v1
// VolumeLifecycleMode).
const (
	lifecyclePersistent = "Persistent"
	lifecycleEphemeral  = "Ephemeral"
)

// VolumeData is the content of a vol_data.json file. A staged volume's file has only
// VolumeHandle, DriverName and, when mounted with an SELinux context,
// SELinuxMountContext.
type VolumeData struct {
	SpecVolID    string `json:"specVolID"`
	VolumeHandle string `json:"volumeHandle"`
	DriverName   string `json:"driverName"`
	NodeName     string `json:"nodeName"`
	AttachmentID string `json:"attachmentID"`
	// VolumeLifecycleMode is "Persistent" or "Ephemeral" (an inline CSI volume).
	VolumeLifecycleMode string `json:"volumeLifecycleMode"`
	SELinuxMountContext string `json:"seLinuxMountContext"`
}

// StagingPath is where a volume is staged: upstream's makeDeviceMountPath, keyed by
// the driver and the SHA-256 of the volume handle.
func (m *Manager) StagingPath(driver, volumeHandle string) string {
	sum := sha256.Sum256([]byte(volumeHandle))
	return filepath.Join(m.pluginDir(), driver, hex.EncodeToString(sum[:]), globalMountDir)
}

// IsStaged reports whether the volume was staged on this node: staging writes
// vol_data.json beside the staging path (drivers without STAGE_UNSTAGE_VOLUME are
// never staged).
func (m *Manager) IsStaged(driver, volumeHandle string) (bool, error) {
	_, err := os.Stat(filepath.Join(filepath.Dir(m.StagingPath(driver, volumeHandle)), volDataFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// TargetPath is where a volume is published for a pod. specName is the volume's spec
// name: the PersistentVolume's name for a persistent volume, the pod's volume name for
// an inline one.
func (m *Manager) TargetPath(podUID, specName string) string {
	return filepath.Join(m.podCSIDir(podUID), utilstrings.EscapeQualifiedName(specName), publishDirName)
}

func (m *Manager) pluginDir() string {
	return filepath.Join(m.rootDir, "plugins", pluginName)
}

func (m *Manager) podsDir() string {
	return filepath.Join(m.rootDir, "pods")
}

func (m *Manager) podCSIDir(podUID string) string {
	return filepath.Join(m.podsDir(), podUID, "volumes", escapedPluginName)
}

// AttachmentName is the name of the VolumeAttachment that attaches a volume to a node:
// "csi-" and the SHA-256 of handle, driver and node name, as upstream's
// getAttachmentName.
func AttachmentName(volumeHandle, driver, nodeName string) string {
	return "csi-" + sha256Hex(volumeHandle+driver+nodeName)
}

// EphemeralVolumeHandle is the volume handle of an inline CSI volume, which has none of
// its own: "csi-" and the SHA-256 of pod UID and volume name, as upstream's
// makeVolumeHandle.
func EphemeralVolumeHandle(podUID, volumeName string) string {
	return "csi-" + sha256Hex(podUID+volumeName)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// writeVolumeData writes dir/vol_data.json. Upstream encodes a map with a JSON encoder,
// which sorts the keys and ends with a newline; so does this.
func writeVolumeData(dir string, data map[string]string) error {
	path := filepath.Join(dir, volDataFileName)
	raw, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("%s: %w", logf("failed to save volume data file %s", path), err)
	}
	if err := atomicfile.Write(path, append(raw, '\n'), volDataPerm); err != nil {
		return fmt.Errorf("%s: %w", logf("failed to save volume data file %s", path), err)
	}
	return nil
}

// readVolumeData reads dir/vol_data.json; a missing file is an fs.ErrNotExist error.
func readVolumeData(dir string) (VolumeData, error) {
	path := filepath.Join(dir, volDataFileName)
	raw, err := os.ReadFile(path)
	if err != nil {
		return VolumeData{}, fmt.Errorf("%s: %w", logf("failed to open volume data file [%s]", path), err)
	}
	var data VolumeData
	if err := json.Unmarshal(raw, &data); err != nil {
		return VolumeData{}, fmt.Errorf("%s: %w", logf("failed to parse volume data file [%s]", path), err)
	}
	return data, nil
}
