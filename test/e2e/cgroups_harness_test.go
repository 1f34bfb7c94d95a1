//go:build e2e

package e2e

import (
	"testing"

	"github.com/nodelet/nodelet/test/internal/host"
)

const cgroupFS = host.CgroupFS

// makeCgroupRoot creates the cgroup root /name in every hierarchy, as an operator does
// before starting a kubelet with a cgroupRoot of its own (a missing one is refused), and
// removes it with everything under it when the test ends (after nodelet, whose cleanup
// is registered later and so runs first).
func makeCgroupRoot(t *testing.T, name string) {
	t.Helper()
	if err := host.MakeCgroupRoot(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := host.RemoveCgroupRoot(name); err != nil {
			t.Logf("removing cgroup root /%s: %v", name, err)
		}
	})
}
