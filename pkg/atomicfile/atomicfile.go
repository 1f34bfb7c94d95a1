// Package atomicfile writes the kubelet's state files (checkpoints, allocation and
// shutdown state) so that a reader, or a kubelet started after a crash, sees either the
// old content or the new one, never a torn file.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to a synced temporary file in path's directory and renames it over
// path. The temporary name starts with "." like upstream's checkpoint store's, whose
// listing skips such files, so a crash leaves nothing another kubelet would read.
func Write(path string, data []byte, perm os.FileMode) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(perm); err != nil {
		return err
	}
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
