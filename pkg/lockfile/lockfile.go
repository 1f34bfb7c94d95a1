// Package lockfile implements --lock-file and --exit-on-lock-contention: only one kubelet
// runs per lock file, and a running one can be asked to step aside by a newcomer.
package lockfile

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Lock is a held lock file.
type Lock struct{ f *os.File }

// Acquire creates path if needed and blocks until it holds an exclusive lock on it, as
// upstream's kubelet does: a second kubelet waits for the first to go away.
func Acquire(path string) (*Lock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file %q: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %q: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Release drops the lock.
func (l *Lock) Release() error { return l.f.Close() }

// WatchContention returns a channel closed when another process opens the lock file (a
// newcomer waiting for it) or the file is deleted. Call it after Acquire, so nodelet's own
// open does not count.
func WatchContention(path string) (<-chan struct{}, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_OPEN|unix.IN_DELETE_SELF); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch lock file %q: %w", path, err)
	}
	contended := make(chan struct{})
	go func() {
		defer unix.Close(fd)
		buf := make([]byte, unix.SizeofInotifyEvent+unix.PathMax+1)
		for {
			n, err := unix.Read(fd, buf)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n >= unix.SizeofInotifyEvent {
				close(contended)
				return
			}
		}
	}()
	return contended, nil
}
