package mountpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRootAndTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	base := t.TempDir()
	mnt := filepath.Join(base, "tmpfs")
	inner := filepath.Join(mnt, "inner")
	bind := filepath.Join(base, "bind")
	src := filepath.Join(base, "src")
	for _, d := range []string{mnt, bind, src} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if root, known, err := Root("/", true); err != nil || !known {
		t.Skipf("statx does not report mount roots here (%v)", err)
	} else if !root {
		t.Fatal(`"/" is not a mount root`)
	}

	mustMount(t, "tmpfs", mnt, "tmpfs", 0)
	mustMount(t, src, bind, "", unix.MS_BIND) // same filesystem: no new device
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(mnt, link); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		path             string
		follow           bool
		root, tmpfs, dev bool
	}{
		{path: base},
		{path: mnt, root: true, tmpfs: true, dev: true},
		{path: inner, tmpfs: true}, // inside a tmpfs, not mounted on
		{path: bind, root: true},   // a bind mount the device comparison misses
		{path: link, follow: true, root: true, tmpfs: true, dev: true},
		{path: link, tmpfs: true, dev: true}, // the symlink itself is no mount root
	} {
		root, _, err := Root(c.path, c.follow)
		if err != nil || root != c.root {
			t.Errorf("Root(%s, follow %v) = %v, %v; want %v", c.path, c.follow, root, err, c.root)
		}
		if tmpfs, err := IsTmpfs(c.path); err != nil || tmpfs != c.tmpfs {
			t.Errorf("IsTmpfs(%s) = %v, %v; want %v", c.path, tmpfs, err, c.tmpfs)
		}
		if dev, err := OnOtherDevice(c.path); err != nil || dev != c.dev {
			t.Errorf("OnOtherDevice(%s) = %v, %v; want %v", c.path, dev, err, c.dev)
		}
	}
}

func TestMissingPath(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone")
	if _, _, err := Root(missing, true); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Root of a missing path: %v, want ErrNotExist", err)
	}
	if dev, err := OnOtherDevice(missing); err != nil || dev {
		t.Errorf("OnOtherDevice of a missing path = %v, %v; want false, nil", dev, err)
	}
}

func mustMount(t *testing.T, src, dst, fstype string, flags uintptr) {
	t.Helper()
	if err := unix.Mount(src, dst, fstype, flags, ""); err != nil {
		t.Fatalf("mount %s on %s: %v", src, dst, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dst, unix.MNT_DETACH) })
}
