package stats

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestNoSwapSkipsSwapFiles: on a node without swap space, a cgroup's swap usage is 0
// without its swap file being read, once a first read has shown that cgroups have one;
// with swap space, the file is read again.
func TestNoSwapSkipsSwapFiles(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		fixture    func(testing.TB) string
		usage      uint64 // what memory.usage_in_bytes holds (v1's swap is memsw less it)
	}{
		{"v1", "memory/kubepods/memory.memsw.usage_in_bytes", cgroupV1Fixture, 1073741824},
		{"v2", "kubepods/memory.swap.current", cgroupV2Fixture, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.fixture(t)
			setSwap := func(swapped uint64) {
				t.Helper()
				v := []byte(strconv.FormatUint(tc.usage+swapped, 10) + "\n")
				if err := os.WriteFile(filepath.Join(dir, tc.file), v, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cg := newCgroupFS(dir)
			swapOf := func() (uint64, bool) {
				t.Helper()
				m, err := cg.memory("/kubepods")
				if err != nil {
					t.Fatal(err)
				}
				return m.swap, m.hasSwap
			}
			setSwap(4096)
			cg.setNodeSwap(0)
			if v, ok := swapOf(); v != 4096 || !ok { // not yet known to have the file: read
				t.Fatalf("first read: swap %d, %v; want 4096, true", v, ok)
			}
			setSwap(8192) // only a read could see this
			if v, ok := swapOf(); v != 0 || !ok {
				t.Fatalf("no swap on the node: swap %d, %v; want 0, true (file not read)", v, ok)
			}
			cg.setNodeSwap(1 << 30)
			if v, ok := swapOf(); v != 8192 || !ok {
				t.Fatalf("swap on the node: swap %d, %v; want 8192, true", v, ok)
			}
		})
	}
}

// TestNoSwapAccounting: where cgroups have no swap file, none is reported, with or
// without swap on the node.
func TestNoSwapAccounting(t *testing.T) {
	cg := newCgroupFS(cgroupV1Fixture(t))
	cg.setNodeSwap(0)
	for range 2 {
		m, err := cg.memory("/system.slice/kubelet.service")
		if err != nil {
			t.Fatal(err)
		}
		if m.hasSwap {
			t.Fatalf("a cgroup without memsw reports swap %d", m.swap)
		}
	}
	if got := cg.swap.files.Load(); got != fileMissing {
		t.Fatalf("swap file state %d, want missing", got)
	}
}
