package sources

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/pkg/kubetypes"
)

const (
	// watchRetryPeriod is how often a missing watch is tried again (upstream retries
	// its fsnotify watch from 1s).
	watchRetryPeriod = time.Second
	// defaultCheckPeriod replaces a period that is not positive: upstream's default
	// fileCheckFrequency and httpCheckFrequency.
	defaultCheckPeriod = 20 * time.Second
	// settleDelay is how long the directory must be quiet before the entries its
	// events named are read again, and maxSettleDelay bounds the wait when events keep
	// coming. One save is often several steps (sed -i writes "sedXXXXXX" and renames it
	// over the manifest; editors rename the manifest to a "~" backup, write a new one
	// and delete the backup); reading each step on its own would restart the pod once
	// per step and could run the temporary file. The steps of one save come from one
	// process within a few milliseconds; the delay is kept short because it adds to every
	// pod's start-up latency (the manifest → running goal is raw CRI cost + 20 ms).
	settleDelay    = 15 * time.Millisecond
	maxSettleDelay = time.Second
)

// NewSourceFile starts reading static pods from path, a directory of manifests or a
// single manifest file, and sends the complete set as a SET to updates: once at start
// (even when empty or when path does not exist yet, so the source becomes ready), then
// on every change seen by an inotify watch, and after every full re-list, done each
// period. The goroutines run for the life of the process, as upstream's do
// (StartSourceFile takes a context that ends them).
//
// What counts as a manifest: in a directory, every entry whose name does not start with
// "." (subdirectories are not read); one pod per file, YAML or JSON. A file that cannot
// be read, decoded or validated is reported once and left out of the set, so its pod
// goes away, while the other files are unaffected; once fixed it is read again. A file
// is read and decoded only when it changed: when its inode, size, mode, modification or
// change time differ from those of its last read, or a watch event names it. A relist
// of an unchanged directory therefore only lists and stats it, and a bad file is
// reported again only when it changes. A file over 3 MiB is refused without being read
// (upstream reads up to 10 MiB). Upstream
// keeps the last good pod of a file that turned bad until its next re-list; nodelet drops
// it as soon as the watch sees the change, so the set after an event is always what a
// re-list would produce. Watch events are applied once the directory has been quiet for
// a moment (settleDelay), so that the steps of one save reach the kubelet as one change.
// When two manifests define the same pod (namespace and name), the one whose file name
// sorts last is used, as upstream's re-list ends up doing, and the other is reported.
// Only the first YAML document of a file is read, as upstream does; more are reported.
func NewSourceFile(path string, nodeName types.NodeName, period time.Duration, updates chan<- interface{}) {
	StartSourceFile(context.Background(), path, nodeName, period, updates)
}

// StartSourceFile is NewSourceFile with a context that stops its goroutines.
func StartSourceFile(ctx context.Context, path string, nodeName types.NodeName, period time.Duration, updates chan<- interface{}) {
	s := newSourceFile(path, nodeName, period, updates)
	klog.V(1).InfoS("Watching path", "path", s.path)
	go s.run(ctx)
}

type sourceFile struct {
	path string
	// givenPath is path as configured, less trailing slashes: upstream hashes a single
	// manifest file's path into its pods' UIDs as such, not cleaned.
	givenPath string
	nodeName  types.NodeName
	period    time.Duration
	updates   chan<- interface{}

	// manifests holds the pod read from each good manifest file, by file path.
	manifests map[string]*v1.Pod
	// files remembers what each manifest file held when last read, so that a relist
	// reads and decodes only the files that changed; seen are the files the current
	// relist has met, the others are forgotten at its end.
	files map[string]*manifestFile
	seen  sets.Set[string]
	// lastSent is the last SET sent; nil before the first one.
	lastSent []*v1.Pod
	problems *problemLog

	// open opens a manifest file to read it; tests count the calls.
	open func(path string) (*os.File, error)

	watch dirWatcher
	// watched is the directory the watch is on, to notice when the path (a symlink)
	// comes to name another one.
	watched    os.FileInfo
	newWatcher func(dir string) (dirWatcher, error)
	watchRetry time.Duration
	// watchFailed avoids logging the same failure to watch every retry.
	watchFailed bool

	// pending holds the entries named by watch events not applied yet, and relistDue
	// says that everything must be read again instead (lost events, or a periodic
	// relist that fell while changes were settling). settleStart is when the first of
	// them came; zero when nothing is pending.
	pending     sets.Set[string]
	relistDue   bool
	settleStart time.Time
	settleDelay time.Duration
}

func newSourceFile(path string, nodeName types.NodeName, period time.Duration, updates chan<- interface{}) *sourceFile {
	return &sourceFile{
		path:        filepath.Clean(path),
		givenPath:   strings.TrimRight(path, string(filepath.Separator)),
		nodeName:    nodeName,
		period:      positiveOr(period, defaultCheckPeriod),
		updates:     updates,
		manifests:   make(map[string]*v1.Pod),
		files:       make(map[string]*manifestFile),
		open:        os.Open,
		seen:        sets.New[string](),
		problems:    newProblemLog(),
		newWatcher:  newDirWatcher,
		watchRetry:  watchRetryPeriod,
		pending:     sets.New[string](),
		settleDelay: settleDelay,
	}
}

// run owns all of the source's state; everything happens on this goroutine.
func (s *sourceFile) run(ctx context.Context) {
	defer s.stopWatch()
	// Watch before the first listing, so that no change falls between the two.
	s.startWatch()
	s.relist(ctx)

	relist := time.NewTicker(s.period)
	defer relist.Stop()
	retry := time.NewTicker(s.watchRetry)
	defer retry.Stop()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	for {
		// retry ticks only while there is no watch: a timer channel nobody waits on
		// does not wake the process (Go 1.23 timers), so a watched directory costs no
		// wake-up a second.
		var events <-chan watchEvent
		retryC := retry.C
		if s.watch != nil {
			events, retryC = s.watch.Events(), nil
		}
		var settled <-chan time.Time
		if s.settling() {
			settled = settle.C
		}
		select {
		case <-ctx.Done():
			return
		case <-relist.C:
			if s.settling() {
				s.relistDue = true // once the changes under way have settled
				continue
			}
			s.relist(ctx)
		case <-retryC:
			if s.startWatch() {
				s.relist(ctx)
			}
		case ev, ok := <-events:
			if !ok {
				// The directory went away or was replaced: list again, watch again later.
				s.stopWatch()
				s.relist(ctx)
				continue
			}
			if !s.queue(ev) {
				continue
			}
			if ev.op == opMovedIn && !strings.HasSuffix(ev.path, "~") {
				// An atomic write is complete: no need to wait for more steps. (A rename to
				// "name~" is an editor's backup, the first step of a save, not the last.)
				settle.Stop()
				s.applyPending(ctx)
				continue
			}
			settle.Reset(s.settleWait())
		case <-settled:
			s.applyPending(ctx)
		}
	}
}

// watchDir is the directory to watch: path itself, or the directory holding the
// manifest file (watching the directory, unlike upstream, survives editors that
// replace the file).
func (s *sourceFile) watchDir() (string, bool) {
	info, err := os.Stat(s.path)
	if err != nil {
		return "", false
	}
	if info.IsDir() {
		return s.path, true
	}
	return filepath.Dir(s.path), true
}

func (s *sourceFile) startWatch() bool {
	dir, ok := s.watchDir()
	if !ok {
		return false
	}
	info, err := os.Stat(dir)
	if err != nil {
		return false
	}
	w, err := s.newWatcher(dir)
	if err != nil {
		if !s.watchFailed {
			klog.V(2).InfoS("Unable to watch config path, relying on periodic relist", "path", dir, "err", err)
			s.watchFailed = true
		}
		return false
	}
	s.watch, s.watched, s.watchFailed = w, info, false
	return true
}

// rewatchIfRetargeted moves the watch when the directory to watch is no longer the one
// watched: a symlink was pointed elsewhere. The old directory still exists, so its
// watch would never end by itself.
func (s *sourceFile) rewatchIfRetargeted() {
	if s.watch == nil {
		return
	}
	dir, ok := s.watchDir()
	if !ok {
		return
	}
	if info, err := os.Stat(dir); err != nil || os.SameFile(info, s.watched) {
		return
	}
	klog.V(2).InfoS("Config path now names another directory, watching it instead", "path", s.path)
	s.stopWatch()
	s.startWatch()
}

func (s *sourceFile) stopWatch() {
	if s.watch != nil {
		s.watch.Close()
		s.watch = nil
	}
}

// relist reads every manifest again and sends the set if it changed (or was never sent).
// Whatever watch events were pending, it has read their entries too.
func (s *sourceFile) relist(ctx context.Context) {
	s.clearPending()
	s.rewatchIfRetargeted()
	s.problems.startPass()
	defer s.problems.endPass()
	s.seen = sets.New[string]()
	defer s.forgetUnseenFiles()

	info, err := os.Stat(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.problems.report(s.path, errors.New("path does not exist, ignoring"), "Unable to read config path", "path", s.path)
		s.manifests = make(map[string]*v1.Pod)
	case err != nil:
		s.problems.report(s.path, err, "Unable to read config path", "path", s.path)
		return
	case info.IsDir():
		manifests, err := s.readDir()
		if err != nil {
			s.problems.report(s.path, err, "Unable to read config path", "path", s.path)
			return
		}
		s.manifests = manifests
	case info.Mode().IsRegular():
		s.manifests = make(map[string]*v1.Pod)
		s.readManifest(s.manifests, s.path, info)
	default:
		s.problems.report(s.path, errors.New("path is not a directory or file"), "Unable to read config path", "path", s.path)
		return
	}
	s.sendIfChanged(ctx)
}

// readDir reads every manifest of the directory, skipping (and reporting) bad ones.
func (s *sourceFile) readDir() (map[string]*v1.Pod, error) {
	entries, err := os.ReadDir(s.path)
	if err != nil {
		return nil, err
	}
	manifests := make(map[string]*v1.Pod)
	for _, entry := range entries {
		if isHidden(entry.Name()) {
			continue
		}
		s.readEntry(manifests, filepath.Join(s.path, entry.Name()))
	}
	return manifests, nil
}

// readEntry reads one directory entry, following symlinks like upstream's os.Stat. An
// entry removed since the directory was listed is not a problem.
func (s *sourceFile) readEntry(into map[string]*v1.Pod, path string) {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !exists(path):
		delete(into, path)
	case err != nil:
		s.problems.report(path, err, "Could not get metadata", "path", path)
	case info.IsDir():
		s.problems.report(path, nil, "Provided manifest path is a directory, not recursing into manifest path", "path", path)
	case info.Mode().IsRegular():
		s.readManifest(into, path, info)
	default:
		s.problems.report(path, nil, "Manifest path is not a directory or file", "path", path, "mode", info.Mode())
	}
}

// exists reports whether the entry itself (not what a symlink names) is there.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// readManifest stores the pod of a good manifest in into, or reports the manifest and
// drops it from into. info is the file's stat: when it shows the same version of the
// file as last time, what was made of it then is used again without reading it.
func (s *sourceFile) readManifest(into map[string]*v1.Pod, path string, info os.FileInfo) {
	s.seen.Insert(path)
	mf := s.files[path]
	if mf == nil || mf.stale(info) {
		mf = s.loadManifest(path)
		if mf == nil { // deleted since listed
			delete(s.files, path)
			delete(into, path)
			return
		}
		s.files[path] = mf
	}
	if mf.err != nil {
		delete(into, path)
		s.problems.report(path, mf.err, "Could not process manifest file", "path", path)
		return
	}
	into[path] = mf.pod
	s.problems.resolve(path)
	s.reportIgnoredDocuments(path, mf.documents)
}

// loadManifest reads and decodes one manifest file (upstream's extractFromFile); nil
// means the file is gone. The result is remembered under the stamp of the file that was
// actually read, taken before reading: a write during the read changes the stamp, so the
// file is read again next time.
func (s *sourceFile) loadManifest(path string) *manifestFile {
	klog.V(3).InfoS("Reading config file", "path", path)
	f, err := s.open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil { // read again next relist
		return &manifestFile{err: boundError(err), recheckAfter: time.Now()}
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return &manifestFile{err: boundError(err), recheckAfter: time.Now()}
	}
	mf := &manifestFile{stamp: stampOf(info)}
	if s.watch == nil { // with a watch, its event says when the file changes again
		mf.recheckAfter = racyRecheck(mf.stamp)
	}
	data, err := readManifestData(f, info.Size())
	if err != nil {
		mf.err = boundError(err)
		return mf
	}
	source := path // a directory's entries: upstream's are joined, so cleaned, too
	if path == s.path {
		source = s.givenPath
	}
	defaulter := func(pod *v1.Pod) error { return applyDefaults(pod, source, true, s.nodeName) }
	parsed, pod, err := decodeSinglePod(data, defaulter)
	switch {
	case !parsed:
		mf.err = boundError(fmt.Errorf("%v: couldn't parse as pod(%v), please check config file", path, err))
	case err != nil:
		mf.err = boundError(err)
	default:
		mf.pod, mf.documents = pod, yamlDocuments(data)
	}
	return mf
}

// reportIgnoredDocuments says once that a manifest holds more documents than the one
// pod that is read from it (upstream drops them without a word).
func (s *sourceFile) reportIgnoredDocuments(path string, documents int) {
	key := "documents:" + path
	if documents > 1 {
		s.problems.report(key, nil, "Manifest file holds more than one YAML document, only the first is used", "path", path, "documents", documents)
		return
	}
	s.problems.resolve(key)
}

// forgetUnseenFiles drops what is remembered of files the last relist did not meet.
func (s *sourceFile) forgetUnseenFiles() {
	for path := range s.files {
		if !s.seen.Has(path) {
			delete(s.files, path)
		}
	}
}

// queue records what an event asks to read again, and reports whether it asked for
// anything.
func (s *sourceFile) queue(ev watchEvent) bool {
	switch {
	case ev.op == opRescan:
		// Events were lost: a file may have changed without its stamp showing it.
		s.relistDue = true
		s.files = make(map[string]*manifestFile)
	case !s.concerns(ev.path):
		return false
	case ev.op == opCreated && isRegularFile(ev.path):
		// A new regular file is still being written; its writer's close follows.
		// Anything else created (a symlink) is complete already.
		return false
	default:
		s.pending.Insert(ev.path)
	}
	if s.settleStart.IsZero() {
		s.settleStart = time.Now()
	}
	return true
}

func (s *sourceFile) settling() bool {
	return !s.settleStart.IsZero()
}

// settleWait is how long to wait for more events before applying the pending ones.
func (s *sourceFile) settleWait() time.Duration {
	if time.Since(s.settleStart) >= maxSettleDelay {
		return 0
	}
	return s.settleDelay
}

// applyPending reads the entries events named again (or everything, when a relist is
// due) and sends the set if it changed.
func (s *sourceFile) applyPending(ctx context.Context) {
	if s.relistDue {
		s.relist(ctx)
		return
	}
	paths := s.pending
	s.clearPending()
	for path := range paths {
		s.refreshEntry(path)
	}
	s.sendIfChanged(ctx)
}

func (s *sourceFile) clearPending() {
	s.pending = sets.New[string]()
	s.relistDue = false
	s.settleStart = time.Time{}
}

func isRegularFile(path string) bool {
	info, err := os.Lstat(path)
	return err == nil && info.Mode().IsRegular()
}

// concerns filters a watched directory's events down to the manifests of this source.
func (s *sourceFile) concerns(path string) bool {
	if isHidden(filepath.Base(path)) {
		klog.V(4).InfoS("Ignored pod manifest, because it starts with dots", "eventName", path)
		return false
	}
	if filepath.Dir(path) == s.path {
		return true
	}
	return path == s.path // the source is a single file in the watched directory
}

// refreshEntry reads one entry again, whatever happened to it: written, created,
// replaced, or gone. The event says it changed, so what was remembered of it goes even
// if its stamp looks the same (a write within the same clock tick, of the same size).
func (s *sourceFile) refreshEntry(path string) {
	delete(s.files, path)
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		delete(s.manifests, path)
		s.problems.resolve(path)
	case err == nil && info.Mode().IsRegular():
		s.readManifest(s.manifests, path, info)
	default:
		// Directories and odd entries are reported by the next relist.
		delete(s.manifests, path)
	}
}

// sendIfChanged sends the current set when it differs from the last one sent.
func (s *sourceFile) sendIfChanged(ctx context.Context) {
	pods := s.currentSet()
	if s.lastSent != nil && reflect.DeepEqual(pods, s.lastSent) {
		return
	}
	s.lastSent = pods
	update := PodUpdate{Pods: copyPods(pods), Op: SET, Source: kubetypes.FileSource}
	select {
	case s.updates <- update:
	case <-ctx.Done():
	}
}

// currentSet lists the pods in manifest file order. When manifests define the same
// pod, the last file wins; the others are reported.
func (s *sourceFile) currentSet() []*v1.Pod {
	paths := make([]string, 0, len(s.manifests))
	for path := range s.manifests {
		paths = append(paths, path)
	}
	sort.Strings(paths)

	winner := make(map[string]string, len(paths)) // namespace/name -> path
	for _, path := range paths {
		pod := s.manifests[path]
		winner[pod.Namespace+"/"+pod.Name] = path
	}
	pods := make([]*v1.Pod, 0, len(paths))
	for _, path := range paths {
		pod := s.manifests[path]
		used := winner[pod.Namespace+"/"+pod.Name]
		if used != path {
			s.problems.report("duplicate:"+path, nil, "Static pod is also defined by another manifest, ignoring this manifest",
				"path", path, "pod", klog.KObj(pod), "usedPath", used)
			continue
		}
		s.problems.resolve("duplicate:" + path)
		pods = append(pods, pod)
	}
	return pods
}

func positiveOr(d, fallback time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return fallback
}

func isHidden(name string) bool {
	return strings.HasPrefix(name, ".")
}
