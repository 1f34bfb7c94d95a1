package logs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// numbered writes lines out1..outN to stdout.
func numbered(t *testing.T, l *fakeLog, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		l.out(t, fmt.Sprintf("out%d", i))
	}
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "out%d\n", i)
	}
	return b.String()
}

func TestReadLogsSplitsStreams(t *testing.T) {
	l := newFakeLog(t)
	l.out(t, "o1")
	l.err(t, "e1")
	l.out(t, "o2")
	stdout, stderr := readLogs(t, l.path, options(v1.PodLogOptions{}))
	if stdout != "o1\no2\n" || stderr != "e1\n" {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
}

func TestReadLogsJoinsPartialLines(t *testing.T) {
	l := newFakeLog(t)
	l.record(t, "stdout", "P", "hel")
	l.record(t, "stderr", "F", "between")
	l.record(t, "stdout", "P", "lo ")
	l.record(t, "stdout", "F", "world")
	stdout, stderr := readLogs(t, l.path, options(v1.PodLogOptions{Timestamps: true}))
	wantOut := baseTime.Format(timeFormatOut) + " hello world\n"
	wantErr := baseTime.Add(time.Millisecond).Format(timeFormatOut) + " between\n"
	if stdout != wantOut || stderr != wantErr {
		t.Errorf("stdout %q, want %q; stderr %q, want %q", stdout, wantOut, stderr, wantErr)
	}
}

func TestReadLogsSkipsMalformedLines(t *testing.T) {
	l := newFakeLog(t)
	l.out(t, "before")
	l.raw(t, "this is not a CRI record\n")
	l.raw(t, "2026-11-25T22:38:40Z stdin F wrong stream\n")
	l.out(t, "after")
	stdout, stderr := readLogs(t, l.path, options(v1.PodLogOptions{}))
	if stdout != "before\nafter\n" || stderr != "" {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
}

func TestReadLogsWritesIncompleteLastLine(t *testing.T) {
	l := newFakeLog(t)
	l.out(t, "done")
	l.raw(t, baseTime.Format(time.RFC3339Nano)+" stdout F unfinish")
	if stdout, _ := readLogs(t, l.path, options(v1.PodLogOptions{})); stdout != "done\nunfinish" {
		t.Errorf("stdout %q", stdout)
	}
}

func TestReadLogsTail(t *testing.T) {
	l := newFakeLog(t)
	numbered(t, l, 5)
	for _, tc := range []struct {
		tail int64
		want string
	}{{0, ""}, {1, lines(5, 5)}, {3, lines(3, 5)}, {5, lines(1, 5)}, {50, lines(1, 5)}} {
		if stdout, _ := readLogs(t, l.path, options(v1.PodLogOptions{TailLines: ptr.To(tc.tail)})); stdout != tc.want {
			t.Errorf("tail %d: got %q, want %q", tc.tail, stdout, tc.want)
		}
	}
}

func TestReadLogsTailEmptyFile(t *testing.T) {
	l := newFakeLog(t)
	if stdout, stderr := readLogs(t, l.path, options(v1.PodLogOptions{TailLines: ptr.To[int64](3)})); stdout+stderr != "" {
		t.Errorf("got %q %q", stdout, stderr)
	}
}

func TestReadLogsTailCountsSplitLinesOnce(t *testing.T) {
	l := newFakeLog(t)
	l.out(t, "one")
	l.record(t, "stdout", "P", "tw")
	l.record(t, "stdout", "P", "o-")
	l.record(t, "stdout", "F", "two")
	l.err(t, "three")
	l.record(t, "stdout", "P", "four-in-progress")
	stdout, stderr := readLogs(t, l.path, options(v1.PodLogOptions{TailLines: ptr.To[int64](2)}))
	// The unfinished line at the end is not counted but still shown.
	if stdout != "two-two\nfour-in-progress" || stderr != "three\n" {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
}

func TestReadLogsTailOfOneStream(t *testing.T) {
	l := newFakeLog(t)
	for i := 1; i <= 4; i++ {
		l.out(t, fmt.Sprintf("out%d", i))
		l.err(t, fmt.Sprintf("err%d", i))
	}
	opts := options(v1.PodLogOptions{TailLines: ptr.To[int64](2), Stream: ptr.To(v1.LogStreamStdout)})
	if stdout, stderr := readLogs(t, l.path, opts); stdout != lines(3, 4) || stderr != "" {
		t.Errorf("stdout %q, stderr %q", stdout, stderr)
	}
}

// TestReadLogsTailOfBigFile crosses many read blocks, with lines longer than
// a block split into fragments as containerd splits them.
func TestReadLogsTailOfBigFile(t *testing.T) {
	l := newFakeLog(t)
	long := strings.Repeat("x", 3*tailBlockSize)
	var all []string // the log lines, as ReadLogs should write them
	for i := 1; i <= 200; i++ {
		if i%50 == 0 {
			l.record(t, "stdout", "P", long)
			l.record(t, "stdout", "P", long)
			l.record(t, "stdout", "F", fmt.Sprintf("long%d", i))
			all = append(all, fmt.Sprintf("%s%slong%d\n", long, long, i))
			continue
		}
		l.out(t, fmt.Sprintf("out%d", i))
		all = append(all, fmt.Sprintf("out%d\n", i))
	}
	info, _ := os.Stat(l.path)
	if info.Size() < 10*tailBlockSize {
		t.Fatalf("log has only %d bytes", info.Size())
	}
	for _, tail := range []int{1, 2, 13, 52, 150, 151, 199} {
		want := strings.Join(all[len(all)-tail:], "")
		stdout, _ := readLogs(t, l.path, options(v1.PodLogOptions{TailLines: ptr.To(int64(tail))}))
		if stdout != want {
			t.Errorf("tail %d: got %d bytes starting %.20q, want %d bytes starting %.20q", tail, len(stdout), stdout, len(want), want)
		}
	}
}

func TestReadLogsSince(t *testing.T) {
	l := newFakeLog(t)
	numbered(t, l, 5) // stamped baseTime + 0..4 ms
	since := metav1.NewTime(baseTime.Add(3 * time.Millisecond))
	if stdout, _ := readLogs(t, l.path, options(v1.PodLogOptions{SinceTime: &since})); stdout != lines(4, 5) {
		t.Errorf("got %q", stdout)
	}
}

func TestReadLogsSinceKeepsSplitLineWhole(t *testing.T) {
	l := newFakeLog(t)
	l.out(t, "old")
	l.record(t, "stdout", "P", "started-before-")
	l.record(t, "stdout", "F", "since")
	l.out(t, "new")
	since := metav1.NewTime(baseTime.Add(2 * time.Millisecond)) // the F fragment's stamp
	if stdout, _ := readLogs(t, l.path, options(v1.PodLogOptions{SinceTime: &since})); stdout != "new\n" {
		t.Errorf("got %q", stdout)
	}
}

func TestReadLogsTimestamps(t *testing.T) {
	l := newFakeLog(t)
	l.out(t, "a")
	l.raw(t, "2026-11-25T22:38:41.5Z stdout F b\n")
	want := "2026-11-25T22:38:40.153982685Z a\n2026-11-25T22:38:41.500000000Z b\n"
	if stdout, _ := readLogs(t, l.path, options(v1.PodLogOptions{Timestamps: true})); stdout != want {
		t.Errorf("got %q, want %q", stdout, want)
	}
}

func TestReadLogsLimitBytes(t *testing.T) {
	l := newFakeLog(t)
	l.out(t, "o1")  // 3 bytes
	l.err(t, "e1")  // 3 bytes
	l.out(t, "o22") // 4 bytes
	l.err(t, "e2")
	for _, tc := range []struct {
		limit          int64
		stdout, stderr string
	}{
		{1, "o", ""},
		{3, "o1\n", ""},
		{5, "o1\n", "e1"},
		{8, "o1\no2", "e1\n"},
		{100, "o1\no22\n", "e1\ne2\n"},
	} {
		stdout, stderr := readLogs(t, l.path, options(v1.PodLogOptions{LimitBytes: ptr.To(tc.limit)}))
		if stdout != tc.stdout || stderr != tc.stderr {
			t.Errorf("limit %d: stdout %q, stderr %q; want %q, %q", tc.limit, stdout, stderr, tc.stdout, tc.stderr)
		}
	}
}

func TestReadLogsLimitBytesCountsTimestamps(t *testing.T) {
	l := newFakeLog(t)
	l.out(t, "a")
	l.out(t, "b")
	stamp := baseTime.Format(timeFormatOut) + " "
	limit := int64(len(stamp) + 3)
	stdout, _ := readLogs(t, l.path, options(v1.PodLogOptions{Timestamps: true, LimitBytes: ptr.To(limit)}))
	if want := stamp + "a\n2"; stdout != want {
		t.Errorf("got %q, want %q", stdout, want)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("client went away") }

func TestReadLogsReturnsWriteErrors(t *testing.T) {
	l := newFakeLog(t)
	l.out(t, "a")
	err := ReadLogs(context.Background(), l.path, "", options(v1.PodLogOptions{}), nil, failingWriter{}, failingWriter{})
	if err == nil || !strings.Contains(err.Error(), "client went away") {
		t.Errorf("got %v", err)
	}
}

func TestReadLogsFollowsSymlinkAndReportsMissingFile(t *testing.T) {
	l := newFakeLog(t)
	l.out(t, "via link")
	link := filepath.Join(t.TempDir(), "link.log")
	if err := os.Symlink(l.path, link); err != nil {
		t.Fatal(err)
	}
	if stdout, _ := readLogs(t, link, options(v1.PodLogOptions{})); stdout != "via link\n" {
		t.Errorf("got %q", stdout)
	}
	var out bytes.Buffer
	if err := ReadLogs(context.Background(), filepath.Join(t.TempDir(), "none.log"), "", options(v1.PodLogOptions{}), nil, &out, &out); err == nil {
		t.Error("no error for a missing log file")
	}
}
