package csi

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// PublishedVolume is a volume directory found under a pod.
type PublishedVolume struct {
	PodUID string
	// SpecName is vol_data.json's specVolID, or the directory's name without one.
	SpecName   string
	TargetPath string
	// Data is the pod's vol_data.json; DataErr why it could not be read. Without it
	// Unpublish can only remove the directories, when nothing is mounted there.
	Data    VolumeData
	DataErr error
}

// StagedVolume is a staging directory found on disk.
type StagedVolume struct {
	// Driver is the driver directory's name (vol_data.json's driverName, when
	// present, is the same).
	Driver      string
	StagingPath string
	// Data is the staged vol_data.json, absent (DataErr) for drivers without
	// STAGE_UNSTAGE_VOLUME, whose staging directory is an empty leftover.
	Data    VolumeData
	DataErr error
}

// ListPublished lists <root>/pods/*/volumes/kubernetes.io~csi/*: the CSI volumes
// published for pods, whatever kubelet published them, for the caller to adopt or
// unpublish after a restart.
func (m *Manager) ListPublished() ([]PublishedVolume, error) {
	pods, err := readDirNames(m.podsDir())
	if err != nil {
		return nil, err
	}
	var out []PublishedVolume
	for _, podUID := range pods {
		specs, err := readDirNames(m.podCSIDir(podUID))
		if err != nil {
			return nil, err
		}
		for _, spec := range specs {
			out = append(out, m.publishedVolume(podUID, spec))
		}
	}
	return out, nil
}

func (m *Manager) publishedVolume(podUID, dirName string) PublishedVolume {
	dir := filepath.Join(m.podCSIDir(podUID), dirName)
	v := PublishedVolume{PodUID: podUID, SpecName: dirName, TargetPath: filepath.Join(dir, publishDirName)}
	v.Data, v.DataErr = readVolumeData(dir)
	if v.Data.SpecVolID != "" {
		v.SpecName = v.Data.SpecVolID
	}
	return v
}

// ListStaged lists <root>/plugins/kubernetes.io/csi/<driver>/*/globalmount: the
// volumes staged on the node.
func (m *Manager) ListStaged() ([]StagedVolume, error) {
	drivers, err := readDirNames(m.pluginDir())
	if err != nil {
		return nil, err
	}
	var out []StagedVolume
	for _, driver := range drivers {
		// Upstream keeps raw block volumes under volumeDevices, a name no driver
		// can have (driver names are lower case).
		if driver == "volumeDevices" {
			continue
		}
		volumes, err := readDirNames(filepath.Join(m.pluginDir(), driver))
		if err != nil {
			return nil, err
		}
		for _, vol := range volumes {
			dir := filepath.Join(m.pluginDir(), driver, vol)
			// The listing, not a stat, finds globalmount: a stat fails on a broken
			// mount, which needs cleaning up most.
			names, err := readDirNames(dir)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(names, globalMountDir) {
				continue
			}
			v := StagedVolume{Driver: driver, StagingPath: filepath.Join(dir, globalMountDir)}
			v.Data, v.DataErr = readVolumeData(dir)
			out = append(out, v)
		}
	}
	return out, nil
}

// readDirNames returns the names of the directories in dir; a missing dir has none.
func readDirNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
