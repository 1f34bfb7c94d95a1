//go:build linux

package sources

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The inotify events nodelet reacts to. Unlike upstream (fsnotify's IN_MODIFY), writes
// are seen at IN_CLOSE_WRITE, so a manifest is not parsed while half written.
const watchMask = unix.IN_CREATE | unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_ATTRIB |
	unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// inotifyWatcher watches one directory with inotify, read through the Go poller so that
// Close interrupts a pending read. (nodelet's go.mod has golang.org/x/sys but not
// fsnotify; this is the small part of fsnotify the file source needs.)
type inotifyWatcher struct {
	dir    string
	file   *os.File
	events chan watchEvent
	done   chan struct{}
}

func newDirWatcher(dir string) (dirWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("unable to create inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, watchMask); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("unable to create inotify for path %q: %w", dir, err)
	}
	w := &inotifyWatcher{
		dir:    dir,
		file:   os.NewFile(uintptr(fd), "inotify"),
		events: make(chan watchEvent, 64),
		done:   make(chan struct{}),
	}
	go w.readLoop()
	return w, nil
}

func (w *inotifyWatcher) Events() <-chan watchEvent { return w.events }

func (w *inotifyWatcher) Close() {
	select {
	case <-w.done:
	default:
		close(w.done)
		w.file.Close()
	}
}

func (w *inotifyWatcher) readLoop() {
	defer close(w.events)
	buf := make([]byte, 64*1024)
	for {
		n, err := w.file.Read(buf)
		if err != nil {
			return
		}
		if !w.dispatch(buf[:n]) {
			return
		}
	}
}

// dispatch forwards the events in buf; false means the watch is over.
func (w *inotifyWatcher) dispatch(buf []byte) bool {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		raw := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(raw.Len)]
		off += unix.SizeofInotifyEvent + int(raw.Len)
		name := string(bytes.TrimRight(nameBytes, "\x00"))

		if raw.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED|unix.IN_UNMOUNT) != 0 {
			return false
		}
		ev, ok := toWatchEvent(raw.Mask, w.dir, name)
		if !ok {
			continue
		}
		select {
		case w.events <- ev:
		case <-w.done:
			return false
		}
	}
	return true
}

func toWatchEvent(mask uint32, dir, name string) (watchEvent, bool) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		return watchEvent{op: opRescan}, true
	}
	if name == "" {
		return watchEvent{}, false
	}
	path := filepath.Join(dir, name)
	switch {
	case mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
		return watchEvent{path: path, op: opRemoved}, true
	case mask&unix.IN_MOVED_TO != 0:
		return watchEvent{path: path, op: opMovedIn}, true
	case mask&(unix.IN_CLOSE_WRITE|unix.IN_ATTRIB) != 0:
		return watchEvent{path: path, op: opWritten}, true
	case mask&unix.IN_CREATE != 0:
		return watchEvent{path: path, op: opCreated}, true
	}
	return watchEvent{}, false
}
