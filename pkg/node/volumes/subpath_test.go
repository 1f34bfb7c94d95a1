package volumes

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"golang.org/x/sys/unix"
)

// requireRoot skips tests that mount.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
}

// unmountOnCleanup detaches what is still mounted below dir when the test ends, so that
// a failing test leaks no mount and t.TempDir's removal cannot go through one. Call it
// after creating the test's temporary directories: cleanups run last registered first.
func unmountOnCleanup(t *testing.T, dir string) {
	t.Helper()
	t.Cleanup(func() {
		for _, mp := range mountsBelow(t, dir) {
			_ = unix.Unmount(mp, unix.MNT_DETACH)
		}
	})
}

// mountsBelow lists the mount points at or below dir in this process's mount table,
// deepest first.
func mountsBelow(t *testing.T, dir string) []string {
	t.Helper()
	resolved, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	must(t, err)
	mounts, err := readMountInfo(selfMountInfo)
	must(t, err)
	return mountPointsUnder(mounts, resolved)
}

// mountCount counts the mounts stacked at path.
func mountCount(t *testing.T, path string) int {
	t.Helper()
	parent, err := filepath.EvalSymlinks(filepath.Dir(path))
	must(t, err)
	mounts, err := readMountInfo(selfMountInfo)
	must(t, err)
	n := 0
	for _, mnt := range mounts {
		if mnt.mountPoint == filepath.Join(parent, filepath.Base(path)) {
			n++
		}
	}
	return n
}

// assertSameFile fails unless a and b (not followed if symlinks) are one file.
func assertSameFile(t *testing.T, a, b string) {
	t.Helper()
	ia, err := os.Lstat(a)
	must(t, err)
	ib, err := os.Lstat(b)
	must(t, err)
	if !os.SameFile(ia, ib) {
		t.Errorf("%s is not %s", a, b)
	}
}

func TestOpenBeneathRefusesSymlinks(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "a/b/c"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "a/f"), nil, 0o644))
	must(t, os.Symlink("c", filepath.Join(root, "a/b/in")))
	must(t, os.Symlink(filepath.Join(root, "a/b/c"), filepath.Join(root, "a/b/abs")))
	must(t, os.Symlink(outside, filepath.Join(root, "a/out")))
	must(t, os.Symlink("a", filepath.Join(root, "top")))
	must(t, os.Symlink("f", filepath.Join(root, "a/flink")))

	for _, rel := range []string{".", "a", "a/b/c", "a/b/c/", "a/f"} {
		fd, err := openBeneath(root, rel)
		if err != nil {
			t.Errorf("openBeneath(%q): %v", rel, err)
			continue
		}
		var got, want unix.Stat_t
		must(t, unix.Fstat(fd, &got))
		must(t, unix.Lstat(filepath.Join(root, rel), &want))
		if got.Dev != want.Dev || got.Ino != want.Ino {
			t.Errorf("openBeneath(%q) opened another file", rel)
		}
		unix.Close(fd)
	}

	refused := map[string]string{
		// A symlink is refused wherever it is, even one that stays inside.
		"top":       "unexpected symlink found",
		"top/b":     "unexpected symlink found",
		"a/out":     "unexpected symlink found",
		"a/out/x":   "unexpected symlink found",
		"a/b/in":    "unexpected symlink found",
		"a/b/abs":   "unexpected symlink found",
		"a/b/in/x":  "unexpected symlink found",
		"a/flink":   "unexpected symlink found",
		"..":        "is outside of allowed base",
		"a/../..":   "is outside of allowed base",
		"../x":      "is outside of allowed base",
		"missing":   "no such file or directory",
		"a/f/under": "not a directory",
	}
	for rel, want := range refused {
		fd, err := openBeneath(root, rel)
		if err == nil {
			unix.Close(fd)
			t.Errorf("openBeneath(%q) succeeded", rel)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("openBeneath(%q) error = %v, want %q", rel, err, want)
		}
	}
	// The root itself is opened as given: a symlink there is refused too.
	if fd, err := openBeneath(filepath.Join(root, "top"), "b"); err == nil {
		unix.Close(fd)
		t.Error("openBeneath through a symlinked root succeeded")
	}
}

func TestOpenBeneathAfterSwap(t *testing.T) {
	// What bindSubPath does when the pod swaps a directory it resolved for a symlink
	// before the open: the walk refuses it.
	root := t.TempDir()
	outside := t.TempDir()
	sub := filepath.Join(root, "sub")
	must(t, os.MkdirAll(filepath.Join(sub, "x"), 0o755))
	must(t, os.MkdirAll(filepath.Join(outside, "x"), 0o755))
	resolved, err := filepath.EvalSymlinks(sub)
	must(t, err)
	rel, err := relWithin(root, resolved)
	must(t, err)

	must(t, os.Rename(sub, sub+".d"))
	must(t, os.Symlink(outside, sub))
	for _, r := range []string{rel, filepath.Join(rel, "x")} {
		if fd, err := openBeneath(root, r); err == nil {
			unix.Close(fd)
			t.Errorf("openBeneath(%q) followed the swapped-in symlink", r)
		}
	}
}

func TestMakeDirsBeneath(t *testing.T) {
	old := unix.Umask(0o077)
	t.Cleanup(func() { unix.Umask(old) })
	modeOf := func(path string) uint32 {
		t.Helper()
		var st unix.Stat_t
		must(t, unix.Lstat(path, &st))
		return st.Mode & 0o7777
	}

	t.Run("mode of the volume despite the umask", func(t *testing.T) {
		root := t.TempDir()
		must(t, makeDirsBeneath(root, ".", []string{"x", "y"}, 0o2775))
		for _, d := range []string{"x", "x/y"} {
			if got := modeOf(filepath.Join(root, d)); got != 0o2775 {
				t.Errorf("%s mode = %o, want 2775", d, got)
			}
		}
	})
	t.Run("existing part swapped for a symlink", func(t *testing.T) {
		root, outside := t.TempDir(), t.TempDir()
		must(t, os.Mkdir(filepath.Join(root, "a"), 0o755))
		// "a" was found and resolved; then it became a symlink out of the volume.
		must(t, os.Rename(filepath.Join(root, "a"), filepath.Join(root, "a.d")))
		must(t, os.Symlink(outside, filepath.Join(root, "a")))
		if err := makeDirsBeneath(root, "a", []string{"new"}, 0o755); err == nil {
			t.Error("created a directory through a symlink")
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 0 {
			t.Errorf("created %v outside the volume", entries)
		}
	})
	t.Run("missing directory replaced by a symlink", func(t *testing.T) {
		root, outside := t.TempDir(), t.TempDir()
		// "new" was missing; before mkdirat the pod made it a symlink out of the volume.
		must(t, os.Symlink(outside, filepath.Join(root, "new")))
		if err := makeDirsBeneath(root, ".", []string{"new", "deeper"}, 0o755); err == nil {
			t.Error("created a directory through a symlink")
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 0 {
			t.Errorf("created %v outside the volume", entries)
		}
	})
	t.Run("directory that appeared meanwhile is used as it is", func(t *testing.T) {
		root := t.TempDir()
		must(t, os.Mkdir(filepath.Join(root, "m"), 0o700))
		must(t, makeDirsBeneath(root, ".", []string{"m", "n"}, 0o777))
		if got := modeOf(filepath.Join(root, "m")); got != 0o700 {
			t.Errorf("existing directory's mode changed to %o", got)
		}
		if got := modeOf(filepath.Join(root, "m/n")); got != 0o777 {
			t.Errorf("new directory's mode = %o, want 777", got)
		}
	})
}

func TestSafeMakeDirKeepsTheVolumeSetgid(t *testing.T) {
	// An fsGroup volume is setgid; its subPath directories are too, as upstream makes them.
	root := t.TempDir()
	must(t, unix.Chmod(root, 0o2777))
	must(t, safeMakeDir(root, "a/b"))
	for _, d := range []string{"a", "a/b"} {
		var st unix.Stat_t
		must(t, unix.Lstat(filepath.Join(root, d), &st))
		if got := st.Mode & 0o7777; got != 0o2777 {
			t.Errorf("%s mode = %o, want 2777", d, got)
		}
	}
}

func TestSubPathBindMountLayout(t *testing.T) {
	requireRoot(t)
	m := newTestManager(t)
	unmountOnCleanup(t, m.rootDir)
	pod := newPod("uid-1", emptyDirVolume("cache", ""), emptyDirVolume("other", ""))
	must(t, m.SetUpPod(ctx, pod))
	cache := m.emptyDirPath("uid-1", "cache")
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{
		{Name: "other", MountPath: "/other"},
		{Name: "cache", MountPath: "/data", SubPath: "sub"},
	}}
	mounts, err := m.MountsFor(pod, c, nil)
	must(t, err)
	if got := mounts[0].HostPath; got != m.emptyDirPath("uid-1", "other") {
		t.Errorf("volume without subPath: host path %s", got)
	}
	// Upstream's layout: volume-subpaths/<volume>/<container>/<volumeMount index>.
	target := filepath.Join(m.PodDir("uid-1"), "volume-subpaths", "cache", "app", "1")
	if got := mounts[1].HostPath; got != target {
		t.Fatalf("host path %s, want %s", got, target)
	}
	if n := mountCount(t, target); n != 1 {
		t.Fatalf("%d mounts at %s, want 1", n, target)
	}
	assertSameFile(t, target, filepath.Join(cache, "sub"))
	for _, d := range []string{"volume-subpaths", "volume-subpaths/cache", "volume-subpaths/cache/app"} {
		if got := perm(t, filepath.Join(m.PodDir("uid-1"), d)); got != 0o750 {
			t.Errorf("%s mode = %o, want 750", d, got)
		}
	}
	must(t, os.WriteFile(filepath.Join(target, "through-the-mount"), []byte("x"), 0o644))
	if got := readFile(t, filepath.Join(cache, "sub", "through-the-mount")); got != "x" {
		t.Errorf("the mount does not show the subPath: %q", got)
	}
	if got := mountsBelow(t, m.PodDir("uid-1")); len(got) != 1 {
		t.Errorf("mounts in the pod directory: %v, want only the subPath's", got)
	}
}

func TestSubPathOfProjectedFile(t *testing.T) {
	// The keys of configMap, secret and downwardAPI volumes are symlinks into "..data",
	// itself a symlink to a timestamped directory; a subPath of a key is the file there,
	// as upstream mounts it.
	requireRoot(t)
	m := newTestManager(t)
	unmountOnCleanup(t, m.rootDir)
	vol := v1.Volume{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
		{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}
	pod := newPod("uid-1", vol)
	must(t, m.SetUpPod(ctx, pod))
	mounts, err := m.MountsFor(pod, &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "info", MountPath: "/etc/name", SubPath: "name"}}}, nil)
	must(t, err)
	target := filepath.Join(m.PodDir("uid-1"), "volume-subpaths/info/app/0")
	if mounts[0].HostPath != target || !mounts[0].Readonly {
		t.Fatalf("mount %v, want %s read-only", mounts[0], target)
	}
	resolved, err := filepath.EvalSymlinks(filepath.Join(m.projectionPath("uid-1", &vol), "name"))
	must(t, err)
	assertSameFile(t, target, resolved)
	if got := readFile(t, target); got != "web" {
		t.Errorf("subPath file = %q, want web", got)
	}
}

func TestSubPathOfClaimIsNamedAfterThePersistentVolume(t *testing.T) {
	requireRoot(t)
	data := t.TempDir()
	api := &fakeAPI{
		claims: map[string]*v1.PersistentVolumeClaim{"data": boundClaim("data", "pv-1", "claim-uid")},
		volumes: map[string]*v1.PersistentVolume{"pv-1": {
			ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
			Spec: v1.PersistentVolumeSpec{
				PersistentVolumeSource: v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: data}},
				ClaimRef:               &v1.ObjectReference{UID: "claim-uid"},
			},
		}},
	}
	m := newAPIManager(t, api)
	unmountOnCleanup(t, m.rootDir)
	pod := newPod("uid-1", v1.Volume{Name: "vol", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}})
	must(t, m.SetUpPod(ctx, pod))
	mounts, err := m.MountsFor(pod, &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "vol", MountPath: "/d", SubPath: "s"}}}, nil)
	must(t, err)
	// Upstream's InnerVolumeSpecName of a claim is its persistent volume's name.
	if want := filepath.Join(m.PodDir("uid-1"), "volume-subpaths/pv-1/app/0"); mounts[0].HostPath != want {
		t.Errorf("host path %s, want %s", mounts[0].HostPath, want)
	}
	must(t, m.CleanupPod("uid-1"))
	if _, err := os.Stat(filepath.Join(data, "s")); err != nil {
		t.Errorf("the claim's subPath is gone after cleanup: %v", err)
	}
}

func TestSubPathReusesItsMount(t *testing.T) {
	requireRoot(t)
	m := newTestManager(t)
	unmountOnCleanup(t, m.rootDir)
	pod := newPod("uid-1", emptyDirVolume("cache", ""))
	must(t, m.SetUpPod(ctx, pod))
	sub := filepath.Join(m.emptyDirPath("uid-1", "cache"), "sub")
	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "cache", MountPath: "/data", SubPath: "sub"}}}
	prepare := func(m *Manager) string {
		t.Helper()
		mounts, err := m.MountsFor(pod, c, nil)
		must(t, err)
		return mounts[0].HostPath
	}
	target := prepare(m)
	// A container restart, and a new nodelet process, find the mount made and keep it.
	if again := prepare(m); again != target {
		t.Fatalf("second prepare gave %s, want %s", again, target)
	}
	restarted := NewManager(m.rootDir)
	restarted.selinuxEnabled = false
	if again := prepare(restarted); again != target {
		t.Fatalf("prepare after a restart gave %s, want %s", again, target)
	}
	if n := mountCount(t, target); n != 1 {
		t.Errorf("%d mounts at %s after three prepares, want 1", n, target)
	}
	// The pod replaced its subPath with another directory: the old mount is replaced.
	must(t, os.Rename(sub, sub+".old"))
	must(t, os.Mkdir(sub, 0o755))
	prepare(m)
	if n := mountCount(t, target); n != 1 {
		t.Errorf("%d mounts at %s after the subPath changed, want 1", n, target)
	}
	assertSameFile(t, target, sub)
	// A directory subPath replaced by a file: the target becomes a file.
	must(t, os.Rename(sub, sub+".older"))
	must(t, os.WriteFile(sub, []byte("file"), 0o644))
	prepare(m)
	assertSameFile(t, target, sub)
	if n := mountCount(t, target); n != 1 {
		t.Errorf("%d mounts at %s after the subPath became a file, want 1", n, target)
	}
}

func TestSubPathSymlinkSwapRace(t *testing.T) {
	// The pod swaps its subPath between a directory and a symlink to a host directory
	// while nodelet prepares it again and again. Whatever nodelet hands the runtime must
	// never be the host directory: a refusal is fine, a mount of the host is not.
	requireRoot(t)
	m := newTestManager(t)
	host := t.TempDir()
	must(t, os.WriteFile(filepath.Join(host, "host-marker"), nil, 0o644))
	unmountOnCleanup(t, m.rootDir)
	pod := newPod("uid-1", emptyDirVolume("cache", ""))
	must(t, m.SetUpPod(ctx, pod))
	sub := filepath.Join(m.emptyDirPath("uid-1", "cache"), "sub")
	must(t, os.Mkdir(sub, 0o777))
	var hostStat unix.Stat_t
	must(t, unix.Stat(host, &hostStat))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = os.Rename(sub, sub+".d")
			_ = os.Symlink(host, sub)
			_ = os.Remove(sub)
			_ = os.Rename(sub+".d", sub)
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	c := &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "cache", MountPath: "/data", SubPath: "sub"}}}
	prefix := filepath.Join(m.PodDir("uid-1"), "volume-subpaths") + "/"
	mounted := 0
	for range 300 {
		mounts, err := m.MountsFor(pod, c, nil)
		if err != nil {
			continue
		}
		mounted++
		hostPath := mounts[0].HostPath
		if !strings.HasPrefix(hostPath, prefix) {
			t.Fatalf("host path %s is a path into the volume, which the pod can redirect; want a bind mount under %s", hostPath, prefix)
		}
		var st unix.Stat_t
		must(t, unix.Lstat(hostPath, &st))
		if st.Dev == hostStat.Dev && st.Ino == hostStat.Ino {
			t.Fatalf("%s is the host directory", hostPath)
		}
		if _, err := os.Lstat(filepath.Join(hostPath, "host-marker")); err == nil {
			t.Fatalf("%s shows the host directory's content", hostPath)
		}
	}
	t.Logf("%d of 300 prepares mounted, the others were refused", mounted)
}

func TestTearDownPodUnmountsSubPaths(t *testing.T) {
	for _, teardown := range []string{"TearDownPod", "CleanupPod"} {
		t.Run(teardown, func(t *testing.T) {
			requireRoot(t)
			m := newTestManager(t)
			hostDir := t.TempDir()
			must(t, os.MkdirAll(filepath.Join(hostDir, "sub"), 0o755))
			must(t, os.WriteFile(filepath.Join(hostDir, "sub", "keep"), []byte("host data"), 0o644))
			unmountOnCleanup(t, m.rootDir)
			pod := newPod("uid-1", emptyDirVolume("cache", ""), hostPathVolume("host", hostDir))
			must(t, m.SetUpPod(ctx, pod))
			a := &v1.Container{Name: "a", VolumeMounts: []v1.VolumeMount{
				{Name: "cache", MountPath: "/x", SubPath: "x"},
				{Name: "host", MountPath: "/h", SubPath: "sub"},
			}}
			b := &v1.Container{Name: "b", VolumeMounts: []v1.VolumeMount{{Name: "host", MountPath: "/keep", SubPath: "sub/keep"}}}
			for _, c := range []*v1.Container{a, b} {
				_, err := m.MountsFor(pod, c, nil)
				must(t, err)
			}
			if got := mountsBelow(t, m.PodDir("uid-1")); len(got) != 3 {
				t.Fatalf("mounts in the pod directory: %v, want 3", got)
			}

			if teardown == "TearDownPod" {
				must(t, m.TearDownPod("uid-1"))
				if _, err := os.Stat(m.PodDir("uid-1")); err != nil {
					t.Errorf("TearDownPod removed the pod directory: %v", err)
				}
			} else {
				must(t, m.CleanupPod("uid-1"))
				if _, err := os.Stat(m.PodDir("uid-1")); !os.IsNotExist(err) {
					t.Errorf("CleanupPod left the pod directory: %v", err)
				}
			}
			if got := mountsBelow(t, m.rootDir); len(got) != 0 {
				t.Errorf("left mounted: %v", got)
			}
			if _, err := os.Lstat(filepath.Join(m.PodDir("uid-1"), "volume-subpaths")); !os.IsNotExist(err) {
				t.Errorf("volume-subpaths left: %v", err)
			}
			// Unmounting never went through into the volume: the hostPath keeps its data.
			if got := readFile(t, filepath.Join(hostDir, "sub", "keep")); got != "host data" {
				t.Errorf("hostPath content = %q after teardown", got)
			}
		})
	}
}

func TestTearDownFindsOrphanedSubPathMounts(t *testing.T) {
	// Mounts left by a nodelet killed between a subPath's bind mount and its container's
	// start, or by the kubelet: a new process knows nothing of them but the pod directory.
	for _, teardown := range []string{"TearDownPod", "CleanupPod"} {
		t.Run(teardown, func(t *testing.T) { testTearDownFindsOrphanedSubPathMounts(t, teardown) })
	}
}

func testTearDownFindsOrphanedSubPathMounts(t *testing.T, teardown string) {
	requireRoot(t)
	root := t.TempDir()
	hostDir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(hostDir, "dir"), 0o755))
	must(t, os.WriteFile(filepath.Join(hostDir, "dir", "keep"), []byte("x"), 0o644))
	must(t, os.WriteFile(filepath.Join(hostDir, "file"), []byte("y"), 0o644))
	unmountOnCleanup(t, root)
	old := NewManager(root)
	must(t, old.SetUpPod(ctx, newPod("uid-1")))
	subPaths := filepath.Join(old.PodDir("uid-1"), "volume-subpaths")
	bind := func(src, target string, dir bool) {
		t.Helper()
		must(t, os.MkdirAll(filepath.Dir(target), 0o750))
		if dir {
			must(t, os.MkdirAll(target, 0o750))
		} else {
			must(t, os.WriteFile(target, nil, 0o640))
		}
		must(t, unix.Mount(src, target, "", unix.MS_BIND, ""))
	}
	bind(filepath.Join(hostDir, "dir"), filepath.Join(subPaths, "data/app/0"), true)
	bind(filepath.Join(hostDir, "dir"), filepath.Join(subPaths, "data/app/0"), true) // stacked
	bind(filepath.Join(hostDir, "file"), filepath.Join(subPaths, "data/app/1"), false)
	bind(filepath.Join(hostDir, "dir"), filepath.Join(subPaths, "other/sidecar/3"), true)
	must(t, os.MkdirAll(filepath.Join(subPaths, "data/never-mounted/0"), 0o750))

	restarted := NewManager(root)
	if teardown == "TearDownPod" {
		must(t, restarted.TearDownPod("uid-1"))
		if _, err := os.Lstat(subPaths); !os.IsNotExist(err) {
			t.Errorf("volume-subpaths left: %v", err)
		}
	} else {
		must(t, restarted.CleanupPod("uid-1"))
		if _, err := os.Stat(restarted.PodDir("uid-1")); !os.IsNotExist(err) {
			t.Errorf("pod directory left: %v", err)
		}
	}
	if got := mountsBelow(t, root); len(got) != 0 {
		t.Errorf("left mounted: %v", got)
	}
	if readFile(t, filepath.Join(hostDir, "dir", "keep")) != "x" || readFile(t, filepath.Join(hostDir, "file")) != "y" {
		t.Error("the volume's content changed")
	}
}

func TestSubPathCleanupKeepsTheHostsMounts(t *testing.T) {
	// The bind of a subPath on a shared mount is a peer of its source: what the host
	// mounts under the source shows under the target as well. Unmounting that copy must
	// not unmount the host's mount.
	requireRoot(t)
	m := newTestManager(t)
	hostDir := t.TempDir()
	unmountOnCleanup(t, hostDir)
	unmountOnCleanup(t, m.rootDir)
	must(t, unix.Mount(hostDir, hostDir, "", unix.MS_BIND, ""))
	must(t, unix.Mount("", hostDir, "", unix.MS_SHARED, ""))
	must(t, os.MkdirAll(filepath.Join(hostDir, "sub", "inner"), 0o755))
	pod := newPod("uid-1", hostPathVolume("host", hostDir))
	must(t, m.SetUpPod(ctx, pod))
	mounts, err := m.MountsFor(pod, &v1.Container{Name: "app", VolumeMounts: []v1.VolumeMount{{Name: "host", MountPath: "/h", SubPath: "sub"}}}, nil)
	must(t, err)
	target := mounts[0].HostPath
	if want := filepath.Join(m.PodDir("uid-1"), "volume-subpaths/host/app/0"); target != want {
		t.Fatalf("host path %s, want the bind mount %s", target, want)
	}

	inner := filepath.Join(hostDir, "sub", "inner")
	must(t, unix.Mount("tmpfs", inner, "tmpfs", 0, "size=1m"))
	if mountCount(t, filepath.Join(target, "inner")) != 1 {
		t.Skip("the host's mount did not propagate to the subPath's bind mount")
	}
	must(t, m.TearDownPod("uid-1"))
	if got := mountsBelow(t, m.PodDir("uid-1")); len(got) != 0 {
		t.Errorf("left mounted: %v", got)
	}
	if n := mountCount(t, inner); n != 1 {
		t.Errorf("the host's mount at %s was unmounted by the subPath's teardown", inner)
	}
}

func TestSubPathCleanupRefusesWhileMounted(t *testing.T) {
	m := newTestManager(t)
	must(t, m.SetUpPod(ctx, newPod("uid-1")))
	target := filepath.Join(m.PodDir("uid-1"), "volume-subpaths/vol/app/0")
	must(t, os.MkdirAll(target, 0o750))
	must(t, os.WriteFile(filepath.Join(target, "data"), []byte("x"), 0o644))
	resolved, err := filepath.EvalSymlinks(target)
	must(t, err)
	// The mount table lists a mount that cannot be unmounted (nothing is really mounted,
	// so umount fails with EINVAL and the entry stays).
	fake := filepath.Join(t.TempDir(), "mountinfo")
	must(t, os.WriteFile(fake, []byte("100 1 0:50 /sub "+resolved+" rw,relatime - ext4 /dev/sda1 rw\n"), 0o644))
	m.mountInfoPath = fake

	for _, teardown := range []func(uid types.UID) error{m.TearDownPod, m.CleanupPod} {
		if err := teardown("uid-1"); err == nil {
			t.Error("teardown succeeded with a mount left")
		}
		if got := readFile(t, filepath.Join(target, "data")); got != "x" {
			t.Errorf("content below the mount removed: %q", got)
		}
	}

	// Not in the mount table but not empty either (not a target of this layout): kept.
	m.mountInfoPath = selfMountInfo
	if err := m.CleanupPod("uid-1"); err == nil {
		t.Error("cleanup removed a target that has content")
	}
	if got := readFile(t, filepath.Join(target, "data")); got != "x" {
		t.Errorf("content of a target removed: %q", got)
	}
}
