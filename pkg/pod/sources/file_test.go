package sources

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

const longPeriod = time.Hour // so that only the watch can deliver a change

func manifest(name, image string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: kube-system
spec:
  containers:
  - name: main
    image: %s
`, name, image)
}

// reports records what the source's problem log reported.
type reports struct {
	mu    sync.Mutex
	lines []string
}

func (r *reports) log(err error, msg string, keysAndValues ...interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf("%s err=%v %v", msg, err, keysAndValues))
}

// count returns how many reports contain all of the given parts.
func (r *reports) count(parts ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, line := range r.lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

type fileSourceTest struct {
	t       *testing.T
	updates chan interface{}
	reports *reports
	watched chan string

	mu    sync.Mutex
	reads map[string]int // how often each file was opened to be read
}

// readsOf returns how often the source opened path to read it.
func (ft *fileSourceTest) readsOf(path string) int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.reads[path]
}

// startFileSource runs a file source on path; watch=false disables inotify so that only
// the relist can see changes.
func startFileSource(t *testing.T, path string, period time.Duration, watch bool) *fileSourceTest {
	t.Helper()
	ft := &fileSourceTest{t: t, updates: make(chan interface{}, 100), reports: &reports{}, watched: make(chan string, 10), reads: map[string]int{}}
	s := newSourceFile(path, "node1", period, ft.updates)
	s.problems.logError = ft.reports.log
	s.open = func(path string) (*os.File, error) {
		ft.mu.Lock()
		ft.reads[path]++
		ft.mu.Unlock()
		return os.Open(path)
	}
	s.watchRetry = 20 * time.Millisecond
	s.newWatcher = func(dir string) (dirWatcher, error) {
		if !watch {
			return nil, errors.New("watch disabled by test")
		}
		ft.watched <- dir
		return newDirWatcher(dir)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return ft
}

// nextSet waits for the next SET the source sends.
func (ft *fileSourceTest) nextSet() []*v1.Pod {
	ft.t.Helper()
	select {
	case u := <-ft.updates:
		update := u.(PodUpdate)
		if update.Op != SET || update.Source != kubetypes.FileSource || update.Pods == nil {
			ft.t.Fatalf("unexpected update %+v", update)
		}
		return update.Pods
	case <-time.After(waitTimeout):
		ft.t.Fatal("no SET arrived")
		return nil
	}
}

// waitForNames waits for a SET holding exactly the given pod names.
func (ft *fileSourceTest) waitForNames(names ...string) []*v1.Pod {
	ft.t.Helper()
	sort.Strings(names)
	want := strings.Join(names, ",")
	deadline := time.Now().Add(waitTimeout)
	var got string
	for time.Now().Before(deadline) {
		pods := ft.nextSet()
		got = strings.Join(podNames(pods), ",")
		if got == want {
			return pods
		}
	}
	ft.t.Fatalf("last SET had pods [%s], want [%s]", got, want)
	return nil
}

// expectNoSet checks that no SET arrives for a while.
func (ft *fileSourceTest) expectNoSet(wait time.Duration) {
	ft.t.Helper()
	select {
	case u := <-ft.updates:
		ft.t.Fatalf("unexpected update %+v", u)
	default:
	}
	select {
	case u := <-ft.updates:
		ft.t.Fatalf("unexpected update %+v", u)
	case <-time.After(wait):
	}
}

func podNames(pods []*v1.Pod) []string {
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceFile writes a file the way editors and kubeadm do: a hidden temporary file,
// then a rename over the target.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func requireInotify(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the watch uses inotify")
	}
}

func TestFileSourceSendsEmptySetForEmptyDirectory(t *testing.T) {
	ft := startFileSource(t, t.TempDir(), longPeriod, false)
	if pods := ft.nextSet(); len(pods) != 0 {
		t.Fatalf("empty directory gave pods %v", podNames(pods))
	}
}

func TestFileSourceReadsManifests(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), manifest("a", "busybox"))
	writeFile(t, filepath.Join(dir, "b.json"), `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}`)
	writeFile(t, filepath.Join(dir, "c.manifest"), manifest("c", "busybox")) // any name counts
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), manifest("hidden", "busybox"))
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub", "d.yaml"), manifest("d", "busybox"))

	ft := startFileSource(t, dir, longPeriod, false)
	pods := ft.nextSet()
	if got := strings.Join(podNames(pods), ","); got != "a-node1,b-node1,c-node1" {
		t.Fatalf("pods %s", got)
	}
	for _, p := range pods {
		if p.Spec.NodeName != "node1" || p.UID == "" {
			t.Errorf("pod %s not defaulted: node %q uid %q", p.Name, p.Spec.NodeName, p.UID)
		}
	}
	if ft.reports.count("not recursing", filepath.Join(dir, "sub")) != 1 {
		t.Errorf("subdirectory not reported once: %v", ft.reports.lines)
	}
}

func TestFileSourceMissingDirectoryIsRetried(t *testing.T) {
	requireInotify(t)
	dir := filepath.Join(t.TempDir(), "manifests")
	ft := startFileSource(t, dir, 50*time.Millisecond, true)
	if pods := ft.nextSet(); len(pods) != 0 {
		t.Fatalf("missing directory gave pods %v", podNames(pods))
	}
	time.Sleep(200 * time.Millisecond) // several relists
	if n := ft.reports.count("Unable to read config path", "path does not exist"); n != 1 {
		t.Fatalf("missing path reported %d times, want once: %v", n, ft.reports.lines)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "a.yaml"), manifest("a", "busybox"))
	ft.waitForNames("a-node1")
	select {
	case <-ft.watched:
	case <-time.After(waitTimeout):
		t.Fatal("the directory was never watched once it existed")
	}
}

func TestFileSourceBadManifestIsReportedOnceAndSkipped(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	writeFile(t, good, manifest("good", "busybox"))
	writeFile(t, bad, "kind: Pod\napiVersion: v1\nmetadata: [oops")

	// Changes are made atomically: the fast relist would otherwise catch a file half
	// written and rightly report that too.
	ft := startFileSource(t, dir, 20*time.Millisecond, false)
	ft.waitForNames("good-node1")
	time.Sleep(200 * time.Millisecond) // about ten relists
	if n := ft.reports.count("Could not process manifest file", bad, "couldn't parse as pod"); n != 1 {
		t.Fatalf("bad manifest reported %d times, want once: %v", n, ft.reports.lines)
	}

	// An invalid (rather than unparsable) manifest is reported with the field at fault.
	replaceFile(t, bad, manifest("Bad_Name", "busybox"))
	deadline := time.Now().Add(waitTimeout)
	for ft.reports.count(bad, "invalid pod", "metadata.name") == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if ft.reports.count(bad, "invalid pod", "metadata.name") != 1 {
		t.Fatalf("invalid manifest not reported: %v", ft.reports.lines)
	}

	// Fixed: the pod comes up next to the other one.
	replaceFile(t, bad, manifest("fixed", "busybox"))
	ft.waitForNames("good-node1", "fixed-node1")

	// Broken again: reported again, and its pod leaves the set.
	replaceFile(t, bad, "not: [a pod")
	ft.waitForNames("good-node1")
	if n := ft.reports.count("Could not process manifest file", bad, "couldn't parse as pod"); n != 2 {
		t.Fatalf("re-broken manifest reported %d times in all, want 2: %v", n, ft.reports.lines)
	}
}

func TestFileSourceDuplicatePodsUseTheLastFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), manifest("web", "busybox:1"))
	writeFile(t, filepath.Join(dir, "b.yaml"), manifest("web", "busybox:2"))
	ft := startFileSource(t, dir, 20*time.Millisecond, false)
	pods := ft.nextSet()
	if len(pods) != 1 || pods[0].Spec.Containers[0].Image != "busybox:2" {
		t.Fatalf("pods %v, want only web from b.yaml", podNames(pods))
	}
	time.Sleep(100 * time.Millisecond)
	if n := ft.reports.count("also defined by another manifest", filepath.Join(dir, "a.yaml")); n != 1 {
		t.Fatalf("duplicate reported %d times, want once: %v", n, ft.reports.lines)
	}
}

func TestFileSourceWatchSeesChangesFast(t *testing.T) {
	requireInotify(t)
	dir := t.TempDir()
	c := NewConfig(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newSourceFile(dir, "node1", longPeriod, c.Channel(ctx, kubetypes.FileSource))
	go s.run(ctx)
	expectUpdate(t, c, ADD, kubetypes.FileSource) // the source is ready

	path := filepath.Join(dir, "web.yaml")
	start := time.Now()
	writeFile(t, path, manifest("web", "busybox:1"))
	added := nextUpdate(t, c)
	// The watch, not the hourly relist, brings it: once the directory has settled.
	if elapsed, want := time.Since(start), settleDelay+100*time.Millisecond; elapsed > want {
		t.Fatalf("the change took %v to reach Updates, want under %v", elapsed, want)
	}
	if added.Op != ADD || len(added.Pods) != 1 {
		t.Fatalf("got %s %v, want ADD of web", added.Op, podNames(added.Pods))
	}
	oldUID := added.Pods[0].UID

	// A changed manifest is a new pod: upstream replaces static pods on any change.
	replaceFile(t, path, manifest("web", "busybox:2"))
	expectUpdate(t, c, REMOVE, kubetypes.FileSource, string(oldUID))
	readded := nextUpdate(t, c)
	if readded.Op != ADD || readded.Pods[0].UID == oldUID || readded.Pods[0].Spec.Containers[0].Image != "busybox:2" {
		t.Fatalf("got %s of %v, want ADD of the new web", readded.Op, podUIDs(readded.Pods))
	}

	// A manifest turned bad loses its pod at once.
	writeFile(t, path, "kind: [")
	expectUpdate(t, c, REMOVE, kubetypes.FileSource, string(readded.Pods[0].UID))

	// So does a deleted one.
	writeFile(t, path, manifest("web", "busybox:2"))
	back := expectUpdate(t, c, ADD, kubetypes.FileSource, string(readded.Pods[0].UID)) // same content, same UID
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	expectUpdate(t, c, REMOVE, kubetypes.FileSource, string(back.Pods[0].UID))
}

func TestFileSourceIgnoresHiddenFileEvents(t *testing.T) {
	requireInotify(t)
	dir := t.TempDir()
	ft := startFileSource(t, dir, longPeriod, true)
	ft.nextSet()
	writeFile(t, filepath.Join(dir, ".web.yaml.swp"), manifest("web", "busybox"))
	ft.expectNoSet(200 * time.Millisecond)
}

func TestFileSourceRelistCatchesWhatTheWatchMissed(t *testing.T) {
	dir := t.TempDir()
	ft := startFileSource(t, dir, 50*time.Millisecond, false)
	ft.nextSet()
	writeFile(t, filepath.Join(dir, "web.yaml"), manifest("web", "busybox"))
	ft.waitForNames("web-node1")
	if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	ft.waitForNames()
	select {
	case dir := <-ft.watched:
		t.Fatalf("watched %s though the watch was disabled", dir)
	default:
	}
}

func TestFileSourceUnchangedRelistSendsNothing(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "web.yaml"), manifest("web", "busybox"))
	ft := startFileSource(t, dir, 10*time.Millisecond, false)
	ft.nextSet()
	ft.expectNoSet(100 * time.Millisecond)
}

func TestFileSourceSingleFile(t *testing.T) {
	requireInotify(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "web.yaml")
	writeFile(t, path, manifest("web", "busybox:1"))
	writeFile(t, filepath.Join(dir, "other.yaml"), manifest("other", "busybox"))

	ft := startFileSource(t, path, longPeriod, true)
	pods := ft.waitForNames("web-node1") // the sibling file is not part of the source
	if got := <-ft.watched; got != dir {
		t.Fatalf("watched %s, want the file's directory %s", got, dir)
	}
	replaceFile(t, path, manifest("web", "busybox:2"))
	replaced := ft.waitForNames("web-node1")
	if replaced[0].UID == pods[0].UID {
		t.Fatal("replaced manifest kept its UID")
	}
	writeFile(t, filepath.Join(dir, "other.yaml"), manifest("other", "busybox:2"))
	ft.expectNoSet(100 * time.Millisecond)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	ft.waitForNames()
}

func TestFileSourceDirectoryRemoved(t *testing.T) {
	requireInotify(t)
	dir := filepath.Join(t.TempDir(), "manifests")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "web.yaml"), manifest("web", "busybox"))
	ft := startFileSource(t, dir, longPeriod, true)
	ft.waitForNames("web-node1")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	ft.waitForNames()
}

func TestStartSourceFileFeedsConfig(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "web.yaml"), manifest("web", "busybox"))
	c := NewConfig(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	StartSourceFile(ctx, dir, "node1", longPeriod, c.Channel(ctx, kubetypes.FileSource))
	u := nextUpdate(t, c)
	if u.Op != ADD || len(u.Pods) != 1 || u.Pods[0].Annotations[kubetypes.ConfigSourceAnnotationKey] != kubetypes.FileSource {
		t.Fatalf("got %s %v", u.Op, podNames(u.Pods))
	}
	if !c.SeenAllSources(sets.New(kubetypes.FileSource)) {
		t.Fatal("file source not seen after its first listing")
	}
}

func TestFileSourceRelativePath(t *testing.T) {
	requireInotify(t)
	dir := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, dir)
	if err != nil {
		t.Fatal(err)
	}
	ft := startFileSource(t, "./"+rel+"/", longPeriod, true)
	ft.nextSet()
	writeFile(t, filepath.Join(dir, "web.yaml"), manifest("web", "busybox"))
	ft.waitForNames("web-node1") // seen by the watch: the period is an hour
}
