// Package binarypages hands back to the kernel the pages of nodelet's own binary that are
// resident, and has the kernel read them back one page at a time from then on.
//
// A Go binary's code and read-only data (client-go's API types and codecs, TLS, flag
// tables) are mapped from its file. What start-up ran once stays counted in the
// process's RSS, and the kernel's fault-around maps 64 KiB of the file for every page
// touched. Upstream's kubelet keeps all of them until memory pressure makes the kernel
// reclaim them; nodelet hands them back once start-up is over (pkg/app schedules it).
package binarypages

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Range is a mapping's [Start, End) in a process's address space.
type Range struct{ Start, End uintptr }

// Len is the range's size in bytes.
func (r Range) Len() uintptr { return r.End - r.Start }

// Trim advises the kernel, for every read-only mapping of the executable exeLink points
// to (/proc/self/exe), to reclaim the pages it holds now and from then on to read them on
// demand only (no read-ahead, so a fault maps little more than the page it needs). The
// writable data mapping is left alone: its pages are the process's own once written.
// The process goes on running; what it needs again is read back from the file.
func Trim(exeLink, mapsPath string) error {
	ranges, err := SelfMappings(exeLink, mapsPath)
	if err != nil {
		return err
	}
	// No read-ahead first, so that what other goroutines touch while the pages go is
	// read back a page at a time too.
	if err := adviseAll(ranges, unix.MADV_RANDOM); err != nil {
		return fmt.Errorf("madvise(MADV_RANDOM): %w", err)
	}
	if err := adviseAll(ranges, unix.MADV_PAGEOUT); err != nil {
		// The pages stay: keep read-ahead for them too.
		_ = adviseAll(ranges, unix.MADV_NORMAL)
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("madvise(MADV_PAGEOUT) refused, the kernel is older than 5.4: %w", err)
		}
		return fmt.Errorf("madvise(MADV_PAGEOUT): %w", err)
	}
	return nil
}

// SelfMappings returns the read-only mappings of the executable exeLink points to, from
// the maps file mapsPath (/proc/<pid>/exe and /proc/<pid>/maps of one process).
func SelfMappings(exeLink, mapsPath string) ([]Range, error) {
	// Readlink, not os.Executable: maps names a replaced binary "PATH (deleted)", as
	// the link does.
	exe, err := os.Readlink(exeLink)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(mapsPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ranges, err := ReadOnlyMappings(f, exe)
	if err != nil {
		return nil, err
	}
	if len(ranges) == 0 {
		return nil, fmt.Errorf("no read-only mapping of %s in %s", exe, mapsPath)
	}
	return ranges, nil
}

// ReadOnlyMappings returns the mappings of path that a /proc/<pid>/maps file lists
// without write permission: a binary's code and read-only data.
func ReadOnlyMappings(maps io.Reader, path string) ([]Range, error) {
	var out []Range
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		// address perms offset dev inode path; the path may contain spaces.
		f := strings.SplitN(sc.Text(), " ", 6)
		if len(f) < 6 || strings.TrimLeft(f[5], " ") != path || strings.Contains(f[1], "w") {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			return nil, fmt.Errorf("maps line %q: no address range", sc.Text())
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("maps line %q: bad address range", sc.Text())
		}
		out = append(out, Range{uintptr(start), uintptr(end)})
	}
	return out, sc.Err()
}

func adviseAll(ranges []Range, advice int) error {
	for _, r := range ranges {
		if err := madvise(r, advice); err != nil {
			return err
		}
	}
	return nil
}

// madvise is madvise(2) on a range the process does not hold as a Go slice (its code).
func madvise(r Range, advice int) error {
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.Start, r.Len(), uintptr(advice)); errno != 0 {
		return errno
	}
	return nil
}

// ResidentFileKiB is RssFile from a /proc/<pid>/status file (-1 when it cannot be read):
// the file-backed pages the process has mapped, nearly all of them its binary's.
func ResidentFileKiB(statusPath string) int64 {
	data, err := os.ReadFile(statusPath)
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return kb
			}
		}
	}
	return -1
}
