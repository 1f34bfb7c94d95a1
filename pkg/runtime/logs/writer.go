package logs

import (
	"errors"
	"io"
	"math"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// errMaximumWrite ends reading once the byte limit is reached; ReadLogs
// turns it into success.
var errMaximumWrite = errors.New("maximum write")

// lineState tracks the log line in progress on one stream, so that the
// fragments of a split line are filtered and stamped as one line.
type lineState struct {
	midLine bool // the last fragment was partial: the next one continues its line
	skip    bool // the line in progress is left out of the output
}

// logWriter writes parsed log lines to stdout and stderr according to the
// log options.
type logWriter struct {
	stdout, stderr   io.Writer
	opts             *LogOptions
	remain           int64 // bytes left under the limit
	outLine, errLine lineState
}

func newLogWriter(stdout, stderr io.Writer, opts *LogOptions) *logWriter {
	w := &logWriter{stdout: stdout, stderr: stderr, opts: opts, remain: math.MaxInt64}
	if opts.bytes >= 0 {
		w.remain = opts.bytes
	}
	return w
}

// writeLine parses one line of the log file and writes it. A line that does
// not parse is logged and skipped: one bad line must not hide the rest.
func (w *logWriter) writeLine(line []byte, path string) error {
	var msg logMessage
	if err := parseCRILog(line, &msg); err != nil {
		klog.ErrorS(err, "Failed when parsing line in log file", "path", path, "line", string(line))
		return nil
	}
	return w.write(&msg)
}

// write writes one log line or fragment to the writer of its stream. It
// returns errMaximumWrite once the byte limit is used up.
func (w *logWriter) write(msg *logMessage) error {
	if w.remain <= 0 {
		return errMaximumWrite
	}
	out, state := w.target(msg.stream)
	startsLine := !state.midLine
	if startsLine {
		state.skip = out == nil || msg.timestamp.Before(w.opts.since)
	}
	state.midLine = msg.partial
	if state.skip {
		return nil
	}
	data := msg.log
	if startsLine && w.opts.timestamp {
		data = append([]byte(msg.timestamp.Format(timeFormatOut)+" "), data...)
	}
	if int64(len(data)) > w.remain {
		data = data[:w.remain]
	}
	n, err := out.Write(data)
	w.remain -= int64(n)
	if err != nil {
		return err
	}
	if n < len(data) {
		return io.ErrShortWrite
	}
	if w.remain <= 0 {
		return errMaximumWrite
	}
	return nil
}

// target returns the writer for a stream, nil when the options leave the
// stream out, and the stream's line state.
func (w *logWriter) target(stream runtimeapi.LogStreamType) (io.Writer, *lineState) {
	var out io.Writer
	state := &w.outLine
	if stream == runtimeapi.Stderr {
		out, state = w.stderr, &w.errLine
	} else {
		out = w.stdout
	}
	if !w.opts.wants(stream) {
		out = nil
	}
	return out, state
}
