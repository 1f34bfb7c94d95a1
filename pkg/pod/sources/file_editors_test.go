package sources

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

// startWatchedConfig runs a file source on dir, with only its watch able to see changes,
// feeding a Config, and waits for the source to be announced.
func startWatchedConfig(t *testing.T, dir string) *Config {
	t.Helper()
	requireInotify(t)
	c := NewConfig(nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := newSourceFile(dir, "node1", longPeriod, c.Channel(ctx, kubetypes.FileSource))
	s.settleDelay = 300 * time.Millisecond // headroom for a loaded test machine
	go s.run(ctx)
	expectUpdate(t, c, ADD, kubetypes.FileSource) // the source is ready
	return c
}

// expectNoUpdate checks that nothing reaches Updates for a while.
func expectNoUpdate(t *testing.T, c *Config, wait time.Duration) {
	t.Helper()
	select {
	case u := <-c.Updates():
		t.Fatalf("unexpected %s of %v", u.Op, podUIDs(u.Pods))
	case <-time.After(wait):
	}
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// Vim with backupcopy=no (and "auto" when it can) saves by renaming the file to
// "<name>~", writing a new file under the old name and deleting the backup. Saving an unchanged manifest must
// not touch its pod; the backup, a manifest for the same pod under another name, must
// never replace it.
func TestFileSourceVimSaveDoesNotRestartThePod(t *testing.T) {
	dir := t.TempDir()
	c := startWatchedConfig(t, dir)
	path := filepath.Join(dir, "web.yaml")
	writeFile(t, path, manifest("web", "busybox:1"))
	expectUpdate(t, c, ADD, kubetypes.FileSource, string(nextUIDFor(t, path, "busybox:1")))

	rename(t, path, path+"~")
	writeFile(t, path, manifest("web", "busybox:1"))
	if err := os.Remove(path + "~"); err != nil {
		t.Fatal(err)
	}
	expectNoUpdate(t, c, 500*time.Millisecond)

	// A real change made the same way replaces the pod once.
	rename(t, path, path+"~")
	writeFile(t, path, manifest("web", "busybox:2"))
	if err := os.Remove(path + "~"); err != nil {
		t.Fatal(err)
	}
	expectUpdate(t, c, REMOVE, kubetypes.FileSource, string(nextUIDFor(t, path, "busybox:1")))
	expectUpdate(t, c, ADD, kubetypes.FileSource, string(nextUIDFor(t, path, "busybox:2")))
	expectNoUpdate(t, c, 500*time.Millisecond)
}

// "sed -i" writes a temporary file with a visible name ("sedXXXXXX") next to the
// manifest and renames it over the manifest: the temporary file must never run.
func TestFileSourceSedInPlaceReplacesThePodOnce(t *testing.T) {
	dir := t.TempDir()
	c := startWatchedConfig(t, dir)
	path := filepath.Join(dir, "etcd.yaml") // sorts before the temporary file
	writeFile(t, path, manifest("etcd", "busybox:1"))
	expectUpdate(t, c, ADD, kubetypes.FileSource, string(nextUIDFor(t, path, "busybox:1")))

	tmp := filepath.Join(dir, "sedAb12Cd")
	writeFile(t, tmp, manifest("etcd", "busybox:2"))
	time.Sleep(20 * time.Millisecond) // sed is usually faster; the source must not care
	rename(t, tmp, path)
	expectUpdate(t, c, REMOVE, kubetypes.FileSource, string(nextUIDFor(t, path, "busybox:1")))
	expectUpdate(t, c, ADD, kubetypes.FileSource, string(nextUIDFor(t, path, "busybox:2")))
	expectNoUpdate(t, c, 500*time.Millisecond)
}

// nextUIDFor is the UID a manifest for the given image at path gets.
func nextUIDFor(t *testing.T, path, image string) string {
	t.Helper()
	name := "web"
	if filepath.Base(path) == "etcd.yaml" {
		name = "etcd"
	}
	return string(mustDecode(t, manifest(name, image), path, "node1").UID)
}

// A manifest path that is a symlink to a directory may be pointed elsewhere
// ("ln -sfn"); the watch must follow it rather than keep watching the old directory.
func TestFileSourceFollowsARetargetedDirectorySymlink(t *testing.T) {
	requireInotify(t)
	root := t.TempDir()
	oldDir, newDir, link := filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "manifests")
	for _, d := range []string{oldDir, newDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(oldDir, link); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(oldDir, "web.yaml"), manifest("web", "busybox"))
	ft := startFileSource(t, link, 50*time.Millisecond, true)
	ft.waitForNames("web-node1")
	<-ft.watched

	// Replace the symlink atomically, as "ln -sfn" does.
	if err := os.Symlink(newDir, link+".tmp"); err != nil {
		t.Fatal(err)
	}
	rename(t, link+".tmp", link)
	ft.waitForNames() // the relist reads the new, empty directory
	select {
	case <-ft.watched:
	case <-time.After(waitTimeout):
		t.Fatal("the new directory was never watched")
	}
}

// Like upstream, only the first document of a multi-document file is read; nodelet says
// so once, rather than silently leaving the other pods out.
func TestFileSourceReportsIgnoredYAMLDocuments(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "two.yaml"), manifest("a", "busybox")+"---\n"+manifest("b", "busybox"))
	writeFile(t, filepath.Join(dir, "trailer.yaml"), "---\n"+manifest("c", "busybox")+"---\n# nothing more\n")
	ft := startFileSource(t, dir, 20*time.Millisecond, false)
	ft.waitForNames("a-node1", "c-node1")
	time.Sleep(100 * time.Millisecond) // several relists
	if n := ft.reports.count("only the first is used", "two.yaml"); n != 1 {
		t.Fatalf("ignored document reported %d times, want once: %v", n, ft.reports.lines)
	}
	if n := ft.reports.count("trailer.yaml"); n != 0 {
		t.Fatalf("empty trailing documents reported: %v", ft.reports.lines)
	}
}

// A manifest renamed into place (kubectl, Ansible and most config tools write a temp file
// and rename it) is complete: it is applied without waiting for the settle delay, which
// would otherwise add to every pod's start-up latency.
func TestFileSourceAtomicRenameIsAppliedAtOnce(t *testing.T) {
	dir := t.TempDir()
	c := startWatchedConfig(t, dir) // settle delay 300 ms
	path := filepath.Join(dir, "web.yaml")
	tmp := filepath.Join(dir, ".web.yaml.tmp")
	writeFile(t, tmp, manifest("web", "busybox:1"))
	start := time.Now()
	rename(t, tmp, path)
	expectUpdate(t, c, ADD, kubetypes.FileSource, string(nextUIDFor(t, path, "busybox:1")))
	if took := time.Since(start); took >= 300*time.Millisecond {
		t.Errorf("renamed manifest applied after %v: it waited for the settle delay", took)
	}
}
