package logs

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// newTestManager returns a manager for the fake runtime whose clock moves
// one second per rotation, so rotated names differ.
func newTestManager(t *testing.T, rt *fakeRuntime, maxSize string, maxFiles int) *ContainerLogManager {
	t.Helper()
	m, err := NewContainerLogManager(rt, maxSize, maxFiles, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	clock := baseTime
	m.now = func() time.Time {
		clock = clock.Add(time.Second)
		return clock
	}
	return m
}

// logFiles lists the log's directory.
func logFiles(t *testing.T, l *fakeLog) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(l.path))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// rotatedName is the name of the log rotated at baseTime+n seconds.
func rotatedName(n int) string {
	return "0.log." + baseTime.Add(time.Duration(n)*time.Second).Format(rotatedTimeFormat)
}

func gunzip(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func fill(t *testing.T, l *fakeLog, prefix string, size int) string {
	t.Helper()
	start, _ := os.ReadFile(l.path)
	for i := 0; ; i++ {
		data, _ := os.ReadFile(l.path)
		if len(data) >= size {
			return string(data[len(start):])
		}
		l.out(t, fmt.Sprintf("%s-%d", prefix, i))
	}
}

func TestContainerLogManagerRotatesCompressesAndKeepsMaxFiles(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	m := newTestManager(t, rt, "1Ki", 3)
	ctx := context.Background()

	first := fill(t, l, "first", 1024)
	if err := m.rotateLogs(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := logFiles(t, l), []string{"0.log", rotatedName(1)}; !slices.Equal(got, want) {
		t.Fatalf("after first rotation: %v, want %v", got, want)
	}
	if data, _ := os.ReadFile(filepath.Join(filepath.Dir(l.path), rotatedName(1))); string(data) != first {
		t.Errorf("rotated log holds %d bytes, want %d", len(data), len(first))
	}

	fill(t, l, "second", 1024)
	if err := m.rotateLogs(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := logFiles(t, l), []string{"0.log", rotatedName(1) + ".gz", rotatedName(2)}; !slices.Equal(got, want) {
		t.Fatalf("after second rotation: %v, want %v", got, want)
	}
	if got := gunzip(t, filepath.Join(filepath.Dir(l.path), rotatedName(1)+".gz")); got != first {
		t.Errorf("compressed log holds %d bytes, want %d", len(got), len(first))
	}

	fill(t, l, "third", 1024)
	if err := m.rotateLogs(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := logFiles(t, l), []string{"0.log", rotatedName(2) + ".gz", rotatedName(3)}; !slices.Equal(got, want) {
		t.Fatalf("after third rotation: %v, want %v", got, want)
	}
	l.out(t, "fresh")
	if stdout, _ := readLogs(t, l.path, options(v1.PodLogOptions{})); stdout != "fresh\n" {
		t.Errorf("live log after rotation: %q", stdout)
	}
}

func TestContainerLogManagerLeavesSmallAndStoppedLogs(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	m := newTestManager(t, rt, "1Ki", 2)
	fill(t, l, "small", 1000)
	if err := m.rotateLogs(context.Background()); err != nil {
		t.Fatal(err)
	}
	fill(t, l, "big", 2000)
	rt.exit()
	if err := m.rotateLogs(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := logFiles(t, l); !slices.Equal(got, []string{"0.log"}) {
		t.Errorf("files %v", got)
	}
	if slices.Contains(rt.GetCalls(), "ReopenContainerLog") {
		t.Error("reopened a log that was not rotated")
	}
}

func TestContainerLogManagerRestoresLogWhenReopenFails(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	m := newTestManager(t, rt, "10", 2)
	content := fill(t, l, "x", 10)
	rt.InjectError("ReopenContainerLog", errors.New("reopen failed"))
	if err := m.rotateLogs(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := logFiles(t, l); !slices.Equal(got, []string{"0.log"}) {
		t.Errorf("files %v", got)
	}
	if data, _ := os.ReadFile(l.path); string(data) != content {
		t.Errorf("log holds %q, want %q", data, content)
	}
}

func TestContainerLogManagerCleansUpInterruptedRotation(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	m := newTestManager(t, rt, "10", 5)
	dir := filepath.Dir(l.path)
	old := filepath.Join(dir, "0.log.20260101-000000")
	for _, name := range []string{old, old + ".gz", old + ".gz.tmp"} {
		if err := os.WriteFile(name, []byte("left over"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fill(t, l, "x", 10)
	if err := m.rotateLogs(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := logFiles(t, l), []string{"0.log", "0.log.20260101-000000.gz", rotatedName(1)}; !slices.Equal(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
}

func TestContainerLogManagerRecreatesMissingLog(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	m := newTestManager(t, rt, "10", 2)
	if err := os.Remove(l.path); err != nil {
		t.Fatal(err)
	}
	if err := m.rotateLogs(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.path); err != nil {
		t.Errorf("log not recreated: %v", err)
	}
}

func TestContainerLogManagerClean(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	m := newTestManager(t, rt, "10", 3)
	fill(t, l, "x", 10)
	if err := m.rotateLogs(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Clean(context.Background(), testContainerID); err != nil {
		t.Fatal(err)
	}
	if got := logFiles(t, l); len(got) != 0 {
		t.Errorf("files left: %v", got)
	}
}

func TestNewContainerLogManagerValidates(t *testing.T) {
	rt := newFakeRuntime(newFakeLog(t))
	for _, tc := range []struct {
		size  string
		files int
	}{{"10Mi", 1}, {"ten", 5}, {"10Mi", 0}} {
		if _, err := NewContainerLogManager(rt, tc.size, tc.files, time.Second); err == nil {
			t.Errorf("size %q files %d: no error", tc.size, tc.files)
		}
	}
	m, err := NewContainerLogManager(rt, "10Mi", 5, time.Second)
	if err != nil || m.maxSize != 10<<20 {
		t.Errorf("10Mi: %v, maxSize %d", err, m.maxSize)
	}
}

func TestContainerLogManagerStart(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	m := newTestManager(t, rt, "100", 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fill(t, l, "x", 200)
	m.Start(ctx)
	waitFor(t, "a rotation", func() bool { return len(logFiles(t, l)) == 2 })
	cancel()
	time.Sleep(50 * time.Millisecond) // let the background rotation see the cancel

	disabled := newFakeRuntime(newFakeLog(t))
	off, err := NewContainerLogManager(disabled, "-1", 2, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	off.Start(context.Background())
	time.Sleep(20 * time.Millisecond)
	if calls := disabled.GetCalls(); len(calls) != 0 {
		t.Errorf("disabled manager called the runtime: %v", calls)
	}
}

// TestFollowSurvivesManagerRotation follows a log while the manager rotates
// it over and over under a steady stream of lines.
func TestFollowSurvivesManagerRotation(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	m := newTestManager(t, rt, "2Ki", 3)
	f := startFollow(t, l, rt, v1.PodLogOptions{})
	waitFollowerOnLog(t, l)
	const total = 2000
	written := make(chan struct{})
	go func() {
		defer close(written)
		for i := 1; i <= total; i++ {
			l.out(t, fmt.Sprintf("out%d", i))
			if i%20 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	rotations := 0
	for done := false; !done; {
		select {
		case <-written:
			done = true
		case <-time.After(2 * time.Millisecond):
		}
		before := len(rt.GetCalls())
		if err := m.rotateLogs(context.Background()); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(rt.GetCalls()[before:], "ReopenContainerLog") {
			rotations++
			// The follower moves once the new log has data; a log the
			// writer finished before writing is left empty.
			waitFor(t, "the follower to open the new log", func() bool {
				return followerOnLog(l) || (closed(written) && emptyLog(t, l))
			})
		}
	}
	f.waitStdout(t, lines(1, total))
	rt.exit()
	if err := f.result(t); err != nil {
		t.Fatalf("ReadLogs: %v", err)
	}
	if rotations < 5 {
		t.Errorf("only %d rotations", rotations)
	}
	if got := f.stdout.String(); got != lines(1, total) {
		t.Errorf("got %d lines, want %d", strings.Count(got, "\n"), total)
	}
}

// A container's log path is asked for once, not every round: it never changes.
func TestContainerLogManagerAsksForEachLogPathOnce(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	m := newTestManager(t, rt, "1Ki", 2)
	statusCalls := func() int {
		n := 0
		for _, c := range rt.GetCalls() {
			if c == "ContainerStatus" {
				n++
			}
		}
		return n
	}
	for range 3 {
		if err := m.rotateLogs(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := statusCalls(); n != 1 {
		t.Errorf("%d ContainerStatus calls in three rounds, want 1", n)
	}
	// Still rotated from the remembered path.
	fill(t, l, "big", 1024)
	if err := m.rotateLogs(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := logFiles(t, l); len(got) != 2 {
		t.Errorf("files %v, want the live log and a rotated one", got)
	}
	// A container no longer listed is forgotten.
	rt.exit()
	if err := m.rotateLogs(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(m.logPaths) != 0 {
		t.Errorf("log paths of stopped containers kept: %v", m.logPaths)
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func emptyLog(t *testing.T, l *fakeLog) bool {
	t.Helper()
	info, err := os.Stat(l.path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size() == 0
}
