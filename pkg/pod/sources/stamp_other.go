//go:build !linux

package sources

import "os"

// stampOf identifies the content of the file info describes by its size, mode and
// modification time (inode and change time are Linux-only here).
func stampOf(info os.FileInfo) fileStamp {
	return fileStamp{size: info.Size(), mtime: info.ModTime().UnixNano(), mode: info.Mode()}
}
