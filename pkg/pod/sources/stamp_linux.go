//go:build linux

package sources

import (
	"os"
	"syscall"
)

// stampOf identifies the content of the file info describes: the same inode with the
// same size, modification and change times (nanoseconds) has not been written since.
// The change time also moves on chmod, chown and hard-link changes, and cannot be set
// back by a writer, unlike the modification time.
func stampOf(info os.FileInfo) fileStamp {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return fileStamp{size: info.Size(), mtime: info.ModTime().UnixNano(), mode: info.Mode()}
	}
	return fileStamp{
		dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mode: info.Mode(),
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(),
	}
}
