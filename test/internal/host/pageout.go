package host

import (
	"fmt"
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
