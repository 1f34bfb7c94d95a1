// Package ownership gives a volume's files to the pod's fsGroup, as
// upstream's SetVolumeOwnership does: every file and directory gets the
// group and group read/write (read-only for read-only volumes); directories
// also get group search and setgid, so files created later inherit the
// group. Symlinks get the group but are never followed.
package ownership

import (
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

const (
	rwMask   fs.FileMode = 0o660
	roMask   fs.FileMode = 0o440
	execMask fs.FileMode = 0o110
)

var (
	// firstWarningAfter is how long a walk runs before it is reported as
	// slow, and progressEvery how often its progress is logged after that.
	firstWarningAfter = 30 * time.Second
	progressEvery     = 60 * time.Second
	// warnf logs the progress of slow walks; replaced in tests.
	warnf = klog.Warningf
)

// Set gives dir and everything below it to the group fsGroup. A nil fsGroup
// leaves the volume alone. With policy OnRootMismatch the walk is skipped
// when dir already has the group, the permission bits and setgid; with
// Always (or nil) every file is visited each time. Failures to change a
// single file are logged, not returned, as upstream; failures to walk the
// tree are returned.
func Set(dir string, fsGroup *int64, policy *v1.PodFSGroupChangePolicy, readOnly bool) error {
	if fsGroup == nil {
		return nil
	}
	gid := int(*fsGroup)
	if policy != nil && *policy == v1.FSGroupChangeOnRootMismatch && rootMatches(dir, gid, readOnly) {
		klog.V(3).InfoS("Skipping permission and ownership change for volume", "path", dir)
		return nil
	}
	klog.V(4).InfoS("Perform recursive ownership change for directory", "path", dir)

	var files atomic.Int64
	stop := reportProgress(dir, &files)
	defer stop()
	return walkDeep(dir, func(path string, info fs.FileInfo) {
		files.Add(1)
		changeFile(path, info, gid, readOnly)
	})
}

// changeFile gives one file to gid and adds the group permission bits.
func changeFile(path string, info fs.FileInfo, gid int, readOnly bool) {
	if err := os.Lchown(path, -1, gid); err != nil {
		klog.ErrorS(err, "Lchown failed", "path", path)
	}
	// chmod follows symlinks: it would change the target's mode, which may
	// lie outside the volume or have a mode the volume plugin chose.
	if info.Mode()&fs.ModeSymlink != 0 {
		return
	}
	if err := os.Chmod(path, info.Mode()|wantedBits(info.IsDir(), readOnly)); err != nil {
		klog.ErrorS(err, "chmod failed", "path", path)
	}
}

// wantedBits are the mode bits a file of the volume must have.
func wantedBits(isDir, readOnly bool) fs.FileMode {
	bits := rwMask
	if readOnly {
		bits = roMask
	}
	if isDir {
		bits |= execMask | fs.ModeSetgid
	}
	return bits
}

// rootMatches reports whether the volume's root directory already has gid
// and the wanted bits. The root is changed last, so a matching root means an
// earlier walk finished.
func rootMatches(dir string, gid int, readOnly bool) bool {
	info, err := os.Stat(dir)
	if err != nil {
		klog.ErrorS(err, "Performing recursive ownership change on rootDir because reading permissions of root volume failed", "path", dir)
		return false
	}
	stat, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		klog.ErrorS(nil, "Performing recursive ownership change on rootDir because reading permissions of root volume failed", "path", dir)
		return false
	}
	if int(stat.Gid) != gid {
		klog.V(4).InfoS("Expected group ownership of volume did not match with Gid", "path", dir, "GID", stat.Gid)
		return false
	}
	if !info.IsDir() {
		return false
	}
	want := wantedBits(true, readOnly)
	if info.Mode()&want != want {
		klog.V(4).InfoS("Performing recursive ownership change on rootDir because of mismatching mode", "path", dir)
		return false
	}
	return true
}

// walkDeep calls visit for every file under root, children before their
// directory and root last, without following symlinks. Entries are visited
// in directory order, unsorted, to keep large volumes fast.
func walkDeep(root string, visit func(path string, info fs.FileInfo)) error {
	info, err := os.Lstat(root)
	if err != nil {
		return err
	}
	return walk(root, info, visit)
}

func walk(path string, info fs.FileInfo, visit func(string, fs.FileInfo)) error {
	if info.IsDir() {
		names, err := readDirNames(path)
		if err != nil {
			return err
		}
		for _, name := range names {
			child := filepath.Join(path, name)
			childInfo, err := os.Lstat(child)
			if err != nil {
				return err
			}
			if err := walk(child, childInfo, visit); err != nil {
				return err
			}
		}
	}
	visit(path, info)
	return nil
}

func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// reportProgress warns once a walk of dir has run for firstWarningAfter and
// then logs the number of files done every progressEvery, until stop is
// called.
func reportProgress(dir string, files *atomic.Int64) (stop func()) {
	done := make(chan struct{})
	timer := time.AfterFunc(firstWarningAfter, func() {
		warnf("Setting volume ownership for %s and fsGroup set. If the volume has a lot of files then setting volume ownership could be slow, see https://github.com/kubernetes/kubernetes/issues/69699", dir)
		ticker := time.NewTicker(progressEvery)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				warnf("Setting volume ownership for %s, processed %d files.", dir, files.Load())
			}
		}
	})
	return func() {
		timer.Stop()
		close(done)
	}
}
