package atomic

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
)

var versionName = regexp.MustCompile(`^\.\.\d{4}_\d{2}_\d{2}_\d{2}_\d{2}_\d{2}\.\d+$`)

func newWriter(t *testing.T) (*Writer, string) {
	t.Helper()
	dir := t.TempDir()
	w, err := NewWriter(dir, "test")
	if err != nil {
		t.Fatal(err)
	}
	return w, dir
}

func mustWrite(t *testing.T, w *Writer, payload map[string]FileProjection) {
	t.Helper()
	if err := w.Write(payload, nil); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func file(data string) FileProjection { return FileProjection{Data: []byte(data), Mode: 0o644} }

// checkContents asserts that the visible tree under dir holds exactly want.
func checkContents(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		// Follow the top-level link and walk what it leads to.
		root := filepath.Join(dir, e.Name())
		err := filepath.WalkDir(root+"/", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			got[rel] = string(b)
			return err
		})
		if err != nil {
			// A plain file: WalkDir on "name/" fails with ENOTDIR.
			b, rerr := os.ReadFile(root)
			if rerr != nil {
				t.Fatalf("reading %s: %v (walk: %v)", root, rerr, err)
			}
			got[e.Name()] = string(b)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("visible contents = %v, want %v", got, want)
	}
}

// versions lists the timestamped directories in dir.
func versions(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "..") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestNewWriterNeedsTheTargetDir(t *testing.T) {
	if _, err := NewWriter(filepath.Join(t.TempDir(), "missing"), "test"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("NewWriter on a missing dir: err = %v, want not exist", err)
	}
}

func TestLayout(t *testing.T) {
	old := syscall.Umask(0o077) // modes must not depend on the umask
	defer syscall.Umask(old)
	w, dir := newWriter(t)
	mustWrite(t, w, map[string]FileProjection{
		"token":          {Data: []byte("t"), Mode: 0o600},
		"conf/app.yaml":  {Data: []byte("a: 1"), Mode: 0o644},
		"conf/deep/x.sh": {Data: []byte("#!"), Mode: 0o755},
	})

	vs := versions(t, dir)
	if len(vs) != 1 || !versionName.MatchString(vs[0]) {
		t.Fatalf("version dirs = %v, want one named like ..YYYY_MM_DD_HH_MM_SS.N", vs)
	}
	if target, err := os.Readlink(filepath.Join(dir, "..data")); err != nil || target != vs[0] {
		t.Errorf("..data -> %q (%v), want %q", target, err, vs[0])
	}
	if fi, err := os.Stat(filepath.Join(dir, vs[0])); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("version dir mode = %v (%v), want 0755", fi.Mode().Perm(), err)
	}
	for name, want := range map[string]string{"token": "..data/token", "conf": "..data/conf"} {
		if got, err := os.Readlink(filepath.Join(dir, name)); err != nil || got != want {
			t.Errorf("%s -> %q (%v), want %q", name, got, err, want)
		}
	}
	for p, want := range map[string]os.FileMode{"token": 0o600, "conf/app.yaml": 0o644, "conf/deep/x.sh": 0o755} {
		if fi, err := os.Stat(filepath.Join(dir, p)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("mode of %s = %v (%v), want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "..data_tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("..data_tmp left behind: %v", err)
	}
	checkContents(t, dir, map[string]string{"token": "t", "conf/app.yaml": "a: 1", "conf/deep/x.sh": "#!"})
}

func TestUnchangedPayloadIsANoOp(t *testing.T) {
	w, dir := newWriter(t)
	payload := map[string]FileProjection{"a": file("1"), "d/b": file("2")}
	mustWrite(t, w, payload)
	before := versions(t, dir)
	fiBefore, err := os.Stat(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	setPermsCalled := false
	if err := w.Write(payload, func(string) error { setPermsCalled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if after := versions(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("versions %v -> %v, want unchanged", before, after)
	}
	fiAfter, _ := os.Stat(filepath.Join(dir, "a"))
	if !fiAfter.ModTime().Equal(fiBefore.ModTime()) || !os.SameFile(fiBefore, fiAfter) {
		t.Error("file was rewritten for an unchanged payload")
	}
	if setPermsCalled {
		t.Error("setPerms called although nothing was written")
	}
}

func TestUnchangedPayloadRestoresMissingLinks(t *testing.T) {
	w, dir := newWriter(t)
	payload := map[string]FileProjection{"a": file("1"), "d/b": file("2")}
	mustWrite(t, w, payload)
	before := versions(t, dir)
	// As after a crash between the swap and the links (upstream #121472).
	for _, name := range []string{"a", "d"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, w, payload)
	if after := versions(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("versions %v -> %v, want unchanged", before, after)
	}
	checkContents(t, dir, map[string]string{"a": "1", "d/b": "2"})
}

func TestUpdates(t *testing.T) {
	w, dir := newWriter(t)
	steps := []map[string]string{
		{"a": "1", "d/b": "2", "d/c": "3"},
		{"a": "1", "d/b": "2"},             // a nested key removed
		{"a": "1", "d/b": "2", "e/f": "4"}, // a new top-level dir
		{"d/b": "22", "e/f": "4"},          // a top-level key removed, a value changed
		{"d": "now a file", "e/f": "4"},    // a dir becomes a file
		{"d/x/y": "a dir again"},
		{},
	}
	for i, step := range steps {
		payload := map[string]FileProjection{}
		for p, v := range step {
			payload[p] = file(v)
		}
		mustWrite(t, w, payload)
		t.Run(fmt.Sprint("step", i), func(t *testing.T) {
			checkContents(t, dir, step)
			vs := versions(t, dir)
			if len(vs) != 1 {
				t.Fatalf("versions = %v, want only the current one", vs)
			}
			if target, _ := os.Readlink(filepath.Join(dir, "..data")); target != vs[0] {
				t.Errorf("..data -> %q, want %q", target, vs[0])
			}
		})
	}
}

func TestChangedValueMakesANewVersion(t *testing.T) {
	w, dir := newWriter(t)
	mustWrite(t, w, map[string]FileProjection{"a": file("1")})
	first := versions(t, dir)
	var setPermsArg string
	err := w.Write(map[string]FileProjection{"a": file("2")}, func(sub string) error { setPermsArg = sub; return nil })
	if err != nil {
		t.Fatal(err)
	}
	second := versions(t, dir)
	if len(second) != 1 || second[0] == first[0] {
		t.Fatalf("versions %v -> %v, want one new version", first, second)
	}
	if setPermsArg != second[0] {
		t.Errorf("setPerms got %q, want the new version %q", setPermsArg, second[0])
	}
}

func TestSetPermsFailureKeepsTheOldVersion(t *testing.T) {
	w, dir := newWriter(t)
	mustWrite(t, w, map[string]FileProjection{"a": file("1")})
	before := versions(t, dir)
	boom := errors.New("boom")
	if err := w.Write(map[string]FileProjection{"a": file("2")}, func(string) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Write err = %v, want boom", err)
	}
	if after := versions(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("versions %v -> %v, want the old one only", before, after)
	}
	checkContents(t, dir, map[string]string{"a": "1"})
}

func TestInterruptedWriteLeftoversAreCleaned(t *testing.T) {
	w, dir := newWriter(t)
	mustWrite(t, w, map[string]FileProjection{"a": file("1")})
	// A crash after creating a version and its ..data_tmp link, before the rename.
	orphan := filepath.Join(dir, "..2020_01_01_00_00_00.42")
	if err := os.Mkdir(orphan, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(orphan), filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, w, map[string]FileProjection{"a": file("2")})
	if vs := versions(t, dir); len(vs) != 1 || vs[0] == filepath.Base(orphan) {
		t.Errorf("versions = %v, want only the new one", vs)
	}
	if _, err := os.Lstat(filepath.Join(dir, "..data_tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("..data_tmp left behind: %v", err)
	}
	checkContents(t, dir, map[string]string{"a": "2"})
}

func TestDanglingDataLinkIsRewritten(t *testing.T) {
	w, dir := newWriter(t)
	mustWrite(t, w, map[string]FileProjection{})
	for _, v := range versions(t, dir) {
		if err := os.RemoveAll(filepath.Join(dir, v)); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, w, map[string]FileProjection{})
	if vs := versions(t, dir); len(vs) != 1 {
		t.Errorf("versions = %v, want a fresh one", vs)
	}
}

func TestFsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	w, dir := newWriter(t)
	uid := int64(4321)
	mustWrite(t, w, map[string]FileProjection{
		"token": {Data: []byte("t"), Mode: 0o600, FsUser: &uid},
		"plain": file("p"),
	})
	owner := func(p string, follow bool) int {
		var fi os.FileInfo
		var err error
		if follow {
			fi, err = os.Stat(p)
		} else {
			fi, err = os.Lstat(p)
		}
		if err != nil {
			t.Fatal(err)
		}
		return int(fi.Sys().(*syscall.Stat_t).Uid)
	}
	if got := owner(filepath.Join(dir, "token"), true); got != 4321 {
		t.Errorf("token file owner = %d, want 4321", got)
	}
	if got := owner(filepath.Join(dir, "token"), false); got != 4321 {
		t.Errorf("token link owner = %d, want 4321", got)
	}
	if got := owner(filepath.Join(dir, "plain"), true); got != os.Geteuid() {
		t.Errorf("plain file owner = %d, want %d", got, os.Geteuid())
	}
}

func TestInvalidPathsAreRefused(t *testing.T) {
	long := strings.Repeat("x", 256)
	for p, wantMsg := range map[string]string{
		"":                         "must not be empty",
		"/etc/passwd":              "must be relative path",
		"..":                       "must not contain '..'",
		"../escape":                "must not contain '..'",
		"a/../../escape":           "must not contain '..'",
		"..data":                   "must not start with '..'",
		"..hidden/file":            "must not start with '..'",
		".":                        "must name a file",
		long:                       "filenames must be less than or equal to 255 characters",
		strings.Repeat("a/", 2049): "must be less than or equal to 4096 characters",
	} {
		w, dir := newWriter(t)
		err := w.Write(map[string]FileProjection{"ok": file("1"), p: file("2")}, nil)
		if err == nil || !strings.Contains(err.Error(), wantMsg) {
			t.Errorf("path %.20q: err = %v, want it to say %q", p, err, wantMsg)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("path %.20q: something was written: %v", p, entries)
		}
	}
	for _, p := range []string{"a..b", "a/..b", "./a", "a/./b", "x/"} {
		w, _ := newWriter(t)
		if err := w.Write(map[string]FileProjection{p: file("1")}, nil); err != nil {
			t.Errorf("path %q refused: %v", p, err)
		}
	}
}

// TestReaderNeverSeesAMixedSet reads the volume while it is rewritten:
// every read that resolves "..data" once must see files of one version
// only, and a file missing from the version "..data" still points to is a
// half-published version.
func TestReaderNeverSeesAMixedSet(t *testing.T) {
	w, dir := newWriter(t)
	const updates = 300
	names := []string{"a", "b", "sub/c", "sub/deeper/d"}
	payloadFor := func(v int) map[string]FileProjection {
		p := map[string]FileProjection{}
		for i, n := range names {
			// Different sizes per file and version, so a torn write shows.
			p[n] = file(strings.Repeat(fmt.Sprintf("v%d;", v), 1+(v+i)%50))
		}
		return p
	}
	mustWrite(t, w, payloadFor(0))

	var wg sync.WaitGroup
	done := make(chan struct{})
	var consistent, retried int
	var readErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			ok, err := readOneVersion(dir, names)
			if err != nil {
				readErr = err
				return
			}
			if ok {
				consistent++
			} else {
				retried++
			}
		}
	}()
	for v := 1; v <= updates; v++ {
		if err := w.Write(payloadFor(v), nil); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	if readErr != nil {
		t.Fatal(readErr)
	}
	if consistent == 0 {
		t.Fatal("the reader never completed a read")
	}
	t.Logf("%d consistent reads, %d retried after the version was replaced", consistent, retried)
}

// readOneVersion reads all names through one resolution of "..data". It
// returns false when the version was replaced under the reader (a retry),
// and an error for a mixed or incomplete set.
func readOneVersion(dir string, names []string) (bool, error) {
	version, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		return false, fmt.Errorf("..data unreadable: %v", err)
	}
	seen := map[string]bool{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, version, n))
		if errors.Is(err, fs.ErrNotExist) {
			if now, _ := os.Readlink(filepath.Join(dir, "..data")); now == version {
				return false, fmt.Errorf("%s missing from the published version %s", n, version)
			}
			return false, nil
		}
		if err != nil {
			return false, err
		}
		tag, _, _ := strings.Cut(string(b), ";")
		if strings.Repeat(tag+";", strings.Count(string(b), ";")) != string(b) {
			return false, fmt.Errorf("%s torn: %q", n, b)
		}
		seen[tag] = true
	}
	if len(seen) != 1 {
		tags := make([]string, 0, len(seen))
		for tag := range seen {
			tags = append(tags, tag)
		}
		sort.Strings(tags)
		return false, fmt.Errorf("mixed versions in one read: %v", tags)
	}
	return true, nil
}
