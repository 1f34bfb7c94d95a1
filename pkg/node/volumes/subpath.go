package volumes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// A volumeMount's subPath is not handed to the runtime as a path: a container that can
// write the volume could swap a directory of it for a symlink between nodelet's check
// and the runtime's mount, and get any host path mounted (CVE-2017-1002101). As
// upstream's kubelet does (pkg/volume/util/subpath), nodelet opens the subPath one
// component at a time without following symlinks, bind-mounts the file descriptor it
// ends with into the pod's directory, and gives the runtime that mount: it is the file
// nodelet checked, whatever happens in the volume afterwards.
//
// The mounts are laid out as upstream lays them out, so that a pod directory moves
// between nodelet and the kubelet either way:
//
//	<pod dir>/volume-subpaths/<volume>/<container>/<volumeMount index>
//
// <volume> is upstream's InnerVolumeSpecName: the pod's volume name, or the persistent
// volume's name for a claim.

// subPathsDir is the directory of the subPath bind mounts under a pod's directory.
const subPathsDir = "volume-subpaths"

// subPath is one volumeMount's subPath and where its bind mount goes.
type subPath struct {
	volumePath string // the volume on the host
	path       string // the subPath, relative to volumePath
	mountName  string // the volumeMount's name, for errors
	podDir     string
	volumeName string // upstream's InnerVolumeSpecName
	container  string
	index      int // of the volumeMount in the container's volumeMounts
}

// target is where the subPath is bind-mounted (upstream's getSubpathBindTarget).
// Container names are DNS labels, safe as directory names.
func (sp *subPath) target() string {
	return filepath.Join(sp.podDir, subPathsDir, sp.volumeName, sp.container, strconv.Itoa(sp.index))
}

// prepareSubPath returns the host path to give the runtime for a volumeMount's subPath:
// the subPath bind-mounted at sp.target(). A missing subPath is created as a directory
// with the volume's mode. Neither the subPath nor a symlink in it may lead out of the
// volume. As upstream, detailed errors are logged rather than returned, because they
// could tell the pod's author about the host's filesystem.
func (m *Manager) prepareSubPath(sp *subPath) (string, error) {
	if filepath.IsAbs(sp.path) {
		return "", fmt.Errorf("error SubPath `%s` must not be an absolute path", sp.path)
	}
	if err := validatePathNoBacksteps(sp.path); err != nil {
		return "", fmt.Errorf("unable to provision SubPath `%s`: %v", sp.path, err)
	}
	if _, err := os.Stat(filepath.Join(sp.volumePath, sp.path)); errors.Is(err, os.ErrNotExist) {
		// Created now rather than by the runtime, which would give it its own mode.
		if err := safeMakeDir(sp.volumePath, sp.path); err != nil {
			klog.ErrorS(err, "Failed to create subPath directory for volumeMount of the container", "containerName", sp.container, "volumeMountName", sp.mountName)
			return "", fmt.Errorf("failed to create subPath directory for volumeMount %q of container %q", sp.mountName, sp.container)
		}
	}
	target, err := m.bindSubPath(sp)
	if err != nil {
		klog.ErrorS(err, "Failed to prepare subPath for volumeMount of the container", "containerName", sp.container, "volumeMountName", sp.mountName)
		return "", fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q", sp.mountName, sp.container)
	}
	return target, nil
}

// Flags of the file descriptors the subPath is walked with. O_PATH opens without
// reading, so a fifo swapped in cannot block the walk; O_NOFOLLOW opens a symlink itself
// rather than its target, and the walk refuses it.
const (
	walkFlags  = unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC
	mkdirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
)

// openBeneath opens root/rel and returns its file descriptor. root is opened as given
// (it must be a directory, not a symlink: the caller resolved it) and then every
// component of rel with openat(2) on its parent's descriptor, never following a
// symlink: a symlink anywhere, the last component included, is refused. rel is
// relative, without "..": once root is open, nothing outside it can be reached. This
// is upstream's doSafeOpen.
func openBeneath(root, rel string) (int, error) {
	rel = filepath.Clean(rel)
	if _, err := relWithin(root, filepath.Join(root, rel)); err != nil || filepath.IsAbs(rel) {
		return -1, fmt.Errorf("path %s is outside of allowed base %s", filepath.Join(root, rel), root)
	}
	fd, err := unix.Open(root, walkFlags|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, fmt.Errorf("cannot open directory %s: %w", root, err)
	}
	if rel == "." {
		return fd, nil
	}
	path := root
	for _, name := range strings.Split(rel, "/") {
		path = filepath.Join(path, name)
		// Opening with O_PATH does not trigger an automount; a stat of "name/" does
		// (upstream does the same). Its result does not matter.
		var st unix.Stat_t
		_ = unix.Fstatat(fd, name+"/", &st, unix.AT_SYMLINK_NOFOLLOW)

		child, err := unix.Openat(fd, name, walkFlags, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("cannot open %s: %w", path, err)
		}
		if err := unix.Fstat(child, &st); err != nil {
			unix.Close(child)
			return -1, fmt.Errorf("error running fstat on %s with %w", path, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(child)
			return -1, fmt.Errorf("unexpected symlink found %s", path)
		}
		fd = child
	}
	return fd, nil
}

// safeMakeDir creates the missing directories of subPath in the volume at volumePath,
// with the mode of the volume's root (upstream's SafeMakeDir, with the mode its caller
// takes from the volume). The part of subPath that exists may go through symlinks that
// stay inside the volume, as upstream allows; it is resolved, checked to be inside the
// volume, and then opened without following symlinks, so that a symlink swapped in
// after the check is refused.
func safeMakeDir(volumePath, subPath string) error {
	root, err := filepath.EvalSymlinks(volumePath)
	if err != nil {
		return fmt.Errorf("error resolving symlinks in %s: %w", volumePath, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		return fmt.Errorf("stat %s: %w", root, err)
	}
	existing, missing, err := findExistingPrefix(root, subPath)
	if err != nil {
		return err
	}
	resolved, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return fmt.Errorf("error opening directory %s: %w", existing, err)
	}
	rel, err := relWithin(root, resolved)
	if err != nil {
		return err
	}
	return makeDirsBeneath(root, rel, missing, st.Mode&0o7777)
}

// findExistingPrefix splits root/subPath into its longest prefix that exists
// (following symlinks) and the names below it that do not.
func findExistingPrefix(root, subPath string) (string, []string, error) {
	existing := root
	names := strings.Split(filepath.Clean(subPath), "/")
	for i, name := range names {
		next := filepath.Join(existing, name)
		if _, err := os.Stat(next); errors.Is(err, os.ErrNotExist) {
			return existing, names[i:], nil
		} else if err != nil {
			return "", nil, err
		}
		existing = next
	}
	return existing, nil, nil
}

// makeDirsBeneath opens root/existing with openBeneath and creates the missing
// directories below it one at a time: mkdirat(2) on the parent's descriptor, then
// openat(2) of the new directory without following a symlink, so that a directory
// swapped for a symlink after its creation is refused rather than followed. Each
// directory created gets mode perm (the umask does not apply). A directory that
// appeared meanwhile (a concurrent set-up of the same subPath) is used as it is.
func makeDirsBeneath(root, existing string, missing []string, perm uint32) error {
	fd, err := openBeneath(root, existing)
	if err != nil {
		return err
	}
	defer func() { unix.Close(fd) }()
	path := filepath.Join(root, existing)
	for _, name := range missing {
		path = filepath.Join(path, name)
		if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
			return fmt.Errorf("invalid directory name %q", name)
		}
		created := true
		if err := unix.Mkdirat(fd, name, perm); errors.Is(err, unix.EEXIST) {
			created = false
		} else if err != nil {
			return fmt.Errorf("cannot create directory %s: %w", path, err)
		}
		child, err := unix.Openat(fd, name, mkdirFlags, 0)
		if err != nil {
			return fmt.Errorf("cannot open %s: %w", path, err)
		}
		unix.Close(fd)
		fd = child
		if created {
			// mkdirat's mode was reduced by the umask; the subPath must match the volume.
			if err := unix.Fchmod(fd, perm); err != nil {
				return fmt.Errorf("chmod %q failed: %w", path, err)
			}
		}
	}
	return nil
}

// relWithin returns path relative to base; path must be base or below it.
func relWithin(base, path string) (string, error) {
	rel, err := filepath.Rel(base, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("path %s is outside of allowed base %s", path, base)
	}
	return rel, nil
}

// bindSubPath opens the subPath without following symlinks and bind-mounts the open
// file at sp.target() through /proc/self/fd, unless the target already is a mount of
// that same file (a container restart, or a restart of nodelet). This is upstream's
// doBindSubPath. Symlinks inside the volume were resolved first, once, as upstream does
// (a configMap's keys are symlinks into its "..data" directory), and the result must be
// inside the volume.
func (m *Manager) bindSubPath(sp *subPath) (string, error) {
	root, err := filepath.EvalSymlinks(sp.volumePath)
	if err != nil {
		return "", fmt.Errorf("error resolving symlinks in %q: %w", sp.volumePath, err)
	}
	path, err := filepath.EvalSymlinks(filepath.Join(root, sp.path))
	if err != nil {
		return "", fmt.Errorf("error resolving symlinks in %q: %w", filepath.Join(sp.volumePath, sp.path), err)
	}
	rel, err := relWithin(root, path)
	if err != nil {
		return "", fmt.Errorf("subpath %q not within volume path %q", path, root)
	}
	fd, err := openBeneath(root, rel)
	if err != nil {
		return "", fmt.Errorf("error opening subpath %v: %w", path, err)
	}
	// The mount holds the file; the descriptor is not needed once it is made.
	defer unix.Close(fd)
	var src unix.Stat_t
	if err := unix.Fstat(fd, &src); err != nil {
		return "", fmt.Errorf("stat %s: %w", path, err)
	}

	target := sp.target()
	mounted, err := m.prepareSubPathTarget(target, &src)
	if err != nil {
		return "", err
	}
	if mounted {
		return target, nil
	}
	source := fmt.Sprintf("/proc/self/fd/%d", fd)
	klog.V(5).InfoS("Bind-mounting subPath", "path", path, "source", source, "target", target)
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		m.removeSubPathTarget(sp)
		return "", fmt.Errorf("error mounting %s: %w", path, err)
	}
	// The mount must show the file that was opened, nothing else.
	if same, err := sameFile(target, &src); err != nil || !same {
		m.removeSubPathTarget(sp)
		if err == nil {
			err = fmt.Errorf("%s is not the file opened", target)
		}
		return "", fmt.Errorf("error checking subpath mount %s of %s: %w", target, path, err)
	}
	klog.V(3).InfoS("Bound subPath", "path", path, "target", target)
	return target, nil
}

// prepareSubPathTarget makes target ready for a bind mount of src: a directory for a
// directory, an empty file for anything else (a mount on a file can show a file, a
// device, a socket or a fifo). It reports true when target already is a mount of src.
// A mount of something else there is removed first (upstream's prepareSubpathTarget).
func (m *Manager) prepareSubPathTarget(target string, src *unix.Stat_t) (bool, error) {
	mounts, err := m.mountsAt(target)
	if err != nil {
		return false, fmt.Errorf("error checking path %s for mount: %w", target, err)
	}
	if mounts > 0 {
		if same, err := sameFile(target, src); err == nil && same {
			klog.V(5).InfoS("Subpath already mounted", "target", target)
			return true, nil
		}
		// A mount of another file (the subPath was replaced), or one that cannot be
		// stat'ed any more (a stale network mount): unmount it and bind anew.
		klog.V(4).InfoS("Subpath target mounts another file, unmounting it", "target", target)
		if err := m.unmountSubPath(target); err != nil {
			return false, err
		}
	}
	if err := mkdirAll(filepath.Dir(target)); err != nil {
		return false, err
	}
	wantDir := src.Mode&unix.S_IFMT == unix.S_IFDIR
	if info, err := os.Lstat(target); err == nil && (info.IsDir() != wantDir || info.Mode()&os.ModeSymlink != 0) {
		// Left from a subPath of the other type (or not nodelet's: a mount would follow
		// a symlink). Nothing is mounted there, and a directory is removed only when empty.
		if err := os.Remove(target); err != nil {
			return false, fmt.Errorf("error removing %s: %w", target, err)
		}
	}
	if wantDir {
		if err := os.Mkdir(target, dirPerm); err != nil && !errors.Is(err, os.ErrExist) {
			return false, fmt.Errorf("error creating directory %s: %w", target, err)
		}
		return false, nil
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|unix.O_NOFOLLOW, 0o640)
	if err != nil {
		return false, fmt.Errorf("error creating file %s: %w", target, err)
	}
	return false, f.Close()
}

// sameFile reports whether path (not followed if a symlink) is the file st describes.
func sameFile(path string, st *unix.Stat_t) (bool, error) {
	var t unix.Stat_t
	if err := unix.Lstat(path, &t); err != nil {
		return false, fmt.Errorf("lstat %s failed: %w", path, err)
	}
	return t.Dev == st.Dev && t.Ino == st.Ino, nil
}

// mountsAt counts the mounts stacked exactly at path, as the mount table lists them.
// Only path's parent is resolved: path itself may be a stale mount that cannot be
// looked up, or not exist.
func (m *Manager) mountsAt(path string) (int, error) {
	parent, err := filepath.EvalSymlinks(filepath.Dir(path))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	resolved := filepath.Join(parent, filepath.Base(path))
	mounts, err := readMountInfo(m.mountInfoPath)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, mnt := range mounts {
		if mnt.mountPoint == resolved {
			n++
		}
	}
	return n, nil
}

// maxStackedMounts bounds the unmounts of one subPath target: each sync stacks at most
// one mount there, and a mount table that keeps listing it must not loop forever.
const maxStackedMounts = 64

// unmountSubPath unmounts every mount stacked at a subPath target. Each is first made
// private with what is mounted below it: the bind of a directory on a shared mount
// joins the source's peer group, so mounts the host makes under the source show up
// under the target too, and unmounting those copies would unmount the originals on
// the host. Then it is detached (upstream unmounts a stale target lazily too).
func (m *Manager) unmountSubPath(target string) error {
	for range maxStackedMounts {
		n, err := m.mountsAt(target)
		if err != nil || n == 0 {
			return err
		}
		klog.V(4).InfoS("Unmounting subPath", "target", target)
		if err := unix.Mount("", target, "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			if errors.Is(err, unix.EINVAL) { // not a mount point, whatever the table says
				return nil
			}
			return fmt.Errorf("error making %s private: %w", target, err)
		}
		if err := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("error unmounting %s: %w", target, err)
		}
	}
	return fmt.Errorf("error unmounting %s: still mounted after %d unmounts", target, maxStackedMounts)
}

// removeSubPathTarget undoes a failed bindSubPath: the target is unmounted if it got
// mounted, removed, and so are its parents up to the pod's directory while they are
// empty (upstream's cleanSubPath). Failures are logged: the pod's teardown retries.
func (m *Manager) removeSubPathTarget(sp *subPath) {
	target := sp.target()
	if err := m.unmountSubPath(target); err != nil {
		klog.ErrorS(err, "Failed to clean up subPath target", "target", target)
		return
	}
	for dir := target; dir != sp.podDir && strings.HasPrefix(dir, sp.podDir+"/"); dir = filepath.Dir(dir) {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			if !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
				klog.ErrorS(err, "Failed to clean up subPath target", "path", dir)
			}
			return
		}
	}
}

// cleanSubPaths unmounts and removes every subPath bind mount in the pod's directory:
// upstream's CleanSubPaths, for all the pod's volumes at once. It reads what to clean
// from the directory and the mount table, not from memory, so it finds the mounts of
// an earlier nodelet process (one killed between a bind mount and its container's
// start) or of the kubelet. It never removes through a mount: everything mounted below
// volume-subpaths is unmounted (what the host propagated below a target without
// unmounting it on the host, see unmountAllUnder) and the table checked to list
// nothing left before anything is removed, and the removal goes one entry at a time
// with os.Remove, which removes no directory that has content.
func (m *Manager) cleanSubPaths(podDir string) error {
	base := filepath.Join(podDir, subPathsDir)
	if _, err := os.Lstat(base); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := m.unmountAllUnder(base); err != nil {
		return err
	}
	if err := removeSubPathsTree(base, 3); err != nil {
		return fmt.Errorf("removing %s: %w", base, err)
	}
	klog.V(4).InfoS("Cleaned up subPath mounts", "path", base)
	return nil
}

// removeSubPathsTree removes dir, the layout's directories depth levels down from it,
// and the targets (empty files and directories) below them, entry by entry. Symlinks
// are removed, not followed; a target directory that has content is an error.
func removeSubPathsTree(dir string, depth int) error {
	if depth > 0 {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			if e.IsDir() {
				if err := removeSubPathsTree(path, depth-1); err != nil {
					return err
				}
			} else if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
