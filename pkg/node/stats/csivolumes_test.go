package stats

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/pkg/node/volumes/csi"
)

// fakeCSI is a node's CSI drivers: the published volumes, what each volume
// handle's driver answers, and the calls it received.
type fakeCSI struct {
	published []csi.PublishedVolume
	listErr   error
	stats     map[string]csi.VolumeStats // by volume handle
	errs      map[string]error           // by volume handle
	// wait, if set, runs in every VolumeStats call before it answers.
	wait func(ctx context.Context) error

	mu    sync.Mutex
	calls []string // driver|handle|path
}

func (f *fakeCSI) ListPublished() ([]csi.PublishedVolume, error) { return f.published, f.listErr }

func (f *fakeCSI) VolumeStats(ctx context.Context, driver, handle, path string) (csi.VolumeStats, error) {
	f.mu.Lock()
	f.calls = append(f.calls, driver+"|"+handle+"|"+path)
	f.mu.Unlock()
	if f.wait != nil {
		if err := f.wait(ctx); err != nil {
			return csi.VolumeStats{}, err
		}
	}
	if err := f.errs[handle]; err != nil {
		return csi.VolumeStats{}, err
	}
	s, ok := f.stats[handle]
	if !ok {
		return csi.VolumeStats{}, fmt.Errorf("volume %s not found", handle)
	}
	return s, nil
}

func (f *fakeCSI) sortedCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(slices.Values(f.calls))
}

// csiPodFixture is a pod with CSI volumes of every kind, each published by the
// volume manager at <root>/pods/u1/volumes/kubernetes.io~csi/<spec>/mount.
type csiPodFixture struct {
	pod     *v1.Pod
	drivers *fakeCSI
	src     volumeSources
}

func newCSIPodFixture(t *testing.T) *csiPodFixture {
	root := t.TempDir()
	claim := func(name string) v1.VolumeSource {
		return v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name}}
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns", UID: "u1"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "data", VolumeSource: claim("data-db-0")},
		{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}},
		{Name: "inline", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "inline.csi"}}},
		{Name: "nostats", VolumeSource: claim("plain")},
		{Name: "failing", VolumeSource: claim("broken")},
		{Name: "nodata", VolumeSource: claim("lost")},
		{Name: "pending", VolumeSource: claim("unbound")},
	}}}
	target := func(spec string) string {
		return filepath.Join(root, "pods", "u1", "volumes", "kubernetes.io~csi", spec, "mount")
	}
	// Spec name is the PV's name for claims, the pod's volume name inline.
	mounted := map[string]string{"data": "pv-data", "scratch": "pv-scratch", "inline": "inline", "nostats": "pv-nostats",
		"failing": "pv-failing", "nodata": "pv-nodata"}
	published := func(spec, driver, handle string) csi.PublishedVolume {
		return csi.PublishedVolume{PodUID: "u1", SpecName: spec, TargetPath: target(spec),
			Data: csi.VolumeData{SpecVolID: spec, DriverName: driver, VolumeHandle: handle}}
	}
	drivers := &fakeCSI{
		published: []csi.PublishedVolume{
			published("pv-data", "block.csi", "h-data"),
			published("pv-scratch", "block.csi", "h-scratch"),
			published("inline", "inline.csi", "csi-inline"),
			published("pv-nostats", "plain.csi", "h-nostats"),
			published("pv-failing", "block.csi", "h-failing"),
			{PodUID: "u1", SpecName: "pv-nodata", TargetPath: target("pv-nodata"), DataErr: errors.New("no vol_data.json")},
			published("pv-other", "block.csi", "h-other"), // another pod's, or an orphan
		},
		stats: map[string]csi.VolumeStats{
			"h-data":     {CapacityBytes: 1000, AvailableBytes: 600, UsedBytes: 400, Inodes: 100, InodesFree: 70, InodesUsed: 30},
			"h-scratch":  {CapacityBytes: 2000, AvailableBytes: 1500, UsedBytes: 500}, // no inode figures
			"csi-inline": {CapacityBytes: 3000, AvailableBytes: 2900, UsedBytes: 100, Inodes: 10, InodesFree: 9, InodesUsed: 1},
			"h-other":    {CapacityBytes: 1},
		},
		errs: map[string]error{
			"h-nostats": fmt.Errorf("GET_VOLUME_STATS of CSI driver plain.csi: %w", csi.ErrNotSupported),
			"h-failing": errors.New("rpc error: code = NotFound"),
		},
	}
	src := volumeSources{rootDir: root, csi: drivers, claimPath: func(p *v1.Pod, name string) (string, bool) {
		if p != pod {
			t.Errorf("asked about pod %v", p)
		}
		spec, ok := mounted[name]
		return target(spec), ok
	}}
	return &csiPodFixture{pod: pod, drivers: drivers, src: src}
}

// CSI volumes report what their driver says (NodeGetVolumeStats), as upstream's
// metricsCsi: claims with their pvcRef, inline volumes without, all of them
// persistent; a driver without GET_VOLUME_STATS, a failing call, a volume
// without vol_data.json and one not mounted report nothing.
func TestCSIVolumeStats(t *testing.T) {
	f := newCSIPodFixture(t)
	now := time.Unix(1790000000, 0)
	var c volumeCache
	c.refresh(context.Background(), []*v1.Pod{f.pod}, f.src, func() time.Time { return now })

	target := func(spec string) string {
		return filepath.Join(f.src.rootDir, "pods/u1/volumes/kubernetes.io~csi", spec, "mount")
	}
	wantCalls := []string{
		"block.csi|h-data|" + target("pv-data"),
		"block.csi|h-failing|" + target("pv-failing"),
		"block.csi|h-scratch|" + target("pv-scratch"),
		"inline.csi|csi-inline|" + target("inline"),
		"plain.csi|h-nostats|" + target("pv-nostats"),
	}
	if got := f.drivers.sortedCalls(); !slices.Equal(got, wantCalls) {
		t.Errorf("NodeGetVolumeStats calls\n%q\nwant\n%q", got, wantCalls)
	}

	got, ok := c.get("u1")
	if !ok || len(got.ephemeral) != 0 {
		t.Fatalf("cached %+v (%v), want persistent volumes only", got, ok)
	}
	want := []struct {
		volume string
		claim  *statsapi.PVCReference
		handle string
	}{
		{"data", &statsapi.PVCReference{Name: "data-db-0", Namespace: "ns"}, "h-data"},
		{"scratch", &statsapi.PVCReference{Name: "db-scratch", Namespace: "ns"}, "h-scratch"},
		{"inline", nil, "csi-inline"},
	}
	if len(got.persistent) != len(want) {
		t.Fatalf("persistent volumes %+v, want %d", got.persistent, len(want))
	}
	for i, w := range want {
		vs := got.persistent[i]
		if vs.Name != w.volume || !equalRef(vs.PVCRef, w.claim) {
			t.Errorf("volume %d: %s with claim %+v, want %s with claim %+v", i, vs.Name, vs.PVCRef, w.volume, w.claim)
		}
		s := f.drivers.stats[w.handle]
		if !vs.Time.Time.Equal(now) || !is(vs.CapacityBytes, s.CapacityBytes) || !is(vs.AvailableBytes, s.AvailableBytes) ||
			!is(vs.UsedBytes, s.UsedBytes) || !is(vs.Inodes, s.Inodes) || !is(vs.InodesFree, s.InodesFree) || !is(vs.InodesUsed, s.InodesUsed) {
			t.Errorf("volume %s: %+v, want the driver's %+v at %v", vs.Name, vs.FsStats, s, now)
		}
	}
}

func equalRef(a, b *statsapi.PVCReference) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// is reports whether p is set to v: upstream sets every figure, zero when the
// driver leaves it out.
func is(p *uint64, v int64) bool { return p != nil && *p == uint64(v) }

// Without the drivers, a way to find mounts, or a listing of the published
// volumes, CSI volumes are left out and nothing is asked.
func TestCSIVolumeStatsUnavailable(t *testing.T) {
	for name, change := range map[string]func(f *csiPodFixture){
		"no CSI":        func(f *csiPodFixture) { f.src.csi = nil },
		"no claim path": func(f *csiPodFixture) { f.src.claimPath = nil },
		"listing fails": func(f *csiPodFixture) { f.drivers.listErr = errors.New("permission denied") },
	} {
		t.Run(name, func(t *testing.T) {
			f := newCSIPodFixture(t)
			change(f)
			var c volumeCache
			c.refresh(context.Background(), []*v1.Pod{f.pod}, f.src, time.Now)
			if got, _ := c.get("u1"); len(got.persistent) != 0 {
				t.Errorf("volumes %+v, want none", got.persistent)
			}
			if calls := f.drivers.sortedCalls(); len(calls) != 0 {
				t.Errorf("calls %q, want none", calls)
			}
		})
	}
}

// The drivers are asked side by side, so that a slow one holds a refresh up
// for one call timeout, not one per volume: every call here waits for all the
// others to have started, and would time out if they came one by one.
func TestCSIVolumeStatsAskedConcurrently(t *testing.T) {
	f := newCSIPodFixture(t)
	const calls = 5 // the pod's published volumes with vol_data.json
	var started sync.WaitGroup
	started.Add(calls)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	f.drivers.wait = func(ctx context.Context) error {
		started.Done()
		select {
		case <-all:
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("the other calls did not come")
		}
	}
	var c volumeCache
	c.refresh(context.Background(), []*v1.Pod{f.pod}, f.src, time.Now)
	if got, _ := c.get("u1"); len(got.persistent) != 3 {
		t.Errorf("volumes %+v, want the three the drivers measure", got.persistent)
	}
}
