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
	"k8s.io/klog/v2"
	utilio "k8s.io/utils/io"
)

const (
	// watchRetryPeriod is how often a missing watch is tried again (upstream retries
	// its fsnotify watch from 1s).
	watchRetryPeriod = time.Second
	// defaultCheckPeriod replaces a period that is not positive: upstream's default
	// fileCheckFrequency and httpCheckFrequency.
	defaultCheckPeriod = 20 * time.Second
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
// goes away, while the other files are unaffected; once fixed it is read again. Upstream
// keeps the last good pod of a file that turned bad until its next re-list; nodelet drops
// it as soon as the watch sees the change, so the set after an event is always what a
// re-list would produce. When two manifests define the same pod (namespace and name),
// the one whose file name sorts last is used, as upstream's re-list ends up doing, and
// the other is reported.
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
	path     string
	nodeName types.NodeName
	period   time.Duration
	updates  chan<- interface{}

	// manifests holds the pod read from each good manifest file, by file path.
	manifests map[string]*v1.Pod
	// lastSent is the last SET sent; nil before the first one.
	lastSent []*v1.Pod
	problems *problemLog

	watch      dirWatcher
	newWatcher func(dir string) (dirWatcher, error)
	watchRetry time.Duration
	// watchFailed avoids logging the same failure to watch every retry.
	watchFailed bool
}

func newSourceFile(path string, nodeName types.NodeName, period time.Duration, updates chan<- interface{}) *sourceFile {
	return &sourceFile{
		path:       filepath.Clean(path),
		nodeName:   nodeName,
		period:     positiveOr(period, defaultCheckPeriod),
		updates:    updates,
		manifests:  make(map[string]*v1.Pod),
		problems:   newProblemLog(),
		newWatcher: newDirWatcher,
		watchRetry: watchRetryPeriod,
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
	for {
		var events <-chan watchEvent
		if s.watch != nil {
			events = s.watch.Events()
		}
		select {
		case <-ctx.Done():
			return
		case <-relist.C:
			s.relist(ctx)
		case <-retry.C:
			if s.watch == nil && s.startWatch() {
				s.relist(ctx)
			}
		case ev, ok := <-events:
			if !ok {
				// The directory went away or was replaced: list again, watch again later.
				s.stopWatch()
				s.relist(ctx)
				continue
			}
			s.handleEvent(ctx, ev)
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
	w, err := s.newWatcher(dir)
	if err != nil {
		if !s.watchFailed {
			klog.V(2).InfoS("Unable to watch config path, relying on periodic relist", "path", dir, "err", err)
			s.watchFailed = true
		}
		return false
	}
	s.watch, s.watchFailed = w, false
	return true
}

func (s *sourceFile) stopWatch() {
	if s.watch != nil {
		s.watch.Close()
		s.watch = nil
	}
}

// relist reads every manifest again and sends the set if it changed (or was never sent).
func (s *sourceFile) relist(ctx context.Context) {
	s.problems.startPass()
	defer s.problems.endPass()

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
		s.readManifest(s.manifests, s.path)
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

// readEntry reads one directory entry, following symlinks like upstream's os.Stat.
func (s *sourceFile) readEntry(into map[string]*v1.Pod, path string) {
	info, err := os.Stat(path)
	switch {
	case err != nil:
		s.problems.report(path, err, "Could not get metadata", "path", path)
	case info.IsDir():
		s.problems.report(path, nil, "Provided manifest path is a directory, not recursing into manifest path", "path", path)
	case info.Mode().IsRegular():
		s.readManifest(into, path)
	default:
		s.problems.report(path, nil, "Manifest path is not a directory or file", "path", path, "mode", info.Mode())
	}
}

// readManifest stores the pod of a good manifest in into, or reports the manifest and
// drops it from into.
func (s *sourceFile) readManifest(into map[string]*v1.Pod, path string) {
	pod, err := s.extractFromFile(path)
	if err != nil {
		delete(into, path)
		if !errors.Is(err, fs.ErrNotExist) { // deleted since listed: not a problem
			s.problems.report(path, err, "Could not process manifest file", "path", path)
		}
		return
	}
	into[path] = pod
	s.problems.resolve(path)
}

// extractFromFile decodes one manifest (upstream's extractFromFile).
func (s *sourceFile) extractFromFile(path string) (*v1.Pod, error) {
	klog.V(3).InfoS("Reading config file", "path", path)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := utilio.ReadAtMost(f, maxConfigLength)
	if err != nil {
		return nil, err
	}
	defaulter := func(pod *v1.Pod) error { return applyDefaults(pod, path, true, s.nodeName) }
	parsed, pod, err := decodeSinglePod(data, defaulter)
	if !parsed {
		return nil, fmt.Errorf("%v: couldn't parse as pod(%v), please check config file", path, err)
	}
	return pod, err
}

// handleEvent re-reads the one entry an event is about.
func (s *sourceFile) handleEvent(ctx context.Context, ev watchEvent) {
	if ev.op == opRescan {
		s.relist(ctx)
		return
	}
	if !s.concerns(ev.path) {
		return
	}
	switch ev.op {
	case opRemoved:
		delete(s.manifests, ev.path)
		s.problems.resolve(ev.path)
	case opCreated:
		// A new regular file may still be being written; its close-after-write event
		// follows. Anything else created (a symlink) is complete already.
		if info, err := os.Lstat(ev.path); err == nil && info.Mode().IsRegular() {
			return
		}
		s.refreshEntry(ev.path)
	case opWritten:
		s.refreshEntry(ev.path)
	}
	s.sendIfChanged(ctx)
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

func (s *sourceFile) refreshEntry(path string) {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		delete(s.manifests, path)
		s.problems.resolve(path)
	case err == nil && info.Mode().IsRegular():
		s.readManifest(s.manifests, path)
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
	update := PodUpdate{Pods: copyPods(pods), Op: SET, Source: FileSource}
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
