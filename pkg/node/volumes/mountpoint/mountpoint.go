// Package mountpoint tells whether a path is mounted on without reading the mount
// table. The table grows with every pod's volumes (each projected or memory-backed
// volume is a tmpfs), so reading it at every pod sync costs O(pods) per sync and
// O(pods²) per resync period: with 110 pods that was most of an idle kubelet's CPU.
package mountpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Root reports whether path is the root of a mount, as statx(2) says since Linux 5.8:
// exactly, bind mounts from the same filesystem included. known is false on older
// kernels, which do not say; callers then fall back to the mount table or to
// OnOtherDevice. followLast follows a symlink in path's last element.
func Root(path string, followLast bool) (root, known bool, err error) {
	flags := 0
	if !followLast {
		flags = unix.AT_SYMLINK_NOFOLLOW
	}
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, flags, unix.STATX_BASIC_STATS, &st); err != nil {
		return false, false, &fs.PathError{Op: "statx", Path: path, Err: err}
	}
	if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return false, false, nil
	}
	return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, true, nil
}

// OnOtherDevice reports whether dir is on another device than its parent: the negation
// of upstream's IsLikelyNotMountPoint, which misses a bind mount from the same
// filesystem. A missing dir is not mounted.
func OnOtherDevice(dir string) (bool, error) {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	parent, err := os.Lstat(filepath.Dir(filepath.Clean(dir)))
	if err != nil {
		return false, err
	}
	return st.Sys().(*syscall.Stat_t).Dev != parent.Sys().(*syscall.Stat_t).Dev, nil
}

// IsTmpfs reports whether the filesystem mounted on top at path is a tmpfs.
func IsTmpfs(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, &fs.PathError{Op: "statfs", Path: path, Err: err}
	}
	return st.Type == unix.TMPFS_MAGIC, nil
}
