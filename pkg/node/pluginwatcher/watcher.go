package pluginwatcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/klog/v2"
)

// dirMode is the registry directory's mode when it has to be created; upstream's kubelet
// creates it 0750 in setupDataDirs before the plugin manager starts.
const dirMode = 0o750

// fsOp is what happened to a path: fsnotify's Create and Remove, the only events
// upstream's watcher acts on, or a lost event.
type fsOp int

const (
	opCreate fsOp = iota
	opRemove
	opOverflow // the kernel's queue overflowed: events were lost
)

type fsEvent struct {
	path string
	op   fsOp
}

// notifier reports entries created in (or moved into) and deleted from the directories
// added to it; inotify on Linux.
type notifier interface {
	add(dir string) error
	// read blocks until there are events, or returns the error that ends the watch
	// (close makes it return).
	read() ([]fsEvent, error)
	close() error
}

// watcher is upstream's plugin watcher, the desired state's populator: it follows the
// sockets created and deleted under dir and its sub-directories.
type watcher struct {
	dir     string
	fs      notifier
	desired *desiredState
}

// startWatcher creates dir when missing, watches it, and records the sockets already
// in it. The caller runs loop to follow later changes.
func startWatcher(ctx context.Context, dir string, desired *desiredState) (*watcher, error) {
	logger := klog.FromContext(ctx)
	logger.V(2).Info("Plugin Watcher Start", "path", dir)
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, fmt.Errorf("error (re-)creating root %s: %v", dir, err)
	}
	fsw, err := newNotifier()
	if err != nil {
		return nil, fmt.Errorf("failed to start plugin fsWatcher, err: %v", err)
	}
	// Upstream only logs a registry it cannot watch; nodelet returns the error, since
	// no plugin could ever register. Failures further down are only logged, as upstream.
	if err := fsw.add(dir); err != nil {
		_ = fsw.close()
		return nil, fmt.Errorf("failed to watch %s, err: %v", dir, err)
	}
	w := &watcher{dir: dir, fs: fsw, desired: desired}
	if err := w.walk(ctx, dir); err != nil {
		logger.Error(err, "Failed to traverse plugin socket path", "path", dir)
	}
	return w, nil
}

// loop handles file system events until ctx ends, then stops watching.
func (w *watcher) loop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	closeOnDone := context.AfterFunc(ctx, func() { _ = w.fs.close() })
	defer func() {
		if closeOnDone() {
			_ = w.fs.close()
		}
	}()
	for {
		events, err := w.fs.read()
		if err != nil {
			if ctx.Err() == nil {
				logger.Error(err, "Plugin watcher stopped: cannot read file system events", "path", w.dir)
			}
			return
		}
		for _, event := range events {
			w.handleEvent(ctx, event)
		}
	}
}

// handleEvent follows creations and removals only, as upstream does: a socket renamed
// away is not noticed.
func (w *watcher) handleEvent(ctx context.Context, event fsEvent) {
	logger := klog.FromContext(ctx)
	switch event.op {
	case opCreate:
		if err := w.handleCreate(ctx, event.path); err != nil {
			logger.Error(err, "Error when handling create event", "path", event.path)
		}
	case opRemove:
		w.handleRemove(ctx, event.path)
	case opOverflow:
		logger.Error(errors.New("inotify event queue overflow"), "FsWatcher received error")
	}
}

// handleCreate records a new socket, or watches and walks a new directory. Names starting
// with a dot and anything that is not a socket are ignored.
func (w *watcher) handleCreate(ctx context.Context, path string) error {
	logger := klog.FromContext(ctx)
	logger.V(6).Info("Handling create event", "path", path)
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat file %s failed: %v", path, err)
	}
	if strings.HasPrefix(fi.Name(), ".") {
		logger.V(5).Info("Ignoring file (starts with '.')", "path", fi.Name())
		return nil
	}
	if fi.IsDir() {
		return w.traverse(ctx, path)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		logger.V(5).Info("Ignoring non socket file", "path", fi.Name())
		return nil
	}
	// The socket may already be known: it can be deleted and re-created before the
	// deletion is handled, so its generation is renewed either way.
	logger.V(2).Info("Adding socket path or updating timestamp to desired state cache", "path", path)
	w.desired.add(path)
	return nil
}

func (w *watcher) handleRemove(ctx context.Context, path string) {
	klog.FromContext(ctx).V(2).Info("Removing socket path from desired state cache", "path", path)
	w.desired.remove(path)
}

// traverse watches dir, then walks it for the sockets and sub-directories already there
// (sockets created before the watch was added would otherwise be missed).
func (w *watcher) traverse(ctx context.Context, dir string) error {
	if err := w.fs.add(dir); err != nil {
		return fmt.Errorf("failed to watch %s, err: %v", dir, err)
	}
	return w.walk(ctx, dir)
}

// walk watches the sub-directories of the watched dir and records its sockets. Only a
// failure to watch a sub-directory (which ends the walk, as upstream's), or to read dir
// itself, is returned; other errors are logged.
func (w *watcher) walk(ctx context.Context, dir string) error {
	logger := klog.FromContext(ctx)
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil && path == dir:
			return fmt.Errorf("error accessing path: %s error: %v", path, err)
		case err != nil:
			logger.Error(err, "Error accessing path", "path", path)
			return nil
		case path == dir:
			return nil // already watched
		case d.IsDir():
			if err := w.fs.add(path); err != nil {
				return fmt.Errorf("failed to watch %s, err: %v", path, err)
			}
		case isSocket(path):
			if err := w.handleCreate(ctx, path); err != nil {
				logger.Error(err, "Error when handling create", "path", path)
			}
		default:
			logger.V(5).Info("Ignoring file", "path", path, "mode", d.Type())
		}
		return nil
	})
}

// isSocket follows symbolic links, as upstream's IsUnixDomainSocket does.
func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}
