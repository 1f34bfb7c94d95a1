package imagegc

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	fakeclock "k8s.io/utils/clock/testing"
)

const pauseTag = "registry.k8s.io/pause:3.10"

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeFs is the image filesystem's size.
type fakeFs struct {
	capacity, available uint64
	err                 error
	calls               int
}

func (f *fakeFs) ImageFsStats(context.Context) (*statsapi.FsStats, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return &statsapi.FsStats{CapacityBytes: &f.capacity, AvailableBytes: &f.available}, nil
}

// tagResolvingImages answers ImageStatus by tag as a runtime does; the cri-api fake
// only knows images by the key they were stored under (here, their ID).
type tagResolvingImages struct {
	*critest.FakeImageService
}

func (r tagResolvingImages) ImageStatus(_ context.Context, spec *runtimeapi.ImageSpec, _ bool) (*runtimeapi.ImageStatusResponse, error) {
	r.Lock()
	defer r.Unlock()
	for _, img := range r.Images {
		if img.Id == spec.Image || slices.Contains(img.RepoTags, spec.Image) {
			return &runtimeapi.ImageStatusResponse{Image: img}, nil
		}
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

type env struct {
	images  *critest.FakeImageService
	runtime *critest.FakeRuntimeService
	fs      *fakeFs
	clock   *fakeclock.FakeClock
	rec     *record.FakeRecorder
	m       *Manager
}

func newEnv(t *testing.T, policy Policy) *env {
	t.Helper()
	e := &env{
		images:  critest.NewFakeImageService(),
		runtime: critest.NewFakeRuntimeService(),
		fs:      &fakeFs{capacity: 1000, available: 900},
		clock:   fakeclock.NewFakeClock(t0),
		rec:     record.NewFakeRecorder(100),
	}
	m, err := New(Options{
		Images: tagResolvingImages{e.images}, Containers: e.runtime, FsStats: e.fs,
		Policy: policy, SandboxImage: pauseTag, Recorder: e.rec,
		NodeRef: &v1.ObjectReference{Kind: "Node", Name: "node1", UID: "node1"}, Clock: e.clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	return e
}

func (e *env) addImage(id string, size uint64, tags ...string) *runtimeapi.Image {
	e.images.Lock()
	defer e.images.Unlock()
	img := &runtimeapi.Image{Id: id, Size: size, RepoTags: tags}
	e.images.Images[id] = img
	return img
}

// setContainers makes the runtime hold one container per image ID, in state.
func (e *env) setContainers(state runtimeapi.ContainerState, imageIDs ...string) {
	var cs []*critest.FakeContainer
	for i, id := range imageIDs {
		cs = append(cs, &critest.FakeContainer{ContainerStatus: runtimeapi.ContainerStatus{
			Id: "c" + string(rune('a'+i)), State: state, ImageRef: id,
			Image: &runtimeapi.ImageSpec{Image: id}, Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
		}})
	}
	e.runtime.SetFakeContainers(cs)
}

// detect runs one detection pass now, as Start's loop does.
func (e *env) detect(t *testing.T) {
	t.Helper()
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	if _, err := e.m.detectImages(context.Background(), e.clock.Now()); err != nil {
		t.Fatal(err)
	}
}

func (e *env) imageIDs() []string {
	e.images.Lock()
	defer e.images.Unlock()
	var ids []string
	for id := range e.images.Images {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (e *env) removed() []string {
	e.images.Lock()
	defer e.images.Unlock()
	var n []string
	for _, c := range e.images.Called {
		if c == "RemoveImage" {
			n = append(n, c)
		}
	}
	return n
}

func (e *env) events() []string {
	var out []string
	for {
		select {
		case ev := <-e.rec.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func wantIDs(t *testing.T, e *env, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := e.imageIDs(); !slices.Equal(got, want) {
		t.Fatalf("images left = %v, want %v", got, want)
	}
}

func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		p       Policy
		wantErr string
	}{
		{Policy{HighThresholdPercent: 85, LowThresholdPercent: 80}, ""},
		{Policy{HighThresholdPercent: 100, LowThresholdPercent: 0}, ""},
		{Policy{HighThresholdPercent: 101, LowThresholdPercent: 80}, "invalid HighThresholdPercent 101, must be in range [0-100]"},
		{Policy{HighThresholdPercent: 80, LowThresholdPercent: -1}, "invalid LowThresholdPercent -1, must be in range [0-100]"},
		{Policy{HighThresholdPercent: 70, LowThresholdPercent: 80}, "LowThresholdPercent 80 can not be higher than HighThresholdPercent 70"},
	}
	for _, tc := range tests {
		err := tc.p.Validate()
		if (err == nil) != (tc.wantErr == "") || (err != nil && err.Error() != tc.wantErr) {
			t.Errorf("%+v: err = %v, want %q", tc.p, err, tc.wantErr)
		}
		if _, err := New(Options{Images: critest.NewFakeImageService(), Containers: critest.NewFakeRuntimeService(), FsStats: &fakeFs{}, Policy: tc.p}); (err == nil) != (tc.wantErr == "") {
			t.Errorf("%+v: New err = %v", tc.p, err)
		}
	}
	if !(Policy{HighThresholdPercent: 100}).Disabled() || (Policy{HighThresholdPercent: 100, MaxAge: time.Hour}).Disabled() || (Policy{HighThresholdPercent: 85}).Disabled() {
		t.Error("Disabled must be true only for high threshold 100 without max age")
	}
}

func TestDetectImagesTracksFirstDetectedAndLastUsed(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 90, LowThresholdPercent: 80})
	e.addImage("sha256:a", 10)
	e.addImage("sha256:b", 20)
	e.setContainers(runtimeapi.ContainerState_CONTAINER_RUNNING, "sha256:b")
	e.detect(t)

	e.clock.Step(time.Minute)
	// The container exits: its image stays in use; a new image appears.
	e.setContainers(runtimeapi.ContainerState_CONTAINER_EXITED, "sha256:b")
	e.addImage("sha256:c", 30)
	e.detect(t)

	e.clock.Step(time.Minute)
	// The container is removed and image a is gone.
	e.runtime.SetFakeContainers(nil)
	delete(e.images.Images, "sha256:a")
	e.detect(t)

	want := map[string]imageRecord{
		"sha256:b": {firstDetected: t0, lastUsed: t0.Add(time.Minute), size: 20},
		"sha256:c": {firstDetected: t0.Add(time.Minute), size: 30},
	}
	if len(e.m.records) != len(want) {
		t.Fatalf("records = %v, want %v", e.m.records, want)
	}
	for id, w := range want {
		if got := e.m.records[id]; got == nil || *got != w {
			t.Errorf("record %s = %+v, want %+v", id, got, w)
		}
	}
}

func TestUsedByMatchesImageIDAndRepoDigest(t *testing.T) {
	refs := containerImageRefs([]*runtimeapi.Container{
		{ImageId: "sha256:byid", ImageRef: "example.com/app@sha256:d1"},
		{ImageRef: "sha256:oldruntime"},
	})
	for _, tc := range []struct {
		img  *runtimeapi.Image
		want bool
	}{
		{&runtimeapi.Image{Id: "sha256:byid"}, true},
		{&runtimeapi.Image{Id: "sha256:oldruntime"}, true},
		{&runtimeapi.Image{Id: "sha256:other", RepoDigests: []string{"example.com/app@sha256:d1"}}, true},
		{&runtimeapi.Image{Id: "sha256:unused", RepoTags: []string{"sha256:byid"}}, false},
	} {
		if got := usedBy(tc.img, refs); got != tc.want {
			t.Errorf("usedBy(%s) = %v, want %v", tc.img.Id, got, tc.want)
		}
	}
}

func TestGarbageCollectBelowHighThresholdRemovesNothing(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 90, LowThresholdPercent: 80})
	e.addImage("sha256:a", 500)
	// 100 - 111*100/1000 = 89%: upstream's integer usage rounds 88.9% up, so 101 bytes
	// available (89.9%) would already count as 90%.
	e.fs.available = 111
	if err := e.m.GarbageCollect(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, e, "sha256:a")
	if len(e.removed()) != 0 || len(e.events()) != 0 {
		t.Errorf("removed %v, events %v; want none", e.removed(), e.events())
	}
}

func TestGarbageCollectFreesLeastRecentlyUsedDownToLowThreshold(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 60})
	e.addImage("sha256:never", 200) // never used: goes first
	e.addImage("sha256:old", 200)
	e.addImage("sha256:recent", 200)
	e.addImage("sha256:inuse", 200)
	e.setContainers(runtimeapi.ContainerState_CONTAINER_RUNNING, "sha256:old", "sha256:recent", "sha256:inuse")
	e.detect(t)
	e.clock.Step(time.Minute)
	e.setContainers(runtimeapi.ContainerState_CONTAINER_RUNNING, "sha256:recent", "sha256:inuse")
	e.detect(t)
	e.clock.Step(time.Minute)
	e.setContainers(runtimeapi.ContainerState_CONTAINER_RUNNING, "sha256:inuse")

	// 90% used; down to 60% means freeing 1000*40% - 100 = 300 bytes: two images.
	e.fs.available = 100
	if err := e.m.GarbageCollect(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, e, "sha256:recent", "sha256:inuse")
	if ev := e.events(); len(ev) != 0 {
		t.Errorf("events = %v, want none", ev)
	}
}

func TestGarbageCollectTiesBrokenByFirstDetected(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80})
	e.addImage("sha256:z-first", 100)
	e.detect(t)
	e.clock.Step(time.Minute)
	e.addImage("sha256:a-second", 100)
	e.detect(t)
	e.fs.available = 100 // free 1000*20% - 100 = 100 bytes: one image
	if err := e.m.GarbageCollect(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, e, "sha256:a-second")
}

func TestGarbageCollectNeverRemovesUsedPinnedOrSandboxImages(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 50, LowThresholdPercent: 0})
	e.addImage("sha256:unused", 100, "example.com/unused:1", "example.com/unused:2")
	e.addImage("sha256:running", 100)
	e.addImage("sha256:exited", 100)
	e.addImage("sha256:pinned", 100).Pinned = true
	e.addImage("sha256:pause", 100, pauseTag)
	e.runtime.SetFakeContainers([]*critest.FakeContainer{
		{ContainerStatus: runtimeapi.ContainerStatus{Id: "r", State: runtimeapi.ContainerState_CONTAINER_RUNNING, ImageRef: "sha256:running"}},
		{ContainerStatus: runtimeapi.ContainerStatus{Id: "x", State: runtimeapi.ContainerState_CONTAINER_EXITED, ImageRef: "sha256:exited"}},
	})
	e.fs.available = 100 // 90% used: free 900 bytes, only 100 eligible

	err := e.m.GarbageCollect(context.Background(), t0)
	wantMsg := "Insufficient free disk space on the node's image filesystem (90% of 1000 B used). " +
		"Failed to free sufficient space by deleting unused images (freed 100 bytes). " +
		"Investigate disk usage, as it could be used by active images, logs, volumes, or other data."
	if err == nil || err.Error() != wantMsg {
		t.Fatalf("err = %v, want %q", err, wantMsg)
	}
	wantIDs(t, e, "sha256:running", "sha256:exited", "sha256:pinned", "sha256:pause")
	if ev := e.events(); !slices.Equal(ev, []string{"Warning FreeDiskSpaceFailed " + wantMsg}) {
		t.Errorf("events = %q", ev)
	}
}

func TestGarbageCollectRespectsMinAge(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 10 * time.Minute})
	e.addImage("sha256:young", 500)
	e.fs.available = 100
	e.detect(t)
	e.clock.Step(9 * time.Minute)
	if err := e.m.GarbageCollect(context.Background(), t0); err == nil {
		t.Fatal("GC freed nothing but reported no error")
	}
	wantIDs(t, e, "sha256:young")
	e.clock.Step(2 * time.Minute)
	if err := e.m.GarbageCollect(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, e)
}

func TestGarbageCollectRemovesImagesOlderThanMaxAge(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 90, LowThresholdPercent: 80, MaxAge: 30 * time.Minute})
	e.addImage("sha256:stale", 100)
	e.addImage("sha256:fresh", 100)
	e.setContainers(runtimeapi.ContainerState_CONTAINER_RUNNING, "sha256:stale", "sha256:fresh")
	beganGC := t0
	if err := e.m.GarbageCollect(context.Background(), beganGC); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(20 * time.Minute)
	e.setContainers(runtimeapi.ContainerState_CONTAINER_RUNNING, "sha256:fresh")
	if err := e.m.GarbageCollect(context.Background(), beganGC); err != nil {
		t.Fatal(err)
	}
	e.runtime.SetFakeContainers(nil)
	before := testutil.ToFloat64(ImageGarbageCollectedTotal.WithLabelValues(reasonAge))

	// 31 minutes since stale's last use, 11 since fresh's; usage is low throughout.
	e.clock.Step(11 * time.Minute)
	if err := e.m.GarbageCollect(context.Background(), beganGC); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, e, "sha256:fresh")
	if got := testutil.ToFloat64(ImageGarbageCollectedTotal.WithLabelValues(reasonAge)) - before; got != 1 {
		t.Errorf("age-collected count grew by %v, want 1", got)
	}
}

func TestGarbageCollectMaxAgeWaitsForItsOwnAgeSinceStart(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 90, LowThresholdPercent: 80, MaxAge: 30 * time.Minute})
	e.addImage("sha256:never-used", 100)
	e.clock.Step(time.Hour)
	// Started 20 minutes ago: records are younger than MaxAge, so nothing is "old".
	if err := e.m.GarbageCollect(context.Background(), e.clock.Now().Add(-20*time.Minute)); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, e, "sha256:never-used")
	// Without MaxAge nothing is removed by age either.
	e.m.policy.MaxAge = 0
	if err := e.m.GarbageCollect(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, e, "sha256:never-used")
}

func TestGarbageCollectInvalidCapacity(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 90, LowThresholdPercent: 80})
	e.fs.capacity, e.fs.available = 0, 0
	err := e.m.GarbageCollect(context.Background(), t0)
	if err == nil || err.Error() != "invalid capacity 0 on image filesystem" {
		t.Fatalf("err = %v", err)
	}
	if ev := e.events(); !slices.Equal(ev, []string{"Warning InvalidDiskCapacity invalid capacity 0 on image filesystem"}) {
		t.Errorf("events = %q", ev)
	}
}

func TestGarbageCollectReportsRemovalErrors(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80})
	e.addImage("sha256:a", 500)
	e.fs.available = 100
	e.images.InjectError("RemoveImage", errors.New("read-only file system"))
	err := e.m.GarbageCollect(context.Background(), t0)
	want := "wanted to free 100 bytes, but freed 0 bytes space with errors in image deletion: read-only file system"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	// Still known, so the next collection tries again.
	if e.m.records["sha256:a"] == nil {
		t.Error("record of the image that could not be removed was dropped")
	}
	if err := e.m.GarbageCollect(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, e)
}

func TestDeleteUnusedImages(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 90, LowThresholdPercent: 80, MinAge: time.Minute})
	e.addImage("sha256:unused1", 100)
	e.addImage("sha256:unused2", 100)
	e.addImage("sha256:used", 100)
	e.addImage("sha256:pinned", 100).Pinned = true
	e.addImage("sha256:pause", 100, pauseTag)
	e.setContainers(runtimeapi.ContainerState_CONTAINER_EXITED, "sha256:used")
	e.detect(t)
	e.clock.Step(2 * time.Minute)
	e.addImage("sha256:just-pulled", 100)
	if err := e.m.DeleteUnusedImages(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Usage is low (10%): DeleteUnusedImages does not look at it.
	wantIDs(t, e, "sha256:used", "sha256:pinned", "sha256:pause", "sha256:just-pulled")
}

func TestSandboxImageLookupFailureStopsCollection(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 0, LowThresholdPercent: 0})
	e.addImage("sha256:pause", 100, pauseTag)
	e.m.images = failingStatus{tagResolvingImages{e.images}}
	if err := e.m.DeleteUnusedImages(context.Background()); err == nil {
		t.Fatal("DeleteUnusedImages succeeded without knowing the sandbox image")
	}
	wantIDs(t, e, "sha256:pause")
}

type failingStatus struct{ tagResolvingImages }

func (failingStatus) ImageStatus(context.Context, *runtimeapi.ImageSpec, bool) (*runtimeapi.ImageStatusResponse, error) {
	return nil, errors.New("runtime down")
}

func TestStartGarbageCollectionReportsRepeatedFailures(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80})
	e.fs.err = errors.New("imageFs information is unavailable")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.m.StartGarbageCollection(ctx)

	waitFor(t, func() bool { return e.clock.HasWaiters() })
	e.clock.Step(ImageGCPeriod)
	select {
	case ev := <-e.rec.Events:
		if want := "Warning ImageGCFailed imageFs information is unavailable"; ev != want {
			t.Errorf("event = %q, want %q", ev, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no ImageGCFailed event after the second failure")
	}
	// The first failure made no event: only one is queued.
	if ev := e.events(); len(ev) != 0 {
		t.Errorf("extra events %q", ev)
	}
}

func TestStartGarbageCollectionDisabled(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 100, LowThresholdPercent: 80})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.m.StartGarbageCollection(ctx)
	time.Sleep(50 * time.Millisecond)
	if e.clock.HasWaiters() {
		t.Error("collection loop started although the policy disables it")
	}
}

func TestStartDetectsImagesPeriodically(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80})
	e.addImage("sha256:a", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.m.Start(ctx)
	waitFor(t, func() bool { return e.recordCount() == 1 })
	e.addImage("sha256:b", 1)
	e.clock.Step(DetectPeriod)
	waitFor(t, func() bool { return e.recordCount() == 2 })
}

func (e *env) recordCount() int {
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	return len(e.m.records)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFormatSize(t *testing.T) {
	for size, want := range map[int64]string{
		512: "512 B", 1536: "1.5 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB", 2 << 40: "2.0 TiB", 2048 << 40: "2048.0 TiB",
	} {
		if got := formatSize(size); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", size, got, want)
		}
	}
}

func TestSandboxImageFromStatus(t *testing.T) {
	resp := &runtimeapi.StatusResponse{Info: map[string]string{"config": `{"sandboxImage":"registry.k8s.io/pause:3.10","other":1}`}}
	if got := SandboxImageFromStatus(resp); got != pauseTag {
		t.Errorf("got %q", got)
	}
	for _, info := range []map[string]string{nil, {"config": "not json"}, {"config": `{}`}} {
		if got := SandboxImageFromStatus(&runtimeapi.StatusResponse{Info: info}); got != "" {
			t.Errorf("info %v: got %q, want none", info, got)
		}
	}
}

func TestCRIImageFs(t *testing.T) {
	images := critest.NewFakeImageService()
	dir := t.TempDir()
	images.SetFakeFilesystemUsage([]*runtimeapi.FilesystemUsage{{
		Timestamp: t0.UnixNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: dir},
		UsedBytes: &runtimeapi.UInt64Value{Value: 4096}, InodesUsed: &runtimeapi.UInt64Value{Value: 7},
	}})
	fs, err := CRIImageFs{Images: images}.ImageFsStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if fs.CapacityBytes == nil || *fs.CapacityBytes == 0 || fs.AvailableBytes == nil || *fs.AvailableBytes > *fs.CapacityBytes {
		t.Errorf("sizes from statfs(%s) missing or wrong: %+v", dir, fs)
	}
	if *fs.UsedBytes != 4096 || *fs.InodesUsed != 7 || !fs.Time.Time.Equal(t0) {
		t.Errorf("runtime's usage not reported: %+v", fs)
	}

	images.SetFakeFilesystemUsage([]*runtimeapi.FilesystemUsage{{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: dir + "/missing"}}})
	fs, err = CRIImageFs{Images: images}.ImageFsStats(context.Background())
	if err != nil || fs.CapacityBytes != nil {
		t.Errorf("unknown mount point: fs %+v err %v, want no sizes and no error", fs, err)
	}

	images.SetFakeFilesystemUsage(nil)
	if _, err := (CRIImageFs{Images: images}).ImageFsStats(context.Background()); err == nil || !strings.Contains(err.Error(), "unavailable") {
		t.Errorf("no filesystems: err = %v", err)
	}
}

// An image a container mounts as an image volume is in use, like the container's own.
func TestImageVolumeImagesAreInUse(t *testing.T) {
	e := newEnv(t, Policy{HighThresholdPercent: 90, LowThresholdPercent: 80, MinAge: time.Minute})
	e.addImage("sha256:app", 100)
	e.addImage("sha256:mounted", 100)
	e.addImage("sha256:unused", 100)
	e.addImage("sha256:pause", 100, pauseTag)
	e.setContainers(runtimeapi.ContainerState_CONTAINER_RUNNING, "sha256:app")
	e.runtime.Lock()
	for _, c := range e.runtime.Containers {
		c.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", Image: &runtimeapi.ImageSpec{Image: "sha256:mounted"}}}
	}
	e.runtime.Unlock()
	e.detect(t)
	e.clock.Step(2 * time.Minute)
	if err := e.m.DeleteUnusedImages(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, e, "sha256:app", "sha256:mounted", "sha256:pause")
}
