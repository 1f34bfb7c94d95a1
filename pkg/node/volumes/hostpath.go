package volumes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// setUpHostPath validates a hostPath volume: the path may not step up with
// "..", and a typed hostPath must be (or, for the *OrCreate types, become)
// that kind of file.
func setUpHostPath(src *v1.HostPathVolumeSource) error {
	if err := validatePathNoBacksteps(src.Path); err != nil {
		return fmt.Errorf("invalid HostPath `%s`: %v", src.Path, err)
	}
	if src.Type == nil || *src.Type == v1.HostPathUnset {
		return nil
	}
	return checkHostPathType(src.Path, *src.Type)
}

// checkHostPathType makes sure path is of the requested type, creating a
// directory or empty file for the *OrCreate types when nothing is there.
func checkHostPathType(path string, typ v1.HostPathType) error {
	switch typ {
	case v1.HostPathDirectoryOrCreate:
		if !pathExists(path) {
			return makeHostDir(path)
		}
		return requireFileType(path, v1.HostPathDirectory, "directory")
	case v1.HostPathDirectory:
		return requireFileType(path, v1.HostPathDirectory, "directory")
	case v1.HostPathFileOrCreate:
		if !pathExists(path) {
			return makeHostFile(path)
		}
		return requireFileType(path, v1.HostPathFile, "file")
	case v1.HostPathFile:
		return requireFileType(path, v1.HostPathFile, "file")
	case v1.HostPathSocket:
		return requireFileType(path, v1.HostPathSocket, "socket file")
	case v1.HostPathCharDev:
		return requireFileType(path, v1.HostPathCharDev, "character device")
	case v1.HostPathBlockDev:
		return requireFileType(path, v1.HostPathBlockDev, "block device")
	default:
		return fmt.Errorf("%s is an invalid volume type", typ)
	}
}

// requireFileType fails unless path exists and is of type want.
func requireFileType(path string, want v1.HostPathType, description string) error {
	if !pathExists(path) {
		return fmt.Errorf("hostPath %s doesn't exist", path)
	}
	got, err := fileType(path)
	if err != nil {
		return fmt.Errorf("hostPath type check failed, %s is not a %s, unable to determine its type: %w", path, description, err)
	}
	if got != want {
		return fmt.Errorf("hostPath type check failed: %s is not a %s, it's a %s", path, description, got)
	}
	return nil
}

// fileType classifies what path points to (following symlinks) with the
// hostPath type names.
func fileType(path string) (v1.HostPathType, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	mode := info.Mode()
	switch {
	case mode.IsDir():
		return v1.HostPathDirectory, nil
	case mode.IsRegular():
		return v1.HostPathFile, nil
	case mode&os.ModeSocket != 0:
		return v1.HostPathSocket, nil
	case mode&os.ModeCharDevice != 0:
		return v1.HostPathCharDev, nil
	case mode&os.ModeDevice != 0:
		return v1.HostPathBlockDev, nil
	}
	return "", fmt.Errorf("only recognise file, directory, socket, block device and character device")
}

// pathExists reports whether something exists at path (following symlinks).
func pathExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// makeHostDir creates a DirectoryOrCreate hostPath and its parents, 0755.
func makeHostDir(path string) error {
	if err := os.MkdirAll(path, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	return nil
}

// makeHostFile creates an empty FileOrCreate hostPath, 0644. Its parent
// directory must exist, as upstream requires.
func makeHostFile(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE, 0o644)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return err
	}
	return f.Close()
}

// validatePathNoBacksteps rejects paths with a ".." element.
func validatePathNoBacksteps(path string) error {
	for _, part := range strings.Split(filepath.ToSlash(path), "/") {
		if part == ".." {
			return fmt.Errorf("must not contain '..'")
		}
	}
	return nil
}
