package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckSwap(t *testing.T) {
	dir := t.TempDir()
	off := filepath.Join(dir, "off")
	on := filepath.Join(dir, "on")
	os.WriteFile(off, []byte("Filename\tType\tSize\tUsed\tPriority\n"), 0o644)
	os.WriteFile(on, []byte("Filename\tType\tSize\tUsed\tPriority\n/swapfile file 1024 0 -2\n"), 0o644)
	if err := checkSwap(true, off); err != nil {
		t.Errorf("swap off: %v", err)
	}
	if err := checkSwap(true, on); err == nil || !strings.Contains(err.Error(), "running with swap on is not supported") {
		t.Errorf("swap on with failSwapOn: %v", err)
	}
	if err := checkSwap(false, on); err != nil {
		t.Errorf("swap on without failSwapOn: %v", err)
	}
	if err := checkSwap(true, filepath.Join(dir, "missing")); err != nil {
		t.Errorf("no /proc/swaps: %v", err)
	}
}
