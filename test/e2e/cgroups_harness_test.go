//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

const cgroupFS = "/sys/fs/cgroup"

// makeCgroupRoot creates the cgroup root /name in every hierarchy, as an operator does
// before starting a kubelet with a cgroupRoot of its own (a missing one is refused), and
// removes it with everything under it when the test ends (after nodelet, whose cleanup
// is registered later and so runs first). A v1 cpuset needs its CPUs and memory nodes
// set before anything can join it.
func makeCgroupRoot(t *testing.T, name string) {
	t.Helper()
	hierarchies := cgroupHierarchies(t)
	for _, h := range hierarchies {
		dir := filepath.Join(h, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err == nil {
					err = os.WriteFile(filepath.Join(dir, f), v, 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	t.Cleanup(func() {
		for _, h := range hierarchies {
			removeCgroupTree(t, filepath.Join(h, name))
		}
	})
}

// cgroupHierarchies are the mounted hierarchies: /sys/fs/cgroup itself on cgroup v2, its
// controller directories on v1.
func cgroupHierarchies(t *testing.T) []string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(cgroupFS, "cgroup.controllers")); err == nil {
		return []string{cgroupFS}
	}
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() { // controller mounts; symlinks such as cpu -> cpu,cpuacct are skipped
			out = append(out, filepath.Join(cgroupFS, e.Name()))
		}
	}
	return out
}

// removeCgroupTree removes root and the cgroups under it, deepest first.
func removeCgroupTree(t *testing.T, root string) {
	var dirs []string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
			t.Logf("removing cgroup %s: %v", dirs[i], err)
		}
	}
}
