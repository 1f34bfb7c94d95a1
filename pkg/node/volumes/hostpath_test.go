package volumes

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// hostFixtures creates one file of every kind in a short temporary
// directory (unix socket paths are limited to 108 bytes).
type hostFixtures struct {
	dir, file, socket, fifo, symlinkToDir, missing, charDev, blockDev string
}

func newHostFixtures(t *testing.T) hostFixtures {
	t.Helper()
	base, err := os.MkdirTemp("", "hp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	f := hostFixtures{
		dir:          filepath.Join(base, "dir"),
		file:         filepath.Join(base, "file"),
		socket:       filepath.Join(base, "sock"),
		fifo:         filepath.Join(base, "fifo"),
		symlinkToDir: filepath.Join(base, "link"),
		missing:      filepath.Join(base, "missing"),
	}
	must(t, os.Mkdir(f.dir, 0o755))
	must(t, os.WriteFile(f.file, nil, 0o644))
	must(t, unix.Mkfifo(f.fifo, 0o644))
	must(t, os.Symlink(f.dir, f.symlinkToDir))
	ln, err := net.Listen("unix", f.socket)
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	f.charDev = filepath.Join(base, "chr")
	if unix.Mknod(f.charDev, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 5))) != nil {
		f.charDev = "/dev/zero" // the device nodes of /dev are not always real
	}
	blk := filepath.Join(base, "blk")
	if unix.Mknod(blk, unix.S_IFBLK|0o600, int(unix.Mkdev(7, 200))) == nil {
		f.blockDev = blk
	}
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func hostPathType(t v1.HostPathType) *v1.HostPathType { return &t }

func TestSetUpHostPathTypeChecks(t *testing.T) {
	f := newHostFixtures(t)
	charDev := f.charDev
	var st unix.Stat_t
	if err := unix.Stat(charDev, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		t.Fatalf("no character device to test with: %s (mode %o, %v)", charDev, st.Mode, err)
	}
	tests := []struct {
		name    string
		path    string
		typ     *v1.HostPathType
		wantErr string // exact; "" for success
	}{
		{"nil type does not check", f.missing, nil, ""},
		{"unset type does not check", f.missing, hostPathType(v1.HostPathUnset), ""},
		{"Directory", f.dir, hostPathType(v1.HostPathDirectory), ""},
		{"Directory through a symlink", f.symlinkToDir, hostPathType(v1.HostPathDirectory), ""},
		{"Directory is a file", f.file, hostPathType(v1.HostPathDirectory), "hostPath type check failed: " + f.file + " is not a directory, it's a File"},
		{"Directory missing", f.missing, hostPathType(v1.HostPathDirectory), "hostPath " + f.missing + " doesn't exist"},
		{"DirectoryOrCreate existing", f.dir, hostPathType(v1.HostPathDirectoryOrCreate), ""},
		{"DirectoryOrCreate is a file", f.file, hostPathType(v1.HostPathDirectoryOrCreate), "hostPath type check failed: " + f.file + " is not a directory, it's a File"},
		{"File", f.file, hostPathType(v1.HostPathFile), ""},
		{"File is a directory", f.dir, hostPathType(v1.HostPathFile), "hostPath type check failed: " + f.dir + " is not a file, it's a Directory"},
		{"File missing", f.missing, hostPathType(v1.HostPathFile), "hostPath " + f.missing + " doesn't exist"},
		{"FileOrCreate existing", f.file, hostPathType(v1.HostPathFileOrCreate), ""},
		{"FileOrCreate is a directory", f.dir, hostPathType(v1.HostPathFileOrCreate), "hostPath type check failed: " + f.dir + " is not a file, it's a Directory"},
		{"FileOrCreate without parent", filepath.Join(f.missing, "x"), hostPathType(v1.HostPathFileOrCreate), "open " + filepath.Join(f.missing, "x") + ": no such file or directory"},
		{"Socket", f.socket, hostPathType(v1.HostPathSocket), ""},
		{"Socket is a file", f.file, hostPathType(v1.HostPathSocket), "hostPath type check failed: " + f.file + " is not a socket file, it's a File"},
		{"Socket missing", f.missing, hostPathType(v1.HostPathSocket), "hostPath " + f.missing + " doesn't exist"},
		{"CharDevice", charDev, hostPathType(v1.HostPathCharDev), ""},
		{"CharDevice is a socket", f.socket, hostPathType(v1.HostPathCharDev), "hostPath type check failed: " + f.socket + " is not a character device, it's a Socket"},
		{"BlockDevice is a char device", charDev, hostPathType(v1.HostPathBlockDev), "hostPath type check failed: " + charDev + " is not a block device, it's a CharDevice"},
		{"BlockDevice missing", f.missing, hostPathType(v1.HostPathBlockDev), "hostPath " + f.missing + " doesn't exist"},
		{"FIFO is no known type", f.fifo, hostPathType(v1.HostPathFile),
			"hostPath type check failed, " + f.fifo + " is not a file, unable to determine its type: only recognise file, directory, socket, block device and character device"},
		{"invalid type", f.dir, hostPathType("Bogus"), "Bogus is an invalid volume type"},
		{"backsteps", f.dir + "/../dir", hostPathType(v1.HostPathDirectory), "invalid HostPath `" + f.dir + "/../dir`: must not contain '..'"},
		{"backsteps without a type", "/var/../etc", nil, "invalid HostPath `/var/../etc`: must not contain '..'"},
	}
	if f.blockDev != "" {
		tests = append(tests,
			struct {
				name    string
				path    string
				typ     *v1.HostPathType
				wantErr string
			}{"BlockDevice", f.blockDev, hostPathType(v1.HostPathBlockDev), ""},
			struct {
				name    string
				path    string
				typ     *v1.HostPathType
				wantErr string
			}{"CharDevice is a block device", f.blockDev, hostPathType(v1.HostPathCharDev), "hostPath type check failed: " + f.blockDev + " is not a character device, it's a BlockDevice"},
		)
	} else {
		t.Log("cannot create a block device node here; BlockDevice success is not covered")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := setUpHostPath(&v1.HostPathVolumeSource{Path: tt.path, Type: tt.typ})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("no error, want %q", tt.wantErr)
			case tt.wantErr != "" && err.Error() != tt.wantErr:
				t.Fatalf("error = %q\n        want %q", err, tt.wantErr)
			}
		})
	}
}

func TestHostPathOrCreateCreates(t *testing.T) {
	f := newHostFixtures(t)
	dir := filepath.Join(f.missing, "a", "b")
	must(t, setUpHostPath(&v1.HostPathVolumeSource{Path: dir, Type: hostPathType(v1.HostPathDirectoryOrCreate)}))
	if info, err := os.Stat(dir); err != nil || !info.IsDir() || info.Mode().Perm() != 0o755&^umask() {
		t.Fatalf("DirectoryOrCreate made %v (err %v), want a 0755 directory", info.Mode(), err)
	}
	file := filepath.Join(f.dir, "new-file")
	must(t, setUpHostPath(&v1.HostPathVolumeSource{Path: file, Type: hostPathType(v1.HostPathFileOrCreate)}))
	if info, err := os.Stat(file); err != nil || !info.Mode().IsRegular() || info.Size() != 0 || info.Mode().Perm() != 0o644&^umask() {
		t.Fatalf("FileOrCreate made %v (err %v), want an empty 0644 file", info.Mode(), err)
	}
	// Running again is fine and keeps the content.
	must(t, os.WriteFile(file, []byte("data"), 0o644))
	must(t, setUpHostPath(&v1.HostPathVolumeSource{Path: file, Type: hostPathType(v1.HostPathFileOrCreate)}))
	if b, _ := os.ReadFile(file); string(b) != "data" {
		t.Fatalf("FileOrCreate changed an existing file to %q", b)
	}
}

// umask returns the process umask without changing it for long.
func umask() os.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return os.FileMode(m)
}

func TestValidatePathNoBacksteps(t *testing.T) {
	for path, ok := range map[string]bool{
		"/var/log": true, "a/b": true, "a..b/c": true, "..a": true, "": true,
		"..": false, "../x": false, "a/../b": false, "a/..": false, "/..": false,
	} {
		err := validatePathNoBacksteps(path)
		if (err == nil) != ok {
			t.Errorf("validatePathNoBacksteps(%q) = %v, want ok=%v", path, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "must not contain '..'") {
			t.Errorf("unexpected message %q", err)
		}
	}
}
