package volumes

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

const selfMountInfo = "/proc/self/mountinfo"

// mountEntry is one line of a mountinfo file.
type mountEntry struct {
	mountPoint string
	fsType     string
}

// readMountInfo reads the mount table at path.
func readMountInfo(path string) ([]mountEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountInfo(f)
}

// parseMountInfo parses proc(5) mountinfo lines:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// The fifth field is the mount point; the field after the "-" separator is
// the filesystem type.
func parseMountInfo(r io.Reader) ([]mountEntry, error) {
	var mounts []mountEntry
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 64*1024), 1024*1024)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		sep := indexOf(fields, "-")
		if len(fields) < 5 || sep < 5 || sep+1 >= len(fields) {
			return nil, fmt.Errorf("malformed mountinfo line %q", scanner.Text())
		}
		mounts = append(mounts, mountEntry{mountPoint: unescapeOctal(fields[4]), fsType: fields[sep+1]})
	}
	return mounts, scanner.Err()
}

func indexOf(fields []string, s string) int {
	for i, f := range fields {
		if f == s {
			return i
		}
	}
	return -1
}

// unescapeOctal decodes the \NNN escapes the kernel writes for space, tab,
// newline and backslash in mount paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountPointsUnder returns the mount points at or below dir, deepest first,
// so that they can be unmounted in order.
func mountPointsUnder(mounts []mountEntry, dir string) []string {
	var under []string
	for _, m := range mounts {
		if m.mountPoint == dir || strings.HasPrefix(m.mountPoint, dir+"/") {
			under = append(under, m.mountPoint)
		}
	}
	sort.Slice(under, func(i, j int) bool { return len(under[i]) > len(under[j]) })
	return under
}

// unmountAllUnder unmounts everything mounted at or below dir and then
// checks that nothing is left.
//
// The mounts are made private first, with everything below them: a bind mount
// of a directory on a shared mount (a local volume, a subPath of a hostPath) is
// a peer of its source, so what the host mounts below the source shows below
// the bind mount too, and unmounting that copy would unmount the host's mount
// as well. Only the propagation between these mounts and the volumes' sources
// changes; unmounting the topmost ones still reaches their copies elsewhere.
func (m *Manager) unmountAllUnder(dir string) error {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	mounts, err := readMountInfo(m.mountInfoPath)
	if err != nil {
		return err
	}
	under := mountPointsUnder(mounts, resolved)
	for _, mp := range slices.Backward(under) {
		// EINVAL: not a mount point (any more).
		if err := unix.Mount("", mp, "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("making %s private: %w", mp, err)
		}
	}
	for _, mp := range under {
		klog.V(3).InfoS("Unmounting pod volume", "path", mp)
		// EINVAL: no longer a mount point (a stacked mount went first).
		if err := unix.Unmount(mp, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmounting %s: %w", mp, err)
		}
	}
	mounts, err = readMountInfo(m.mountInfoPath)
	if err != nil {
		return err
	}
	if left := mountPointsUnder(mounts, resolved); len(left) > 0 {
		return fmt.Errorf("refusing to remove %s: %s is still mounted", dir, left[0])
	}
	return nil
}
