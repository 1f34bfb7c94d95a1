//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/pkg/runtime/cri"
	"github.com/nodelet/nodelet/pkg/runtime/logs"
)

const logsTestImage = "docker.io/library/busybox:1.36"

// logsPod is a pod sandbox of this test with one container, whose log is
// written under a temporary directory.
type logsPod struct {
	rs          internalapi.RuntimeService
	containerID string
	logPath     string
}

// runLogsContainer starts a busybox container running script in a pod of its
// own, and removes the pod when the test ends.
func runLogsContainer(t *testing.T, script string) *logsPod {
	t.Helper()
	ctx := context.Background()
	rs, err := cri.NewRemoteRuntimeService(ctx, endpoint(t), 10*time.Second, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	logDir := t.TempDir()
	sandbox := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "logs", Namespace: "nodelet-e2e-logs-" + suffix, Uid: "logs-" + suffix},
		LogDirectory: logDir,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	podID, err := rs.RunPodSandbox(ctx, sandbox, "")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := rs.StopPodSandbox(ctx, podID); err != nil {
			t.Errorf("StopPodSandbox: %v", err)
		}
		if err := rs.RemovePodSandbox(ctx, podID); err != nil {
			t.Errorf("RemovePodSandbox: %v", err)
		}
	})
	container := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "printer"},
		Image:    &runtimeapi.ImageSpec{Image: logsTestImage},
		Command:  []string{"sh", "-c", script},
		LogPath:  "printer/0.log",
	}
	id, err := rs.CreateContainer(ctx, podID, container, sandbox)
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	if err := rs.StartContainer(ctx, id); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	return &logsPod{rs: rs, containerID: id, logPath: filepath.Join(logDir, "printer", "0.log")}
}

// read runs ReadLogs and returns what it wrote to stdout and stderr.
func (p *logsPod) read(t *testing.T, apiOpts v1.PodLogOptions) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	if err := logs.ReadLogs(ctx, p.logPath, p.containerID, logs.NewLogOptions(&apiOpts, time.Now()), p.rs, &stdout, &stderr); err != nil {
		t.Fatalf("ReadLogs(%+v): %v", apiOpts, err)
	}
	return stdout.String(), stderr.String()
}

// waitExited waits until the container has exited.
func (p *logsPod) waitExited(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := p.rs.ContainerStatus(context.Background(), p.containerID, false)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("container still running after a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func numberedLines(prefix string, from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%s%d\n", prefix, i)
	}
	return b.String()
}

func TestLogsReadLogsFromContainerd(t *testing.T) {
	p := runLogsContainer(t, `for i in $(seq 1 20); do echo out$i; echo err$i >&2; done; sleep 2; echo late`)
	wantOut, wantErr := numberedLines("out", 1, 20)+"late\n", numberedLines("err", 1, 20)

	// Follow from the start: the late line arrives, and ReadLogs returns
	// by itself once the container exits.
	start := time.Now()
	stdout, stderr := p.read(t, v1.PodLogOptions{Follow: true})
	if stdout != wantOut || stderr != wantErr {
		t.Fatalf("follow: stdout %q, stderr %q", stdout, stderr)
	}
	if took := time.Since(start); took < 2*time.Second || took > 15*time.Second {
		t.Errorf("follow returned after %v; the container ran about 2s", took)
	}
	p.waitExited(t)

	if stdout, stderr := p.read(t, v1.PodLogOptions{}); stdout != wantOut || stderr != wantErr {
		t.Errorf("all: stdout %q, stderr %q", stdout, stderr)
	}
	if stdout, stderr := p.read(t, v1.PodLogOptions{TailLines: ptr.To[int64](1)}); stdout != "late\n" || stderr != "" {
		t.Errorf("tail 1: stdout %q, stderr %q", stdout, stderr)
	}
	stdout, stderr = p.read(t, v1.PodLogOptions{TailLines: ptr.To[int64](5)})
	// How stdout and stderr records interleave is up to the runtime.
	if n := strings.Count(stdout+stderr, "\n"); n != 5 || !strings.HasSuffix(stdout, "late\n") ||
		!strings.HasSuffix(wantOut, stdout) || !strings.HasSuffix(wantErr, stderr) {
		t.Errorf("tail 5: stdout %q, stderr %q", stdout, stderr)
	}
	if stdout, stderr := p.read(t, v1.PodLogOptions{Stream: ptr.To(v1.LogStreamStderr)}); stdout != "" || stderr != wantErr {
		t.Errorf("stderr only: stdout %q, stderr %q", stdout, stderr)
	}

	stdout, stderr = p.read(t, v1.PodLogOptions{LimitBytes: ptr.To[int64](11)})
	if len(stdout)+len(stderr) != 11 || !strings.HasPrefix(wantOut, stdout) || !strings.HasPrefix(wantErr, stderr) {
		t.Errorf("limit 11: stdout %q, stderr %q", stdout, stderr)
	}

	// Timestamps: every line starts with one; the late line's is about 2s
	// after the others, which lets since pick it out.
	stdout, _ = p.read(t, v1.PodLogOptions{Timestamps: true})
	stamps := map[string]time.Time{}
	for _, line := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		stamp, text, _ := strings.Cut(line, " ")
		ts, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil || ts.Format("2006-01-02T15:04:05.000000000Z07:00") != stamp {
			t.Fatalf("line %q does not start with a fixed-width RFC3339 timestamp (%v)", line, err)
		}
		if ts.Before(start.Add(-time.Minute)) || ts.After(time.Now()) {
			t.Errorf("line %q stamped %v, outside the test", line, ts)
		}
		stamps[text] = ts
	}
	if gap := stamps["late"].Sub(stamps["out20"]); gap < 1500*time.Millisecond {
		t.Errorf("late line only %v after out20", gap)
	}
	since := metav1.NewTime(stamps["late"].Add(-time.Second))
	if stdout, stderr := p.read(t, v1.PodLogOptions{SinceTime: &since}); stdout != "late\n" || stderr != "" {
		t.Errorf("since: stdout %q, stderr %q", stdout, stderr)
	}
}

// TestLogsFollowSurvivesContainerdRotation rotates a running container's
// log the way the log manager does (rename, then ReopenContainerLog) while
// ReadLogs follows it.
func TestLogsFollowSurvivesContainerdRotation(t *testing.T) {
	p := runLogsContainer(t, `for i in $(seq 1 300); do echo line$i; usleep 10000; done`)
	done := make(chan error, 1)
	var stdout, stderr syncBuffer
	go func() {
		opts := logs.NewLogOptions(&v1.PodLogOptions{Follow: true}, time.Now())
		done <- logs.ReadLogs(context.Background(), p.logPath, p.containerID, opts, p.rs, &stdout, &stderr)
	}()
	rotations := 0
	for i := 0; i < 3; i++ {
		time.Sleep(700 * time.Millisecond)
		rotated := fmt.Sprintf("%s.%d", p.logPath, i)
		if err := os.Rename(p.logPath, rotated); err != nil {
			t.Fatal(err)
		}
		if err := p.rs.ReopenContainerLog(context.Background(), p.containerID); err != nil {
			t.Fatalf("ReopenContainerLog: %v", err)
		}
		rotations++
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ReadLogs: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("ReadLogs still following a minute later")
	}
	if got, want := stdout.String(), numberedLines("line", 1, 300); got != want {
		files := []string{}
		for i := range rotations {
			files = append(files, fmt.Sprintf("%s.%d", p.logPath, i))
		}
		t.Errorf("after %d rotations got %d lines, want 300; missing %v, out of order or extra %v; the files hold %s",
			rotations, strings.Count(got, "\n"), missingLines(got, "line", 300), unexpectedLines(got, "line", 300),
			lineRanges(append(files, p.logPath)))
	}
	for i := range rotations {
		// Each rotated file got lines, so each switch happened mid-stream.
		if info, err := os.Stat(fmt.Sprintf("%s.%d", p.logPath, i)); err != nil || info.Size() == 0 {
			t.Errorf("rotated log %d: %v, %v", i, info, err)
		}
	}
}

// missingLines lists the numbers of prefix1…prefixN that are not in got.
func missingLines(got, prefix string, n int) []int {
	have := map[string]bool{}
	for _, l := range strings.Split(got, "\n") {
		have[l] = true
	}
	var missing []int
	for i := 1; i <= n; i++ {
		if !have[fmt.Sprintf("%s%d", prefix, i)] {
			missing = append(missing, i)
		}
	}
	return missing
}

// unexpectedLines lists the lines of got that are not the next one of
// prefix1…prefixN.
func unexpectedLines(got, prefix string, n int) []string {
	var odd []string
	next := 1
	for _, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		var i int
		if _, err := fmt.Sscanf(l, prefix+"%d", &i); err != nil || i > n || i < next {
			odd = append(odd, l)
			continue
		}
		next = i + 1
	}
	return odd
}

// lineRanges says which numbered lines each log file holds, first and last.
func lineRanges(paths []string) string {
	var b strings.Builder
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v; ", filepath.Base(path), err)
			continue
		}
		first, last, count := "", "", 0
		for _, rec := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
			fields := strings.SplitN(rec, " ", 4)
			if len(fields) < 4 {
				continue
			}
			if first == "" {
				first = fields[3]
			}
			last, count = fields[3], count+1
		}
		fmt.Fprintf(&b, "%s: %d lines, %s…%s; ", filepath.Base(path), count, first, last)
	}
	return b.String()
}
