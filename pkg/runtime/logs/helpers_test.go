package logs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critest "k8s.io/cri-api/pkg/apis/testing"
)

// baseTime is the timestamp of the first record a fakeLog writes.
var baseTime = time.Date(2026, 11, 25, 22, 38, 40, 153982685, time.UTC)

// fakeLog plays the runtime's part: it writes CRI records to a log file and
// reopens the file when asked, as a runtime does after a rotation.
type fakeLog struct {
	mu   sync.Mutex
	path string
	file *os.File
	next time.Time // timestamp of the next record
}

func newFakeLog(t *testing.T) *fakeLog {
	t.Helper()
	l := &fakeLog{path: filepath.Join(t.TempDir(), "0.log"), next: baseTime}
	if err := l.reopen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.file.Close()
	})
	return l
}

// reopen switches writes to the file now at the log path, creating it.
func (l *fakeLog) reopen() error {
	old, err := l.create()
	if old != nil {
		old.Close()
	}
	return err
}

// create switches writes to the file now at the log path, creating it, and
// returns the old file still open: a runtime's replaced writer may still
// flush to it.
func (l *fakeLog) create() (old *os.File, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	old, l.file = l.file, f
	return old, nil
}

// record writes one CRI record stamped one millisecond after the previous.
func (l *fakeLog) record(t *testing.T, stream, tag, text string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	rec := fmt.Sprintf("%s %s %s %s\n", l.next.Format(time.RFC3339Nano), stream, tag, text)
	l.next = l.next.Add(time.Millisecond)
	// Errorf, not Fatal: writers run in goroutines of their own too.
	if _, err := l.file.WriteString(rec); err != nil {
		t.Errorf("writing the log: %v", err)
	}
}

// raw writes bytes as they are.
func (l *fakeLog) raw(t *testing.T, s string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.file.WriteString(s); err != nil {
		t.Errorf("writing the log: %v", err)
	}
}

func (l *fakeLog) out(t *testing.T, text string) { t.Helper(); l.record(t, "stdout", "F", text) }
func (l *fakeLog) err(t *testing.T, text string) { t.Helper(); l.record(t, "stderr", "F", text) }

// fakeRuntime is the cri-api fake whose ReopenContainerLog reopens a fakeLog.
type fakeRuntime struct {
	*critest.FakeRuntimeService
	log *fakeLog
}

const testContainerID = "c1"

func newFakeRuntime(log *fakeLog) *fakeRuntime {
	r := &fakeRuntime{FakeRuntimeService: critest.NewFakeRuntimeService(), log: log}
	r.SetFakeContainers([]*critest.FakeContainer{{ContainerStatus: runtimeapi.ContainerStatus{
		Id:       testContainerID,
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
		State:    runtimeapi.ContainerState_CONTAINER_RUNNING,
		LogPath:  log.path,
	}}})
	return r
}

func (r *fakeRuntime) ReopenContainerLog(ctx context.Context, id string) error {
	if err := r.FakeRuntimeService.ReopenContainerLog(ctx, id); err != nil {
		return err
	}
	return r.log.reopen()
}

// exit marks the container exited.
func (r *fakeRuntime) exit() {
	r.Lock()
	defer r.Unlock()
	r.Containers[testContainerID].State = runtimeapi.ContainerState_CONTAINER_EXITED
}

// syncBuffer is a bytes.Buffer safe to read while a follower writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// readLogs runs ReadLogs without follow and returns what it wrote.
func readLogs(t *testing.T, path string, opts *LogOptions) (stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := ReadLogs(context.Background(), path, "", opts, nil, &out, &errOut); err != nil {
		t.Fatalf("ReadLogs: %v", err)
	}
	return out.String(), errOut.String()
}

// options builds LogOptions the way the kubelet does, from API options.
func options(apiOpts v1.PodLogOptions) *LogOptions {
	return NewLogOptions(&apiOpts, baseTime)
}

// waitFor polls cond until it holds or a few seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFollowerOnLog waits until a follower has the file now at the log path
// open. A follower that lets several rotations pass between two looks skips
// files that had data, as the kubelet's does; rotations are monitorInterval
// apart, so this does not happen in practice, and tests must not make it
// happen. A follower moves to a new file only once it has data.
func waitFollowerOnLog(t *testing.T, l *fakeLog) {
	t.Helper()
	waitFor(t, "the follower to open the new log", func() bool { return followerOnLog(l) })
}

// followerOnLog tells whether two descriptors of this process name the file
// at the log path, the fakeLog's and the follower's (a rotated file's
// descriptors name its new name).
func followerOnLog(l *fakeLog) bool {
	fds, _ := os.ReadDir("/proc/self/fd")
	open := 0
	for _, fd := range fds {
		if target, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); target == l.path {
			open++
		}
	}
	return open == 2
}
