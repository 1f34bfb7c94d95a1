//go:build linux

package pluginwatcher

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// watchMask is what fsnotify turns into the Create (IN_CREATE, IN_MOVED_TO) and Remove
// (IN_DELETE) events upstream's watcher acts on.
const watchMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_DELETE | unix.IN_ONLYDIR

// inotify is the part of fsnotify the watcher needs (nodelet's go.mod has
// golang.org/x/sys but not fsnotify): several directories on one inotify descriptor,
// read through the Go poller so that close interrupts a pending read.
type inotify struct {
	fd   int
	file *os.File
	buf  []byte

	mu   sync.Mutex
	dirs map[int32]string // by watch descriptor
}

func newNotifier() (notifier, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	return &inotify{
		fd:   fd,
		file: os.NewFile(uintptr(fd), "inotify"),
		buf:  make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1)),
		dirs: map[int32]string{},
	}, nil
}

// add watches dir; watching it again (same inode) only renews the watch.
func (in *inotify) add(dir string) error {
	wd, err := unix.InotifyAddWatch(in.fd, dir, watchMask)
	if err != nil {
		return os.NewSyscallError("inotify_add_watch", err)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.dirs[int32(wd)] = filepath.Clean(dir)
	return nil
}

func (in *inotify) read() ([]fsEvent, error) {
	n, err := in.file.Read(in.buf)
	if err != nil {
		return nil, err
	}
	return in.parse(in.buf[:n]), nil
}

func (in *inotify) close() error { return in.file.Close() }

// parse decodes a read's inotify_event records: wd, mask, cookie, len, then len bytes
// of NUL-padded name.
func (in *inotify) parse(buf []byte) []fsEvent {
	var events []fsEvent
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		wd := int32(binary.NativeEndian.Uint32(buf[off:]))
		mask := binary.NativeEndian.Uint32(buf[off+4:])
		nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
		off += unix.SizeofInotifyEvent
		name := string(bytes.TrimRight(buf[off:off+nameLen], "\x00"))
		off += nameLen
		if ev, ok := in.toEvent(wd, mask, name); ok {
			events = append(events, ev)
		}
	}
	return events
}

func (in *inotify) toEvent(wd int32, mask uint32, name string) (fsEvent, bool) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		return fsEvent{op: opOverflow}, true
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if mask&unix.IN_IGNORED != 0 { // the directory is gone, or no longer watched
		delete(in.dirs, wd)
		return fsEvent{}, false
	}
	dir, ok := in.dirs[wd]
	if !ok || name == "" {
		return fsEvent{}, false
	}
	path := filepath.Join(dir, name)
	switch {
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		return fsEvent{path: path, op: opCreate}, true
	case mask&unix.IN_DELETE != 0:
		return fsEvent{path: path, op: opRemove}, true
	}
	return fsEvent{}, false
}
