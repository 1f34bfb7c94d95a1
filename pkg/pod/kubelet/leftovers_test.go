package kubelet

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/pkg/metrics"
	"github.com/nodelet/nodelet/pkg/runtime/container"
)

// recordingCgroups is a container manager's pod cgroups in memory: EnsurePod creates
// one, Remove deletes it unless it is stuck, Pods counts the scans.
type recordingCgroups struct {
	fakeCgroups // reads nothing back
	mu          sync.Mutex
	present     map[types.UID]bool
	stuck       map[types.UID]bool
	scans       int
}

func newRecordingCgroups(present ...types.UID) *recordingCgroups {
	c := &recordingCgroups{present: map[types.UID]bool{}, stuck: map[types.UID]bool{}}
	for _, uid := range present {
		c.present[uid] = true
	}
	return c
}

func (c *recordingCgroups) EnsurePod(pod *v1.Pod) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.present[pod.UID] = true
	return nil
}

func (c *recordingCgroups) UpdateQOSCgroups() error { return nil }

func (c *recordingCgroups) Pods() map[types.UID]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scans++
	out := map[types.UID]bool{}
	for uid := range c.present {
		out[uid] = true
	}
	return out
}

func (c *recordingCgroups) Remove(uid types.UID) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stuck[uid] {
		return errors.New("device or resource busy")
	}
	delete(c.present, uid)
	return nil
}

func (c *recordingCgroups) setStuck(uid types.UID, stuck bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stuck[uid] = stuck
}

func (c *recordingCgroups) state() (scans int, present map[types.UID]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	present = map[types.UID]bool{}
	for uid := range c.present {
		present[uid] = true
	}
	return c.scans, present
}

// assertScans runs housekeeping once and checks how many cgroup scans there have been
// so far and which pod cgroups are left.
func assertScans(t *testing.T, k *Kubelet, cg *recordingCgroups, wantScans int, wantPresent ...types.UID) {
	t.Helper()
	k.housekeeper.run(context.Background())
	scans, present := cg.state()
	if scans != wantScans {
		t.Errorf("%d cgroup scans, want %d", scans, wantScans)
	}
	if len(present) != len(wantPresent) {
		t.Errorf("pod cgroups %v, want %v", present, wantPresent)
	}
	for _, uid := range wantPresent {
		if !present[uid] {
			t.Errorf("pod cgroups %v, want %v", present, wantPresent)
		}
	}
}

// Housekeeping lists the pod cgroups when one may be an orphan, not every two seconds:
// at start (an earlier nodelet's), when a pod that has one is out of use, again while
// one could not be removed, and once a minute.
func TestOrphanedPodCgroupsAreScannedForOnlyWhenOneMayExist(t *testing.T) {
	rt := &fakeRuntime{}
	ready := true
	k := newTestKubelet(rt, &fakeVolumes{}, &ready)
	cg := newRecordingCgroups("left-over", "stuck")
	cg.setStuck("stuck", true)
	k.deps.Cgroups = cg
	pod := testPod("a", "a")
	k.handlePodAdditions([]*v1.Pod{pod})
	eventually(t, "a synced", func() bool { return rt.syncCount("a") == 1 })

	assertScans(t, k, cg, 1, "a", "stuck") // the first scan finds what an earlier nodelet left
	assertScans(t, k, cg, 2, "a", "stuck") // the stuck cgroup is retried
	cg.setStuck("stuck", false)
	assertScans(t, k, cg, 3, "a")
	assertScans(t, k, cg, 3, "a") // nothing can be an orphan: no scan
	assertScans(t, k, cg, 3, "a")

	k.handlePodRemoves([]*v1.Pod{pod})
	eventually(t, "a's worker done", func() bool { return k.workers.ShouldPodContentBeRemoved("a") })
	assertScans(t, k, cg, 4)
	assertScans(t, k, cg, 4)

	// The safety net: a cgroup nodelet did not create is found within a minute.
	cg.EnsurePod(testPod("foreign", "foreign"))
	k.housekeeper.podCgroups.scanned = time.Now().Add(-leftoverScanPeriod)
	assertScans(t, k, cg, 5)
}

// A pod that comes and goes between two housekeepings still has its cgroup found: the
// pod workers note every pod whose cgroup they ensure.
func TestPodCgroupOfAShortLivedPodIsFound(t *testing.T) {
	rt := &fakeRuntime{}
	ready := true
	k := newTestKubelet(rt, &fakeVolumes{}, &ready)
	cg := newRecordingCgroups()
	k.deps.Cgroups = cg
	assertScans(t, k, cg, 1)

	pod := testPod("brief", "brief")
	k.handlePodAdditions([]*v1.Pod{pod})
	eventually(t, "synced", func() bool { return rt.syncCount("brief") == 1 })
	k.handlePodRemoves([]*v1.Pod{pod})
	eventually(t, "its worker done", func() bool { return k.workers.ShouldPodContentBeRemoved("brief") })
	assertScans(t, k, cg, 2)
}

func TestPodsSyncedDuringAScanAreRemembered(t *testing.T) {
	l := newLeftovers()
	now := time.Now()
	inUse := func(types.UID) bool { return true }
	l.beginScan()
	l.noteSynced("new") // its cgroup created after the scan listed the hierarchies
	l.endScan(now, map[types.UID]bool{"old": true})
	if l.scanDue(now, inUse) {
		t.Fatal("scan due with every pod in use")
	}
	for _, uid := range []types.UID{"old", "new"} {
		if !l.scanDue(now, func(u types.UID) bool { return u != uid }) {
			t.Errorf("no scan due with %s out of use", uid)
		}
	}
	if !l.scanDue(now.Add(leftoverScanPeriod), inUse) {
		t.Error("no scan due a period after the last")
	}
	l.beginScan()
	l.noteSynced("newer")
	l.abortScan()
	if !l.scanDue(now, inUse) {
		t.Error("no scan due after one that could not list")
	}
	if !l.maybe["newer"] || !l.maybe["new"] {
		t.Errorf("pods forgotten by a scan that could not list: %v", l.maybe)
	}
}

// Housekeeping lists the runtime's pods once, or not at all when the PLEG knows them.
func TestHousekeepingListsRunningPodsOnceOrAsksThePLEG(t *testing.T) {
	rt := &fakeRuntime{running: []*container.Pod{{ID: "orphan", Name: "old", Namespace: "ns"}}}
	ready := true
	k := newTestKubelet(rt, &fakeVolumes{}, &ready)
	k.deps.Cgroups = newRecordingCgroups("orphan")
	k.housekeeper.run(context.Background())
	if n := rt.listCount(); n != 1 {
		t.Errorf("housekeeping listed the runtime %d times, want once", n)
	}
	eventually(t, "the orphan killed", func() bool { return len(rt.killedUIDs()) == 1 })

	plegs := k.deps.PLEG.(*fakePLEG)
	plegs.mu.Lock()
	plegs.runningKnown = true
	plegs.running = []*container.Pod{{ID: "other", Name: "other", Namespace: "ns"}}
	plegs.mu.Unlock()
	k.housekeeper.run(context.Background())
	eventually(t, "the orphan the PLEG knows of killed", func() bool { return len(rt.killedUIDs()) == 2 })
	if n := rt.listCount(); n != 1 {
		t.Errorf("housekeeping listed the runtime although the PLEG knew its pods (%d listings)", n)
	}
	if got := rt.killedUIDs(); got[1] != "other" {
		t.Errorf("killed %v", got)
	}
}

// fakeUserNamespaces counts the scans for orphaned user namespaces.
type fakeUserNamespaces struct {
	mu    sync.Mutex
	scans int
}

func (u *fakeUserNamespaces) Release(types.UID) {}
func (u *fakeUserNamespaces) CleanupOrphaned(func(types.UID) bool) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.scans++
	return nil
}

// Pod directories, and the user namespaces kept in them, are looked for at start, when a
// pod that has one is out of use, and once a minute; not every two seconds.
func TestOrphanedPodDirsAreScannedForOnlyWhenOneMayExist(t *testing.T) {
	rt := &fakeRuntime{}
	vols := &fakeVolumes{dirs: []types.UID{"left-over"}}
	ready := true
	k := newTestKubelet(rt, vols, &ready)
	userns := &fakeUserNamespaces{}
	k.deps.UserNamespaces = userns
	pod := testPod("a", "a")
	k.handlePodAdditions([]*v1.Pod{pod})
	eventually(t, "a synced", func() bool { return rt.syncCount("a") == 1 })
	vols.mu.Lock()
	vols.dirs = append(vols.dirs, "a") // what its sync made
	vols.mu.Unlock()

	assertListings := func(want int, wantDirs ...types.UID) {
		t.Helper()
		k.housekeeper.run(context.Background())
		vols.mu.Lock()
		defer vols.mu.Unlock()
		userns.mu.Lock()
		defer userns.mu.Unlock()
		if vols.listings != want || userns.scans != want {
			t.Errorf("%d pod directory listings and %d user namespace scans, want %d", vols.listings, userns.scans, want)
		}
		if !slices.Equal(vols.dirs, wantDirs) {
			t.Errorf("pod directories %v, want %v", vols.dirs, wantDirs)
		}
	}
	assertListings(1, "a") // the first finds what an earlier nodelet left
	if n := testutil.ToFloat64(metrics.OrphanPodCleanedVolumes); n != 1 {
		t.Errorf("orphan_pod_cleaned_volumes %v after the sweep that removed a directory, want 1", n)
	}
	assertListings(1, "a")
	if n := testutil.ToFloat64(metrics.OrphanPodCleanedVolumes); n != 0 {
		t.Errorf("orphan_pod_cleaned_volumes %v after a sweep with nothing to clean, want 0", n)
	}
	// a's worker removes its directory when it is done; housekeeping looks once more.
	k.handlePodRemoves([]*v1.Pod{pod})
	eventually(t, "a's worker done", func() bool { return k.workers.ShouldPodContentBeRemoved("a") })
	assertListings(2)
	assertListings(2)
	k.housekeeper.podDirs.scanned = time.Now().Add(-leftoverScanPeriod)
	assertListings(3)
}
