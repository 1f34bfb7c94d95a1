package logs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

const (
	// statusCheckPeriod is how often a follower asks the runtime whether the
	// container still runs, and the longest it waits for a change in the log
	// directory before looking at the file again anyway.
	statusCheckPeriod = time.Second
	// pollPeriod replaces file change notifications when they are unavailable.
	pollPeriod = 250 * time.Millisecond
)

// ReadLogs writes the container's log file at path to stdout and stderr as
// opts say. Without follow it writes the log as it is when called. With
// follow it then keeps writing new lines, moves on to the new file when the
// log is rotated (renamed away and recreated by the runtime), and returns
// once the container is no longer running, as runtimeService reports for
// containerID, and the rest of its log is written; or with ctx's error when
// ctx ends. Reaching the byte limit is success. containerID and
// runtimeService are only used with follow.
func ReadLogs(ctx context.Context, path, containerID string, opts *LogOptions, runtimeService internalapi.RuntimeService, stdout, stderr io.Writer) error {
	// The runtime and the kubelet own the log path, so following a symlink
	// is safe; the resolved path is the one that is watched and reopened.
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("failed to try resolving symlinks in path %q: %w", path, err)
	}
	f, err := os.Open(resolved)
	if err != nil {
		return fmt.Errorf("failed to open log file %q: %w", resolved, err)
	}
	out := newLogWriter(stdout, stderr, opts)
	if !opts.follow {
		defer f.Close()
		return endOfOutput(readCurrent(f, resolved, opts, out), resolved)
	}
	start, _, err := tailWindow(f, resolved, opts)
	if err == nil {
		if _, err = f.Seek(start, io.SeekStart); err != nil {
			err = fmt.Errorf("failed to seek %d in log file %q: %w", start, resolved, err)
		}
	}
	if err != nil {
		f.Close()
		return err
	}
	fl := &follower{
		path: resolved, containerID: containerID, runtimeService: runtimeService,
		out: out, file: f, src: newLineSource(f, resolved),
	}
	defer fl.close()
	return endOfOutput(fl.run(ctx), resolved)
}

// readCurrent writes the log as it is now; lines appended while it reads
// are left out, so that a tail gives the lines asked for and no more.
func readCurrent(f *os.File, path string, opts *LogOptions, out *logWriter) error {
	if opts.tail == 0 {
		return nil
	}
	start, end, err := tailWindow(f, path, opts)
	if err != nil {
		return err
	}
	return newLineSource(io.NewSectionReader(f, start, end-start), path).copyAll(out)
}

// tailWindow returns where in the log file the lines opts ask for start,
// and the file's current end.
func tailWindow(f *os.File, path string, opts *LogOptions) (start, end int64, err error) {
	info, err := f.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("failed to stat log file %q: %w", path, err)
	}
	start, err = findTailStart(f, info.Size(), opts)
	if err != nil {
		return 0, 0, fmt.Errorf("failed to tail %d lines of log file %q: %w", opts.tail, path, err)
	}
	return start, info.Size(), nil
}

// endOfOutput turns reaching the byte limit into success.
func endOfOutput(err error, path string) error {
	if errors.Is(err, errMaximumWrite) {
		klog.V(2).InfoS("Finished parsing log file, hit bytes limit", "path", path)
		return nil
	}
	return err
}

// lineSource cuts a log file into lines. Its reads may end in the middle of
// a line the runtime is still writing; that start of a line is kept until
// the rest arrives.
type lineSource struct {
	path    string
	reader  *bufio.Reader
	pending []byte
}

func newLineSource(r io.Reader, path string) *lineSource {
	return &lineSource{path: path, reader: bufio.NewReader(r)}
}

// copyAvailable writes every complete line that can be read now.
func (s *lineSource) copyAvailable(out *logWriter) error {
	for {
		chunk, err := s.reader.ReadBytes('\n')
		if len(s.pending) > 0 {
			chunk = append(s.pending, chunk...)
			s.pending = nil
		}
		if err == io.EOF {
			s.pending = chunk
			return nil
		}
		if err != nil {
			return fmt.Errorf("failed to read log file %q: %w", s.path, err)
		}
		if err := out.writeLine(chunk, s.path); err != nil {
			return err
		}
	}
}

// flushPending writes a line whose end will never be written: the file
// ended or the runtime moved on to a new file.
func (s *lineSource) flushPending(out *logWriter) error {
	if len(s.pending) == 0 {
		return nil
	}
	line := s.pending
	s.pending = nil
	klog.InfoS("Incomplete line in log file", "path", s.path, "line", string(line))
	return out.writeLine(line, s.path)
}

// copyAll writes the whole input, including an unterminated last line.
func (s *lineSource) copyAll(out *logWriter) error {
	if err := s.copyAvailable(out); err != nil {
		return err
	}
	return s.flushPending(out)
}

// follower writes a growing log file until its container stops.
type follower struct {
	path           string
	containerID    string
	runtimeService internalapi.RuntimeService
	out            *logWriter
	file           *os.File
	src            *lineSource
	changes        <-chan struct{} // a change in the log directory; nil when polling
	lastCheck      time.Time       // when the container was last seen running
	retired        *retiredLog     // the file the follower moved away from, still read for a while
}

// retiredLog is a rotated log file the follower has moved away from. The
// runtime creates the new file before it moves its writers over, and a
// writer it replaced may still flush a line into the old file after the
// new one has data, so the old file is read until its grace period ends.
type retiredLog struct {
	file  *os.File
	src   *lineSource
	until time.Time
}

// close closes the files the follower reads, which may be successors of the
// one it started with.
func (fl *follower) close() {
	fl.file.Close()
	if fl.retired != nil {
		fl.retired.file.Close()
	}
}

func (fl *follower) run(ctx context.Context) error {
	// Watch before the first read, so that no write after it goes unnoticed.
	changes, stopWatch, err := watchDir(filepath.Dir(fl.path))
	if err != nil {
		klog.ErrorS(err, "Cannot watch the log directory, polling the log file instead", "path", fl.path)
	} else {
		defer stopWatch()
		fl.changes = changes
	}
	for {
		if err := fl.drainRetired(false); err != nil {
			return err
		}
		if err := fl.src.copyAvailable(fl.out); err != nil {
			return err
		}
		switched, err := fl.switchIfRotated(false)
		if err != nil {
			return err
		}
		if switched {
			continue
		}
		running, err := fl.containerRunning(ctx)
		if err != nil {
			return err
		}
		if !running {
			return fl.finish()
		}
		if err := fl.waitForChange(ctx); err != nil {
			return err
		}
	}
}

// finish writes what the stopped container wrote since the last read, in
// the current file and in any successor a late rotation created.
func (fl *follower) finish() error {
	for {
		if err := fl.drainRetired(true); err != nil {
			return err
		}
		if err := fl.src.copyAvailable(fl.out); err != nil {
			return err
		}
		switched, err := fl.switchIfRotated(true)
		if err != nil {
			return err
		}
		if !switched {
			klog.V(2).InfoS("Finished parsing log file, container is not running", "path", fl.path)
			return fl.src.flushPending(fl.out)
		}
	}
}

// switchIfRotated moves to a new file at the log path. Rotation renames the
// log, then asks the runtime to reopen it; the runtime keeps writing the
// renamed file until it has created the new one and moved its writers
// over. So, while the container runs, the follower moves only once the new
// file has data, and goes on reading the old one for a grace period; once
// the container has stopped (final), nothing more is written and it moves
// at once.
func (fl *follower) switchIfRotated(final bool) (bool, error) {
	current, err := os.Stat(fl.path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // renamed, the runtime has not reopened it yet
	}
	if err != nil {
		return false, fmt.Errorf("failed to stat log file %q: %w", fl.path, err)
	}
	open, err := fl.file.Stat()
	if err != nil {
		return false, fmt.Errorf("failed to stat open log file %q: %w", fl.path, err)
	}
	if os.SameFile(open, current) || (!final && current.Size() == 0) {
		return false, nil
	}
	next, err := os.Open(fl.path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // rotated again meanwhile; the next look finds its successor
	}
	if err != nil {
		return false, fmt.Errorf("failed to open log file %q: %w", fl.path, err)
	}
	if err := fl.retire(); err != nil {
		next.Close()
		return false, err
	}
	klog.V(4).InfoS("Log file was rotated, following the new one", "path", fl.path)
	fl.file, fl.src = next, newLineSource(next, fl.path)
	return true, nil
}

// retire reads the current file to its end and keeps it as the retired
// one, after finishing with the one retired before it.
func (fl *follower) retire() error {
	if err := fl.drainRetired(true); err != nil {
		return err
	}
	if err := fl.src.copyAvailable(fl.out); err != nil {
		return err
	}
	fl.retired = &retiredLog{file: fl.file, src: fl.src, until: time.Now().Add(statusCheckPeriod)}
	return nil
}

// drainRetired writes what was added to the retired file since the last
// read. When final, or when its grace period is over, it also writes an
// unfinished last line and closes the file.
func (fl *follower) drainRetired(final bool) error {
	r := fl.retired
	if r == nil {
		return nil
	}
	if err := r.src.copyAvailable(fl.out); err != nil {
		return err
	}
	if !final && time.Now().Before(r.until) {
		return nil
	}
	fl.retired = nil
	r.file.Close()
	return r.src.flushPending(fl.out)
}

// containerRunning asks the runtime whether the container still runs, at
// most once per statusCheckPeriod: between checks it is taken as running.
func (fl *follower) containerRunning(ctx context.Context) (bool, error) {
	if time.Since(fl.lastCheck) < statusCheckPeriod {
		return true, nil
	}
	resp, err := fl.runtimeService.ContainerStatus(ctx, fl.containerID, false)
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		return false, fmt.Errorf("failed to get status of container %q: %w", fl.containerID, err)
	}
	if resp.GetStatus() == nil {
		return false, fmt.Errorf("runtime returned no status for container %q", fl.containerID)
	}
	if state := resp.GetStatus().GetState(); state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		klog.V(5).InfoS("Container is not running", "containerId", fl.containerID, "state", state)
		return false, nil
	}
	fl.lastCheck = time.Now()
	return true, nil
}

// waitForChange waits for a change in the log directory, or until it is
// time to check the container again.
func (fl *follower) waitForChange(ctx context.Context) error {
	wait := statusCheckPeriod
	if fl.changes == nil {
		wait = pollPeriod
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-fl.changes:
	case <-timer.C:
	}
	return nil
}
