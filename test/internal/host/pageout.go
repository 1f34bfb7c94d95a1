package host

import (
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/pkg/binarypages"
)

// PageOutBinary has the kernel reclaim the resident pages of process pid's binary
// (process_madvise(MADV_PAGEOUT) on its read-only mappings, Linux 5.10+), as memory
// pressure would: what the process runs again is read back. A benchmark uses it to
// compare two programs' RSS without the pages they ran once.
func PageOutBinary(pid int) error {
	ranges, err := binarypages.SelfMappings(fmt.Sprintf("/proc/%d/exe", pid), fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return err
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("pidfd_open(%d): %w", pid, err)
	}
	defer unix.Close(pidfd)
	// struct iovec {base, len} as two words each: the ranges are the other process's
	// addresses, which process_madvise reads as numbers and nothing here dereferences.
	iov := make([]uintptr, 0, 2*len(ranges))
	for _, r := range ranges {
		iov = append(iov, r.Start, r.Len())
	}
	_, _, errno := unix.Syscall6(unix.SYS_PROCESS_MADVISE, uintptr(pidfd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(ranges)), unix.MADV_PAGEOUT, 0, 0)
	if errno != 0 {
		return fmt.Errorf("process_madvise(%d, MADV_PAGEOUT): %w", pid, errno)
	}
	return nil
}

// PrivateCopy copies the executable at path into dir and returns the copy's path. The
// pages of a process that runs the copy are its own: the kernel's pageout leaves alone the
// pages another process maps too, so a test of a binary's pageout runs a copy.
func PrivateCopy(path, dir string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	copied := filepath.Join(dir, filepath.Base(path))
	return copied, os.WriteFile(copied, data, 0o755)
}
