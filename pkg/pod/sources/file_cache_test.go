package sources

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// waitReported waits until a report holds all parts.
func (ft *fileSourceTest) waitReported(parts ...string) {
	ft.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for ft.reports.count(parts...) == 0 {
		if time.Now().After(deadline) {
			ft.t.Fatalf("no report with %q: %v", parts, ft.reports.lines)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFileSourceDoesNotReadUnchangedFilesAgain(t *testing.T) {
	requireInotify(t)
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	writeFile(t, good, manifest("good", "busybox"))
	writeFile(t, bad, "kind: Pod\napiVersion: v1\nmetadata: [oops")

	// A relist every 10 ms: some 50 of them while the files sit unchanged.
	ft := startFileSource(t, dir, 10*time.Millisecond, true)
	ft.waitForNames("good-node1")
	time.Sleep(500 * time.Millisecond)
	if g, b := ft.readsOf(good), ft.readsOf(bad); g != 1 || b != 1 {
		t.Fatalf("unchanged files read %d and %d times over ~50 relists, want once each", g, b)
	}
	if n := ft.reports.count("Could not process manifest file", bad); n != 1 {
		t.Fatalf("bad file reported %d times, want once: %v", n, ft.reports.lines)
	}

	// A change is read (once) and a bad file that changes is reported again. (Atomically:
	// the fast relist could otherwise catch the file half written and rightly read it.)
	replaceFile(t, bad, "kind: Deployment\napiVersion: apps/v1\n")
	ft.waitReported("Could not process manifest file", bad, `kind "Deployment"`)
	time.Sleep(200 * time.Millisecond)
	// The change is read by its event, and also by a relist when one meets the new file
	// before the event arrives; never more.
	if b := ft.readsOf(bad); b != 2 && b != 3 {
		t.Fatalf("bad file read %d times after one change, want 2 (or 3)", b)
	}
	if n := ft.reports.count("Could not process manifest file", bad); n != 2 {
		t.Fatalf("bad file reported %d times after one change, want 2: %v", n, ft.reports.lines)
	}
	if g := ft.readsOf(good); g != 1 {
		t.Fatalf("unchanged good file read %d times, want once", g)
	}
}

func TestFileSourceWithoutWatchReadsChangedFilesOnly(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, a, manifest("a", "busybox"))
	writeFile(t, b, manifest("b", "busybox"))
	ft := startFileSource(t, dir, 10*time.Millisecond, false)
	ft.waitForNames("a-node1", "b-node1")
	// A file written within racyWindow of its reading may be read once more: its
	// timestamps cannot yet tell a later write of the same size.
	time.Sleep(racyWindow + 300*time.Millisecond)
	readsA, readsB := ft.readsOf(a), ft.readsOf(b)
	if readsA > 2 || readsB > 2 {
		t.Fatalf("files read %d and %d times, want at most twice", readsA, readsB)
	}
	time.Sleep(500 * time.Millisecond) // some 50 relists more
	if ft.readsOf(a) != readsA || ft.readsOf(b) != readsB {
		t.Fatalf("unchanged files read again: %d→%d and %d→%d", readsA, ft.readsOf(a), readsB, ft.readsOf(b))
	}

	// The relist notices a change by its stamp and reads that file alone.
	replaceFile(t, b, manifest("b2", "busybox"))
	ft.waitForNames("a-node1", "b2-node1")
	if ft.readsOf(a) != readsA {
		t.Fatalf("a.yaml read again although only b.yaml changed")
	}
}

func TestFileSourceRefusesLargeFilesWithoutReadingThem(t *testing.T) {
	dir := t.TempDir()
	large := filepath.Join(dir, "large.yaml")
	body := manifest("large", "busybox") + "# " + strings.Repeat("x", maxManifestSize) + "\n"
	writeFile(t, large, body)
	writeFile(t, filepath.Join(dir, "small.yaml"), manifest("small", "busybox"))
	ft := startFileSource(t, dir, 10*time.Millisecond, false)
	ft.waitForNames("small-node1")
	ft.waitReported("Could not process manifest file", large,
		"file is 3.0 MiB ("+strconv.Itoa(len(body))+" bytes), larger than the 3 MiB limit for a manifest")
	time.Sleep(200 * time.Millisecond)
	if n := ft.reports.count(large); n != 1 {
		t.Fatalf("large file reported %d times, want once: %v", n, ft.reports.lines)
	}
}

func TestReadManifestDataChecksTheSizeFirst(t *testing.T) {
	if _, err := readManifestData(failingReader{t}, maxManifestSize+1); !errors.Is(err, errTooLarge) {
		t.Fatalf("got %v, want the size error without a read", err)
	}
	data, err := readManifestData(strings.NewReader("abc"), 3)
	if err != nil || string(data) != "abc" {
		t.Fatalf("got %q, %v", data, err)
	}
	// A file that grew after its stat is refused once it passes the limit.
	grown := bytes.NewReader(make([]byte, maxManifestSize+10))
	if _, err := readManifestData(grown, 10); !errors.Is(err, errTooLarge) {
		t.Fatalf("got %v for a file that grew past the limit", err)
	}
}

type failingReader struct{ t *testing.T }

func (r failingReader) Read([]byte) (int, error) {
	r.t.Fatal("a file over the limit was read")
	return 0, nil
}

func TestFileSourceErrorLinesAreBounded(t *testing.T) {
	dir := t.TempDir()
	hugeName := filepath.Join(dir, "huge-name.yaml")
	writeFile(t, hugeName, manifest(strings.Repeat("n", 1<<20), "busybox"))
	manyErrors := filepath.Join(dir, "many-errors.yaml")
	var spec strings.Builder
	for i := range 100 {
		spec.WriteString("  - name: Bad_" + strconv.Itoa(i) + "\n    image: \"\"\n")
	}
	writeFile(t, manyErrors, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: many\nspec:\n  containers:\n"+spec.String())
	garbage := filepath.Join(dir, "garbage.yaml")
	writeFile(t, garbage, "apiVersion: v1\nkind: "+strings.Repeat("K", 100000)+"\n")

	ft := startFileSource(t, dir, time.Hour, false)
	ft.nextSet()
	ft.waitReported(hugeName, "metadata.name: Invalid value: \"nnnn", "("+strconv.Itoa(1<<20+len("-node1"))+" bytes)")
	ft.waitReported(manyErrors, "invalid pod: [spec.containers[0].name: Invalid value: \"Bad_0\"", "more]")
	ft.waitReported(garbage, "KKKK…\" (100000 bytes)")
	ft.reports.mu.Lock()
	defer ft.reports.mu.Unlock()
	for _, line := range ft.reports.lines {
		if len(line) >= 1024 {
			t.Errorf("report of %d bytes: %.200s…", len(line), line)
		}
	}
}

func TestFileSourceVanishedEntriesAreNotProblems(t *testing.T) {
	dir := t.TempDir()
	reported := &reports{}
	s := newSourceFile(dir, "node1", time.Hour, nil)
	s.problems.logError = reported.log
	gone := filepath.Join(dir, "gone.yaml")
	s.readEntry(s.manifests, gone) // listed, then removed before it was stat'ed
	dangling := filepath.Join(dir, "dangling.yaml")
	if err := os.Symlink("/nonexistent/manifest.yaml", dangling); err != nil {
		t.Fatal(err)
	}
	s.readEntry(s.manifests, dangling)
	if n := reported.count(gone); n != 0 {
		t.Errorf("a vanished entry was reported: %v", reported.lines)
	}
	if n := reported.count("Could not get metadata", dangling); n != 1 {
		t.Errorf("a dangling symlink was reported %d times, want once: %v", n, reported.lines)
	}
}
