package stats

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// fsInfo is a filesystem's size, as statfs(2) tells it.
type fsInfo struct {
	time                                     time.Time
	capacity, available, used, inodes, ifree uint64
}

func statFS(path string, now time.Time) (fsInfo, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return fsInfo{}, err
	}
	bsize := uint64(st.Bsize)
	return fsInfo{
		time:      now,
		capacity:  st.Blocks * bsize,
		available: st.Bavail * bsize,
		used:      (st.Blocks - st.Bfree) * bsize,
		inodes:    st.Files,
		ifree:     st.Ffree,
	}, nil
}

// fsStats is the filesystem part of an FsStats (no usage), as upstream fills
// it for logs, rootfs and ephemeral storage from the filesystem's info.
func (f fsInfo) fsStats() *statsapi.FsStats {
	return &statsapi.FsStats{
		Time:           metaTime(f.time),
		AvailableBytes: ptrTo(f.available),
		CapacityBytes:  ptrTo(f.capacity),
		InodesFree:     ptrTo(f.ifree),
		Inodes:         ptrTo(f.inodes),
	}
}

// fullStats is the filesystem's own FsStats, used included (node fs, image fs).
func (f fsInfo) fullStats() *statsapi.FsStats {
	s := f.fsStats()
	s.UsedBytes = ptrTo(f.used)
	s.InodesUsed = ptrTo(f.inodes - min(f.inodes, f.ifree))
	return s
}

// diskUsage is what `du` counts under path: allocated bytes (512-byte
// blocks) and inodes, hard links counted once, without crossing into other
// filesystems, as upstream's volume and log metrics count them.
type diskUsage struct {
	bytes, inodes uint64
}

func duPath(root string) (diskUsage, error) {
	var top syscall.Stat_t
	if err := syscall.Lstat(root, &top); err != nil {
		return diskUsage{}, err
	}
	var u diskUsage
	seen := map[uint64]struct{}{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // deleted while we walked
			}
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if st.Dev != top.Dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			if _, dup := seen[st.Ino]; dup {
				return nil
			}
			seen[st.Ino] = struct{}{}
		}
		u.bytes += uint64(st.Blocks) * 512
		u.inodes++
		return nil
	})
	return u, err
}

// filesUsage is the disk usage of the regular files directly in dir (not
// its subdirectories), as upstream counts pod and container log usage.
func filesUsage(dir string) (diskUsage, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return diskUsage{}, err
	}
	var u diskUsage
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, e.Name()), &st); err != nil {
			continue // rotated away meanwhile
		}
		u.bytes += uint64(st.Blocks) * 512
		u.inodes++
	}
	return u, nil
}
