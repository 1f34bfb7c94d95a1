// Package atomic projects a set of files into a directory so that a reader
// sees either the whole old set or the whole new set, never a mix. It is the
// kubelet's AtomicWriter, used by configMap, secret, downwardAPI and projected
// volumes, with the same layout on disk:
//
//	<target>/..2024_05_01_10_20_30.1234567890/   files of the current version
//	<target>/..data -> ..2024_05_01_10_20_30.1234567890
//	<target>/key -> ..data/key                    one link per top-level name
//
// A new version goes into a fresh timestamped directory and is published by
// renaming a "..data_tmp" symlink over "..data"; rename(2) is atomic, so a
// reader that resolves "..data" once sees one complete version. Names starting
// with ".." are reserved for the writer. A Writer is not safe for concurrent
// use: the caller serialises writes to one directory.
package atomic

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

const (
	maxFileNameLength = 255
	maxPathLength     = 4096

	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
	// tsDirLayout names a version's directory after the time it was
	// written (UTC); os.MkdirTemp appends a random suffix to it.
	tsDirLayout = "..2006_01_02_15_04_05."
	// tsDirMode lets group and others walk into the version directory
	// whatever the process umask; file modes say who may read.
	tsDirMode = 0o755
)

// FileProjection is one file of a payload: its content, its mode and, when
// set, the user that owns it.
type FileProjection struct {
	Data   []byte
	Mode   int32
	FsUser *int64
}

// Writer writes payloads into one target directory.
type Writer struct {
	targetDir  string
	logContext string
}

// NewWriter returns a Writer for targetDir, which must exist. logContext
// prefixes its log lines (upstream uses "pod <ns>/<name> volume <vol>").
func NewWriter(targetDir, logContext string) (*Writer, error) {
	if _, err := os.Stat(targetDir); err != nil {
		return nil, err
	}
	return &Writer{targetDir: targetDir, logContext: logContext}, nil
}

// Write makes the target directory hold exactly payload (keys are relative
// paths). When the content on disk already equals the payload nothing is
// rewritten; only missing top-level links are restored. Otherwise the new
// version is written, setPerms (if not nil) is called with the name of its
// timestamped directory before it is published, "..data" is swapped, links
// for new names are added, links for removed names and older versions are
// deleted. Like upstream, only content is compared: a mode change alone does
// not rewrite the files.
func (w *Writer) Write(payload map[string]FileProjection, setPerms func(subPath string) error) error {
	clean, err := validatePayload(payload)
	if err != nil {
		klog.ErrorS(err, "Invalid payload", "context", w.logContext)
		return err
	}
	current, err := w.currentVersion()
	if err != nil {
		return w.fail("reading the data directory link", err)
	}
	var stale []string
	changed := true
	if current != "" {
		currentPath := filepath.Join(w.targetDir, current)
		if stale, err = stalePaths(clean, currentPath); err != nil {
			return w.fail("listing the current version", err)
		}
		changed = contentDiffers(clean, currentPath)
	}
	if changed || len(stale) > 0 {
		if current, err = w.publish(clean, setPerms); err != nil {
			return err
		}
	} else {
		klog.V(4).InfoS("Write not required", "context", w.logContext, "version", current)
	}
	if err := w.linkVisible(clean); err != nil {
		return w.fail("creating visible links", err)
	}
	if err := w.unlinkVisible(stale); err != nil {
		return w.fail("removing old visible links", err)
	}
	if err := w.removeOtherVersions(current); err != nil {
		return w.fail("removing old versions", err)
	}
	return nil
}

func (w *Writer) fail(doing string, err error) error {
	klog.ErrorS(err, "Atomic write failed", "context", w.logContext, "step", doing, "dir", w.targetDir)
	return err
}

// validatePayload checks every path and returns the payload keyed by the
// cleaned paths.
func validatePayload(payload map[string]FileProjection) (map[string]FileProjection, error) {
	clean := make(map[string]FileProjection, len(payload))
	for p, f := range payload {
		if err := validatePath(p); err != nil {
			return nil, err
		}
		clean[filepath.Clean(p)] = f
	}
	return clean, nil
}

// validatePath refuses, with upstream's messages, a path that is empty,
// absolute, too long, has a ".." element or a name over 255 bytes, or starts
// with ".." (reserved for the writer's own names).
func validatePath(p string) error {
	if p == "" {
		return fmt.Errorf("invalid path: must not be empty: %q", p)
	}
	if path.IsAbs(p) {
		return fmt.Errorf("invalid path: must be relative path: %s", p)
	}
	if len(p) > maxPathLength {
		return fmt.Errorf("invalid path: must be less than or equal to %d characters", maxPathLength)
	}
	elems := strings.Split(p, "/")
	for _, e := range elems {
		if e == ".." {
			return fmt.Errorf("invalid path: must not contain '..': %s", p)
		}
		if len(e) > maxFileNameLength {
			return fmt.Errorf("invalid path: filenames must be less than or equal to %d characters", maxFileNameLength)
		}
	}
	if strings.HasPrefix(elems[0], "..") {
		return fmt.Errorf("invalid path: must not start with '..': %s", p)
	}
	if filepath.Clean(p) == "." {
		return fmt.Errorf("invalid path: must name a file: %s", p)
	}
	return nil
}

// currentVersion is the name of the directory "..data" points to, "" when
// nothing was published yet.
func (w *Writer) currentVersion() (string, error) {
	target, err := os.Readlink(filepath.Join(w.targetDir, dataDirName))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return target, err
}

// stalePaths lists the paths of the version in dir that the payload no
// longer has, neither as a file nor as a parent directory of one.
func stalePaths(payload map[string]FileProjection, dir string) ([]string, error) {
	wanted := map[string]bool{}
	for p := range payload {
		for ; p != "." && p != "/"; p = filepath.Dir(p) {
			wanted[p] = true
		}
	}
	var stale []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		if !wanted[rel] {
			stale = append(stale, rel)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		// "..data" points nowhere (a crash between swap and cleanup, or
		// someone removed it): nothing to compare, everything is rewritten.
		return nil, nil
	}
	return stale, err
}

// contentDiffers says whether dir is gone or any payload file is missing
// from it or has other content there.
func contentDiffers(payload map[string]FileProjection, dir string) bool {
	if _, err := os.Stat(dir); err != nil {
		return true
	}
	for p, f := range payload {
		full := filepath.Join(dir, p)
		if fi, err := os.Lstat(full); err != nil || !fi.Mode().IsRegular() {
			return true
		}
		old, err := os.ReadFile(full)
		if err != nil || !bytes.Equal(old, f.Data) {
			return true
		}
	}
	return false
}

// publish writes the payload into a new version directory and points
// "..data" at it. It returns the new version's name.
func (w *Writer) publish(payload map[string]FileProjection, setPerms func(string) error) (string, error) {
	tsDir, err := w.newVersionDir()
	if err != nil {
		return "", w.fail("creating a version directory", err)
	}
	version := filepath.Base(tsDir)
	if err := w.fillVersion(payload, tsDir, version, setPerms); err != nil {
		_ = os.RemoveAll(tsDir)
		return "", err
	}
	if err := w.swapDataLink(version); err != nil {
		_ = os.RemoveAll(tsDir)
		return "", w.fail("publishing the new version", err)
	}
	klog.V(4).InfoS("Published new version", "context", w.logContext, "version", version)
	return version, nil
}

func (w *Writer) newVersionDir() (string, error) {
	dir, err := os.MkdirTemp(w.targetDir, time.Now().UTC().Format(tsDirLayout))
	if err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, tsDirMode)
}

func (w *Writer) fillVersion(payload map[string]FileProjection, tsDir, version string, setPerms func(string) error) error {
	for p, f := range payload {
		if err := writeFile(filepath.Join(tsDir, p), f); err != nil {
			return w.fail("writing "+p, err)
		}
	}
	if setPerms != nil {
		if err := setPerms(version); err != nil {
			return w.fail("applying ownership", err)
		}
	}
	return nil
}

// writeFile creates one payload file with exactly its mode (chmod after
// create, so the umask does not matter) and owner.
func writeFile(full string, f FileProjection) error {
	if err := os.MkdirAll(filepath.Dir(full), tsDirMode); err != nil {
		return err
	}
	mode := os.FileMode(f.Mode)
	if err := os.WriteFile(full, f.Data, mode); err != nil {
		return err
	}
	if err := os.Chmod(full, mode); err != nil {
		return err
	}
	if f.FsUser != nil {
		return os.Lchown(full, int(*f.FsUser), -1)
	}
	return nil
}

// swapDataLink points "..data" at version by renaming a fresh "..data_tmp"
// link over it. A "..data_tmp" left by an interrupted write is replaced.
func (w *Writer) swapDataLink(version string) error {
	tmp := filepath.Join(w.targetDir, newDataDirName)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Symlink(version, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(w.targetDir, dataDirName)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// linkVisible creates "<name> -> ..data/<name>" for every top-level name of
// the payload that has no entry in the target directory yet. The link is
// owned by the FsUser of the first (sorted) file under that name.
func (w *Writer) linkVisible(payload map[string]FileProjection) error {
	paths := make([]string, 0, len(payload))
	for p := range payload {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		name, _, _ := strings.Cut(p, "/")
		link := filepath.Join(w.targetDir, name)
		if _, err := os.Lstat(link); !errors.Is(err, fs.ErrNotExist) {
			continue // present (or unreadable, which the symlink call would hit too)
		}
		if err := os.Symlink(filepath.Join(dataDirName, name), link); err != nil {
			return err
		}
		if u := payload[p].FsUser; u != nil {
			if err := os.Lchown(link, int(*u), -1); err != nil {
				return err
			}
		}
	}
	return nil
}

// unlinkVisible removes the top-level links of stale paths; stale nested
// paths disappear with their old version directory.
func (w *Writer) unlinkVisible(stale []string) error {
	var lastErr error
	for _, p := range stale {
		if strings.Contains(p, "/") {
			continue
		}
		if err := os.Remove(filepath.Join(w.targetDir, p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			lastErr = err
		}
	}
	return lastErr
}

// removeOtherVersions deletes every version directory but current: the one
// just replaced, and any left by a write that was interrupted before its
// swap.
func (w *Writer) removeOtherVersions(current string) error {
	entries, err := os.ReadDir(w.targetDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, "..") || name == current {
			continue
		}
		if err := os.RemoveAll(filepath.Join(w.targetDir, name)); err != nil {
			return err
		}
	}
	return nil
}
