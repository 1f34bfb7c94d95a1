//go:build !linux

package logs

import "errors"

// watchDir is only implemented with inotify; elsewhere followers poll.
func watchDir(string) (<-chan struct{}, func(), error) {
	return nil, nil, errors.New("watching files is not supported on this platform")
}
