package logs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// follower runs ReadLogs with follow in the background.
type followRun struct {
	stdout, stderr syncBuffer
	done           chan error
	cancel         context.CancelFunc
}

func startFollow(t *testing.T, l *fakeLog, rt *fakeRuntime, apiOpts v1.PodLogOptions) *followRun {
	t.Helper()
	apiOpts.Follow = true
	ctx, cancel := context.WithCancel(context.Background())
	f := &followRun{done: make(chan error, 1), cancel: cancel}
	go func() { f.done <- ReadLogs(ctx, l.path, testContainerID, options(apiOpts), rt, &f.stdout, &f.stderr) }()
	t.Cleanup(func() {
		cancel()
		<-f.done
	})
	return f
}

// result waits for ReadLogs to return.
func (f *followRun) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-f.done:
		f.done <- err // for the cleanup
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("ReadLogs still following 5s after the container exited")
		return nil
	}
}

func (f *followRun) waitStdout(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for f.stdout.String() != want {
		if time.Now().After(deadline) {
			got := f.stdout.String()
			t.Fatalf("stdout is %d bytes ending %q, want %d bytes ending %q",
				len(got), got[max(0, len(got)-40):], len(want), want[max(0, len(want)-40):])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFollowWritesAppendedLines(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	l.out(t, "before")
	f := startFollow(t, l, rt, v1.PodLogOptions{})
	f.waitStdout(t, "before\n")
	l.out(t, "after1")
	l.err(t, "err1")
	f.waitStdout(t, "before\nafter1\n")
	// A record arriving in pieces is written once it is complete.
	rec := baseTime.Format(time.RFC3339Nano) + " stdout F in pieces\n"
	l.raw(t, rec[:20])
	time.Sleep(50 * time.Millisecond)
	l.raw(t, rec[20:])
	f.waitStdout(t, "before\nafter1\nin pieces\n")
	rt.exit()
	if err := f.result(t); err != nil {
		t.Fatalf("ReadLogs: %v", err)
	}
	if got := f.stderr.String(); got != "err1\n" {
		t.Errorf("stderr %q", got)
	}
}

func TestFollowWithTailStartsAtTheTail(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	numbered(t, l, 5)
	f := startFollow(t, l, rt, v1.PodLogOptions{TailLines: ptr.To[int64](2)})
	f.waitStdout(t, lines(4, 5))
	l.out(t, "out6")
	f.waitStdout(t, lines(4, 6))
}

func TestFollowWithTailZeroShowsOnlyNewLines(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	numbered(t, l, 3)
	f := startFollow(t, l, rt, v1.PodLogOptions{TailLines: ptr.To[int64](0)})
	// The follower starts at some point; write until it shows something.
	for i := 0; f.stdout.String() == ""; i++ {
		if i == 100 {
			t.Fatal("no new line shown")
		}
		l.out(t, "new")
		time.Sleep(20 * time.Millisecond)
	}
	if got := f.stdout.String(); !strings.HasPrefix(got, "new\n") || strings.Contains(got, "out") {
		t.Errorf("stdout %q", got)
	}
}

func TestFollowEndsWhenContainerHasExited(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	numbered(t, l, 3)
	rt.exit()
	start := time.Now()
	f := startFollow(t, l, rt, v1.PodLogOptions{})
	if err := f.result(t); err != nil {
		t.Fatalf("ReadLogs: %v", err)
	}
	if took := time.Since(start); took > statusCheckPeriod/2 {
		t.Errorf("took %v for a container that had exited already", took)
	}
	if got := f.stdout.String(); got != lines(1, 3) {
		t.Errorf("stdout %q", got)
	}
}

func TestFollowEndsOnContextCancel(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	l.out(t, "a")
	f := startFollow(t, l, rt, v1.PodLogOptions{})
	f.waitStdout(t, "a\n")
	f.cancel()
	if err := f.result(t); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

func TestFollowEndsAtByteLimit(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	l.out(t, "abc")
	f := startFollow(t, l, rt, v1.PodLogOptions{LimitBytes: ptr.To[int64](6)})
	f.waitStdout(t, "abc\n")
	l.err(t, "defg")
	if err := f.result(t); err != nil {
		t.Fatalf("ReadLogs: %v", err)
	}
	if got := f.stderr.String(); got != "de" {
		t.Errorf("stderr %q", got)
	}
}

func TestFollowReturnsStatusErrors(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	rt.InjectError("ContainerStatus", errors.New("runtime is down"))
	f := startFollow(t, l, rt, v1.PodLogOptions{})
	if err := f.result(t); err == nil || !strings.Contains(err.Error(), "runtime is down") {
		t.Errorf("got %v", err)
	}
}

// TestFollowSurvivesRotation rotates the log the way the kubelet does while
// lines keep coming: rename, lines still written to the renamed file, then
// the runtime reopens the log. Every line must arrive once, in order.
func TestFollowSurvivesRotation(t *testing.T) {
	l := newFakeLog(t)
	rt := newFakeRuntime(l)
	f := startFollow(t, l, rt, v1.PodLogOptions{})
	n := 0
	write := func(count int) {
		for range count {
			n++
			l.out(t, fmt.Sprintf("out%d", n))
		}
	}
	waitFollowerOnLog(t, l)
	for round := range 3 {
		write(50)
		if round == 1 {
			f.waitStdout(t, lines(1, n)) // a rotation after the reader caught up
		}
		if err := os.Rename(l.path, fmt.Sprintf("%s.%d", l.path, round)); err != nil {
			t.Fatal(err)
		}
		write(5) // the runtime has not reopened the log yet
		time.Sleep(20 * time.Millisecond)
		if err := rt.ReopenContainerLog(context.Background(), testContainerID); err != nil {
			t.Fatal(err)
		}
		write(1) // the follower moves once the new log has data
		waitFollowerOnLog(t, l)
	}
	write(5)
	f.waitStdout(t, lines(1, n))
	rt.exit()
	if err := f.result(t); err != nil {
		t.Fatalf("ReadLogs: %v", err)
	}
	if got := f.stdout.String(); got != lines(1, n) {
		t.Errorf("got %d bytes, want %d: %q", len(got), len(lines(1, n)), got)
	}
}

// TestSwitchIfRotatedReadsOldFileToTheEnd covers the moments around a
// rotation: the runtime writes the renamed file until it has reopened the
// log, and may still flush a line there after the new file has data. Every
// line written to the old file must come out, before the new file's.
func TestSwitchIfRotatedReadsOldFileToTheEnd(t *testing.T) {
	l, fl, out := newTestFollower(t)
	if err := fl.src.copyAvailable(fl.out); err != nil {
		t.Fatal(err)
	}
	switched := func(final bool) bool {
		t.Helper()
		ok, err := fl.switchIfRotated(final)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if switched(false) {
		t.Fatal("switched without a rotation")
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		t.Fatal(err)
	}
	l.out(t, "b")
	if switched(false) {
		t.Fatal("switched before the runtime reopened the log")
	}
	old, err := l.create()
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	writeOld := func(s string) {
		t.Helper()
		if _, err := old.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	writeOld(baseTime.Format(time.RFC3339Nano) + " stdout F c\n")
	if switched(false) {
		t.Fatal("switched to a new log the runtime has not written yet")
	}
	l.out(t, "d")
	writeOld(baseTime.Format(time.RFC3339Nano) + " stdout F e\n")
	if !switched(false) {
		t.Fatal("did not switch to the new log")
	}
	writeOld(baseTime.Format(time.RFC3339Nano) + " stdout F f\n")
	writeOld(baseTime.Format(time.RFC3339Nano) + " stdout F never finished")
	if err := fl.drainRetired(false); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "a\nb\nc\ne\nf\n" {
		t.Errorf("after the switch: %q", got)
	}
	if fl.retired == nil {
		t.Fatal("the old log was closed before its grace period ended")
	}
	fl.retired.until = time.Now()
	if err := fl.drainRetired(false); err != nil {
		t.Fatal(err)
	}
	if fl.retired != nil {
		t.Error("the old log is still read after its grace period")
	}
	if err := fl.src.copyAvailable(fl.out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "a\nb\nc\ne\nf\nnever finishedd\n" {
		t.Errorf("after reading the new log: %q", got)
	}
}

// TestSwitchIfRotatedAfterExitTakesAnEmptyLog: once the container has
// stopped nothing more is written, so the follower moves to the new file
// even though it is empty, and reads the old one to its end first.
func TestSwitchIfRotatedAfterExitTakesAnEmptyLog(t *testing.T) {
	l, fl, out := newTestFollower(t)
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		t.Fatal(err)
	}
	l.out(t, "b")
	if err := l.reopen(); err != nil {
		t.Fatal(err)
	}
	if ok, err := fl.switchIfRotated(true); err != nil || !ok {
		t.Fatalf("switched %v, %v", ok, err)
	}
	if err := fl.drainRetired(true); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "a\nb\n" || fl.retired != nil {
		t.Errorf("got %q, retired %v", got, fl.retired)
	}
}

// newTestFollower returns a fakeLog holding the line "a", and a follower of
// it that writes to out and has read nothing yet.
func newTestFollower(t *testing.T) (*fakeLog, *follower, *syncBuffer) {
	t.Helper()
	l := newFakeLog(t)
	l.out(t, "a")
	f, err := os.Open(l.path)
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	fl := &follower{path: l.path, out: newLogWriter(out, out, options(v1.PodLogOptions{})), file: f, src: newLineSource(f, l.path)}
	t.Cleanup(fl.close)
	return l, fl, out
}
