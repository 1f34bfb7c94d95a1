package csi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/node/volumes/mountpoint"
)

// isMountPoint reports whether dir is likely a mount point, as upstream's
// IsLikelyNotMountPoint judges (a bind mount from the same filesystem is missed).
func isMountPoint(dir string) (bool, error) {
	return mountpoint.OnOtherDevice(dir)
}

// removeMountDir removes a staging or target directory that is not mounted, the
// vol_data.json beside it and their parent, as upstream's removeMountDir. A directory
// still mounted is left alone without error: the driver did not unmount it, and removing
// it would be wrong. A non-empty directory is an error.
func removeMountDir(dir string) error {
	mounted, err := isMountPoint(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", logf("failed to check whether %s is mounted", dir), err)
	}
	if mounted {
		klog.V(4).InfoS(logf("directory is still mounted, leaving it"), "path", dir)
		return nil
	}
	parent := filepath.Dir(dir)
	for _, p := range []string{dir, filepath.Join(parent, volDataFileName), parent} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", logf("failed to remove [%s]", p), err)
		}
	}
	return nil
}

// cleanUpAfterFailure removes dir after an operation that certainly failed, logging
// rather than returning a failure to clean up: the operation's error matters more.
func cleanUpAfterFailure(dir string) {
	if err := removeMountDir(dir); err != nil {
		klog.ErrorS(err, logf("failed to remove mount dir after error"), "path", dir)
	}
}

// mkdirAllWithPathCheck creates dir like os.MkdirAll but fails when dir exists and is
// not a directory, as upstream's MkdirAllWithPathCheck.
func mkdirAllWithPathCheck(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case err == nil && !st.IsDir():
		return fmt.Errorf("path %q exists but is not a directory", dir)
	case err == nil:
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return os.MkdirAll(dir, dirPerm)
}
