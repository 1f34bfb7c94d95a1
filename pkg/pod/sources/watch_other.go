//go:build !linux

package sources

import "errors"

// Elsewhere than Linux the file source relies on its periodic relist alone.
func newDirWatcher(string) (dirWatcher, error) {
	return nil, errors.New("watching manifest directories is only supported on Linux")
}
