package logs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// dirEvents is every inotify event that can mean new log data or a rotation:
// writes to a file in the directory, and files created, renamed or removed.
const dirEvents = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

// watchDir returns a channel that receives a value whenever something in dir
// changes, and a function that stops the watch. Changes that arrive while a
// value is already waiting are merged into it.
//
// Watching the directory instead of the file sees the runtime create the new
// file after a rotation. A container's log directory holds only that
// container's logs, so other changes are rare and only cost a look.
func watchDir(dir string) (<-chan struct{}, func(), error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, nil, os.NewSyscallError("inotify_init1", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, dirEvents); err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("failed to watch %q: %w", dir, os.NewSyscallError("inotify_add_watch", err))
	}
	// A non-blocking descriptor goes to Go's poller, so Close wakes the
	// blocked Read below and its goroutine ends.
	events := os.NewFile(uintptr(fd), "inotify")
	changes := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
		for {
			if _, err := events.Read(buf); err != nil {
				return
			}
			select {
			case changes <- struct{}{}:
			default:
			}
		}
	}()
	return changes, func() { events.Close() }, nil
}
