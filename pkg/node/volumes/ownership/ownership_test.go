package ownership

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

const fsGroup int64 = 4321

// tree builds a volume and, beside it, a directory outside the volume that
// symlinks inside point to:
//
//	vol/            0700
//	vol/file        0600
//	vol/exec        0744
//	vol/sub/        0700
//	vol/sub/file    0604
//	vol/link     -> outside/target
//	vol/dirlink  -> outside
//	outside/target  0600
func tree(t *testing.T) (vol, outside string) {
	t.Helper()
	base := t.TempDir()
	vol = filepath.Join(base, "vol")
	outside = filepath.Join(base, "outside")
	mkdir(t, vol, 0o700)
	mkdir(t, filepath.Join(vol, "sub"), 0o700)
	mkdir(t, outside, 0o700)
	writeFile(t, filepath.Join(vol, "file"), 0o600)
	writeFile(t, filepath.Join(vol, "exec"), 0o744)
	writeFile(t, filepath.Join(vol, "sub", "file"), 0o604)
	writeFile(t, filepath.Join(outside, "target"), 0o600)
	symlink(t, filepath.Join(outside, "target"), filepath.Join(vol, "link"))
	symlink(t, outside, filepath.Join(vol, "dirlink"))
	return vol, outside
}

func mkdir(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.Mkdir(path, mode); err != nil {
		t.Fatal(err)
	}
	chmod(t, path, mode)
}

func writeFile(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("data"), mode); err != nil {
		t.Fatal(err)
	}
	chmod(t, path, mode)
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// chmod sets mode exactly, whatever the umask.
func chmod(t *testing.T, path string, mode fs.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

type attrs struct {
	gid  int
	mode fs.FileMode
}

func (a attrs) String() string { return fmt.Sprintf("gid %d mode %v", a.gid, a.mode) }

func lstat(t *testing.T, path string) attrs {
	t.Helper()
	info, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return attrs{int(info.Sys().(*syscall.Stat_t).Gid), info.Mode()}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("changing a file's group to an arbitrary gid needs root")
	}
}

func TestSetAlwaysGivesEveryFileTheGroup(t *testing.T) {
	requireRoot(t)
	g := int(fsGroup)
	for _, tc := range []struct {
		name     string
		readOnly bool
		want     map[string]attrs
	}{
		{"read-write", false, map[string]attrs{
			".":        {g, fs.ModeDir | fs.ModeSetgid | 0o770},
			"file":     {g, 0o660},
			"exec":     {g, 0o764},
			"sub":      {g, fs.ModeDir | fs.ModeSetgid | 0o770},
			"sub/file": {g, 0o664},
		}},
		{"read-only", true, map[string]attrs{
			".":        {g, fs.ModeDir | fs.ModeSetgid | 0o750},
			"file":     {g, 0o640},
			"exec":     {g, 0o744},
			"sub":      {g, fs.ModeDir | fs.ModeSetgid | 0o750},
			"sub/file": {g, 0o644},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol, _ := tree(t)
			if err := Set(vol, ptr.To(fsGroup), nil, tc.readOnly); err != nil {
				t.Fatal(err)
			}
			for rel, want := range tc.want {
				if got := lstat(t, filepath.Join(vol, rel)); got != want {
					t.Errorf("%s: %v, want %v", rel, got, want)
				}
			}
		})
	}
}

func TestSetLeavesSymlinkTargetsAlone(t *testing.T) {
	requireRoot(t)
	vol, outside := tree(t)
	targetBefore := lstat(t, filepath.Join(outside, "target"))
	outsideBefore := lstat(t, outside)

	if err := Set(vol, ptr.To(fsGroup), nil, false); err != nil {
		t.Fatal(err)
	}

	if got := lstat(t, filepath.Join(outside, "target")); got != targetBefore {
		t.Errorf("symlink target outside the volume changed: %v, was %v", got, targetBefore)
	}
	if got := lstat(t, outside); got != outsideBefore {
		t.Errorf("symlinked directory outside the volume changed: %v, was %v", got, outsideBefore)
	}
	// The links themselves carry the group (lchown), as upstream.
	for _, link := range []string{"link", "dirlink"} {
		got := lstat(t, filepath.Join(vol, link))
		if got.gid != int(fsGroup) || got.mode&fs.ModeSymlink == 0 {
			t.Errorf("%s: %v, want a symlink of gid %d", link, got, fsGroup)
		}
	}
}

func TestSetNilFSGroupIsNoop(t *testing.T) {
	vol, _ := tree(t)
	before := snapshot(t, vol)
	if err := Set(vol, nil, ptr.To(v1.FSGroupChangeAlways), false); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, vol); !maps.Equal(before, after) {
		t.Errorf("nil fsGroup changed the volume:\nbefore %v\nafter  %v", before, after)
	}
}

func TestSetOnRootMismatch(t *testing.T) {
	requireRoot(t)
	onMismatch := ptr.To(v1.FSGroupChangeOnRootMismatch)
	g := int(fsGroup)
	for _, tc := range []struct {
		name     string
		rootGid  int
		rootMode fs.FileMode
		readOnly bool
		walks    bool
	}{
		{"root matches", g, fs.ModeSetgid | 0o770, false, false},
		{"root has more bits", g, fs.ModeSetgid | 0o775, false, false},
		{"read-only root matches", g, fs.ModeSetgid | 0o750, true, false},
		{"root of another group", 0, fs.ModeSetgid | 0o770, false, true},
		{"root without setgid", g, 0o770, false, true},
		{"root without group write", g, fs.ModeSetgid | 0o750, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vol, _ := tree(t)
			if err := os.Lchown(vol, -1, tc.rootGid); err != nil {
				t.Fatal(err)
			}
			chmod(t, vol, tc.rootMode)
			file := filepath.Join(vol, "sub", "file")
			before := lstat(t, file)

			if err := Set(vol, ptr.To(fsGroup), onMismatch, tc.readOnly); err != nil {
				t.Fatal(err)
			}
			changed := lstat(t, file) != before
			if changed != tc.walks {
				t.Errorf("walked = %v, want %v", changed, tc.walks)
			}
		})
	}
}

func TestSetAlwaysWalksEvenWhenRootMatches(t *testing.T) {
	requireRoot(t)
	vol, _ := tree(t)
	if err := os.Lchown(vol, -1, int(fsGroup)); err != nil {
		t.Fatal(err)
	}
	chmod(t, vol, fs.ModeSetgid|0o770)
	if err := Set(vol, ptr.To(fsGroup), ptr.To(v1.FSGroupChangeAlways), false); err != nil {
		t.Fatal(err)
	}
	if got := lstat(t, filepath.Join(vol, "sub", "file")); got.gid != int(fsGroup) {
		t.Errorf("policy Always skipped the walk: %v", got)
	}
}

func TestSetMissingDir(t *testing.T) {
	if err := Set(filepath.Join(t.TempDir(), "gone"), ptr.To(fsGroup), nil, false); err == nil {
		t.Error("no error for a missing volume directory")
	}
}

// The root is visited last, so that an interrupted walk leaves the root
// unchanged and OnRootMismatch walks again next time.
func TestWalkDeepVisitsChildrenFirst(t *testing.T) {
	vol, _ := tree(t)
	var order []string
	err := walkDeep(vol, func(path string, _ fs.FileInfo) {
		rel, _ := filepath.Rel(vol, path)
		order = append(order, rel)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".", "dirlink", "exec", "file", "link", "sub", "sub/file"}
	if got := slices.Sorted(slices.Values(order)); !slices.Equal(got, want) {
		t.Fatalf("visited %v, want %v", got, want)
	}
	if order[len(order)-1] != "." {
		t.Errorf("root visited before its children: %v", order)
	}
	if slices.Index(order, "sub/file") > slices.Index(order, "sub") {
		t.Errorf("sub visited before sub/file: %v", order)
	}
}

func TestReportProgress(t *testing.T) {
	var mu sync.Mutex
	var logged []string
	defer func(w func(string, ...any), first, every time.Duration) {
		warnf, firstWarningAfter, progressEvery = w, first, every
	}(warnf, firstWarningAfter, progressEvery)
	warnf = func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintf(format, args...))
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(logged)
	}
	firstWarningAfter, progressEvery = 10*time.Millisecond, 10*time.Millisecond

	var files atomic.Int64
	files.Store(42)
	stop := reportProgress("/vol", &files)
	deadline := time.Now().Add(5 * time.Second)
	for count() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop()
	n := count()
	time.Sleep(50 * time.Millisecond)
	if count() != n {
		t.Errorf("progress still logged after stop")
	}

	mu.Lock()
	defer mu.Unlock()
	if len(logged) < 2 || !strings.Contains(logged[0], "could be slow") ||
		logged[1] != "Setting volume ownership for /vol, processed 42 files." {
		t.Errorf("logged %q", logged)
	}
}

func TestReportProgressQuietForFastWalks(t *testing.T) {
	defer func(w func(string, ...any)) { warnf = w }(warnf)
	var calls atomic.Int32
	warnf = func(string, ...any) { calls.Add(1) }

	var files atomic.Int64
	reportProgress("/vol", &files)()
	if calls.Load() != 0 {
		t.Errorf("a fast walk logged progress")
	}
}

func snapshot(t *testing.T, root string) map[string]attrs {
	t.Helper()
	got := map[string]attrs{}
	err := filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		got[path] = lstat(t, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}
