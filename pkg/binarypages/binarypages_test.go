package binarypages

import (
	"strings"
	"testing"
)

func TestReadOnlyMappings(t *testing.T) {
	const maps = `00400000-01fce000 r-xp 00000000 fd:01 1234                               /usr/bin/nodelet (deleted)
01fce000-03fee000 r--p 01bce000 fd:01 1234                               /usr/bin/nodelet (deleted)
03fee000-040a5000 rw-p 03bee000 fd:01 1234                               /usr/bin/nodelet (deleted)
040a5000-04100000 rw-p 00000000 00:00 0 
7f0000000000-7f0000001000 r--p 00000000 fd:01 99                         /usr/bin/nodelet
7f0000002000-7f0000003000 r--p 00000000 fd:01 77                         /my dir/with spaces
`
	got, err := ReadOnlyMappings(strings.NewReader(maps), "/usr/bin/nodelet (deleted)")
	if err != nil {
		t.Fatal(err)
	}
	want := []Range{{0x400000, 0x1fce000}, {0x1fce000, 0x3fee000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("ReadOnlyMappings = %x, want %x", got, want)
	}
	got, err = ReadOnlyMappings(strings.NewReader(maps), "/my dir/with spaces")
	if err != nil || len(got) != 1 || got[0] != (Range{0x7f0000002000, 0x7f0000003000}) {
		t.Errorf("path with spaces: %x, %v", got, err)
	}
	if _, err := ReadOnlyMappings(strings.NewReader("zz-01 r--p 0 fd:01 1 /x\n"), "/x"); err == nil {
		t.Error("a bad address range was accepted")
	}
}

// TestTrimBinaryDropsResidentPages trims this test binary's own pages: its file-backed
// RSS must fall, and the process must go on running the code it needs.
func TestTrimBinaryDropsResidentPages(t *testing.T) {
	before := ResidentFileKiB("/proc/self/status")
	if before <= 0 {
		t.Skip("no RssFile in /proc/self/status")
	}
	if err := Trim("/proc/self/exe", "/proc/self/maps"); err != nil {
		if strings.Contains(err.Error(), "older than 5.4") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	after := ResidentFileKiB("/proc/self/status")
	t.Logf("RssFile %d KiB before the trim, %d KiB after", before, after)
	if after >= before {
		t.Errorf("RssFile did not fall: %d KiB before the trim, %d KiB after", before, after)
	}
}

func TestTrimBinaryNoMapping(t *testing.T) {
	err := Trim("/proc/self/exe", "/dev/null")
	if err == nil || !strings.Contains(err.Error(), "no read-only mapping") {
		t.Errorf("Trim with no mapping: %v", err)
	}
}
