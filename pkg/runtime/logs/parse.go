package logs

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	// timeFormatIn parses the runtime's timestamps, which drop trailing zeros
	// of the fraction.
	timeFormatIn = time.RFC3339Nano
	// timeFormatOut keeps all nine fraction digits so that timestamps written
	// in front of lines line up.
	timeFormatOut = "2006-01-02T15:04:05.000000000Z07:00"
)

// logMessage is one parsed line of a CRI log file: a whole log line or a
// fragment of one.
type logMessage struct {
	timestamp time.Time
	stream    runtimeapi.LogStreamType
	partial   bool   // more fragments of the same line follow
	log       []byte // content; a full line keeps its '\n', a fragment has none
}

// parseCRILog parses one line of a CRI log file into msg.
func parseCRILog(line []byte, msg *logMessage) error {
	stamp, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return errors.New("timestamp is not found")
	}
	ts, err := time.Parse(timeFormatIn, string(stamp))
	if err != nil {
		return fmt.Errorf("unexpected timestamp format %q: %w", timeFormatIn, err)
	}
	stream, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return errors.New("stream type is not found")
	}
	streamType := runtimeapi.LogStreamType(stream)
	if streamType != runtimeapi.Stdout && streamType != runtimeapi.Stderr {
		return fmt.Errorf("unexpected stream type %q", stream)
	}
	tags, content, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return errors.New("log tag is not found")
	}
	// Tags are a ':'-separated list; only the first one, F or P, is defined.
	first, _, _ := bytes.Cut(tags, []byte(runtimeapi.LogTagDelimiter))
	partial := runtimeapi.LogTag(first) == runtimeapi.LogTagPartial
	if partial {
		// The newline ends the record in the file, not the log line.
		content = bytes.TrimSuffix(content, []byte{'\n'})
	}
	*msg = logMessage{timestamp: ts, stream: streamType, partial: partial, log: content}
	return nil
}
