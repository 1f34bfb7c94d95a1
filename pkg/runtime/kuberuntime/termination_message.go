package kuberuntime

import (
	"context"
	"fmt"
	"io"
	"os"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/pkg/runtime/container"
	"github.com/nodelet/nodelet/pkg/runtime/criconfig"
	"github.com/nodelet/nodelet/pkg/runtime/logs"
)

// Limits on termination messages, as upstream's kubecontainer constants.
const (
	maxTerminationMessageLength     = 1024 * 4
	maxTerminationMessageLogLength  = 1024 * 2
	maxTerminationMessageLogLines   = 80
	reasonContainerCannotRun        = "ContainerCannotRun"
	terminationMessageReadErrPrefix = "Error on reading termination log"
)

// addTerminationMessage appends the container's termination message (its termination-log
// file, or with FallbackToLogsOnError the tail of its log) to the status message.
func (m *Manager) addTerminationMessage(ctx context.Context, out *container.Status, s *runtimeapi.ContainerStatus, ann *criconfig.AnnotatedContainerInfo) {
	// A container that could not even start has no logs to fall back to.
	fallbackToLogs := ann.TerminationMessagePolicy == v1.TerminationMessageFallbackToLogsOnError &&
		out.ExitCode != 0 && out.Reason != reasonContainerCannotRun
	msg, checkLogs := readTerminationMessageFile(s, ann.TerminationMessagePath, fallbackToLogs)
	if checkLogs {
		msg = m.lastLogLines(ctx, s.GetLogPath())
	}
	if msg == "" {
		return
	}
	if out.Message != "" {
		out.Message += ": "
	}
	out.Message += msg
}

// readTerminationMessageFile reads the host file mounted at the termination message path;
// the bool says whether the logs should be read instead.
func readTerminationMessageFile(s *runtimeapi.ContainerStatus, path string, fallbackToLogs bool) (string, bool) {
	if path == "" {
		return "", fallbackToLogs
	}
	for _, mount := range s.Mounts {
		if mount.ContainerPath != path {
			continue
		}
		data, err := readAtMost(mount.HostPath, maxTerminationMessageLength)
		if os.IsNotExist(err) {
			return "", fallbackToLogs
		}
		if err != nil {
			return fmt.Sprintf("%s %s: %v", terminationMessageReadErrPrefix, mount.HostPath, err), false
		}
		return string(data), fallbackToLogs && len(data) == 0
	}
	return "", fallbackToLogs
}

// readAtMost returns the last max bytes of the file.
func readAtMost(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if size := fi.Size(); size > max {
		if _, err := f.Seek(size-max, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// lastLogLines reads up to the last 80 lines of a CRI log, keeping at most 2 KiB.
func (m *Manager) lastLogLines(ctx context.Context, path string) string {
	tail := int64(maxTerminationMessageLogLines)
	buf := &tailBuffer{max: maxTerminationMessageLogLength}
	opts := logs.NewLogOptions(&v1.PodLogOptions{TailLines: &tail}, m.clock.Now())
	if err := logs.ReadLogs(ctx, path, "", opts, m.runtime, buf, buf); err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	return string(buf.data)
}

// tailBuffer is a writer that keeps only the last max bytes written.
type tailBuffer struct {
	max  int
	data []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.data = append(b.data, p...)
	if over := len(b.data) - b.max; over > 0 {
		b.data = append(b.data[:0], b.data[over:]...)
	}
	return len(p), nil
}
