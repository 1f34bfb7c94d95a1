package logs

import (
	"bytes"
	"fmt"
	"io"
)

// tailBlockSize is how much of the file the backward scan reads at a time.
const tailBlockSize = 4096

// findTailStart returns the offset in the first size bytes of r where the
// last opts.tail log lines begin, or 0 when there are no more lines than
// that. It reads backwards from the end, so its cost follows the size of the
// tail, not of the file.
//
// Lines are log lines, not file lines: a line split into P fragments counts
// once, and its first fragment is where it begins. Lines of a stream the
// options leave out do not count. An unfinished line at the very end (P
// fragments not yet followed by their F, or a record the runtime is still
// writing) is not counted but lies inside the window, so it is output too.
func findTailStart(r io.ReaderAt, size int64, opts *LogOptions) (int64, error) {
	if opts.tail < 0 {
		return 0, nil
	}
	lines := &backwardLines{r: r, off: size}
	var counted int64
	for {
		line, start, err := lines.prev()
		if err == io.EOF {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		if !endsLogLine(line, opts) {
			continue
		}
		// The end of the log line before the wanted ones is where they start.
		if counted == opts.tail {
			return start + int64(len(line)), nil
		}
		counted++
	}
}

// endsLogLine reports whether a file line is the complete last fragment of a
// log line of a stream the options want.
func endsLogLine(line []byte, opts *LogOptions) bool {
	if len(line) == 0 || line[len(line)-1] != '\n' {
		return false
	}
	var msg logMessage
	if parseCRILog(line, &msg) != nil {
		return false
	}
	return !msg.partial && opts.wants(msg.stream)
}

// backwardLines returns the lines of a file from the last to the first,
// reading tailBlockSize bytes at a time.
type backwardLines struct {
	r   io.ReaderAt
	off int64  // file offset of buf[0]
	buf []byte // the file's bytes from off up to the last line returned
}

// prev returns the line before the ones already returned, with its '\n'
// (the file's last line may have none), and its offset in the file. It
// returns io.EOF when the first line has been returned.
func (b *backwardLines) prev() (line []byte, start int64, err error) {
	for {
		if len(b.buf) > 0 {
			// buf ends with the '\n' of the line sought (or the file's
			// unterminated end); the '\n' before that ends the line before it.
			if i := bytes.LastIndexByte(b.buf[:len(b.buf)-1], '\n'); i >= 0 {
				line, start = b.buf[i+1:], b.off+int64(i+1)
				b.buf = b.buf[:i+1]
				return line, start, nil
			}
			if b.off == 0 {
				line, b.buf = b.buf, nil
				return line, 0, nil
			}
		} else if b.off == 0 {
			return nil, 0, io.EOF
		}
		if err := b.readBlock(); err != nil {
			return nil, 0, err
		}
	}
}

// readBlock prepends the block before off to buf.
func (b *backwardLines) readBlock() error {
	n := min(int64(tailBlockSize), b.off)
	grown := make([]byte, n+int64(len(b.buf)))
	if read, err := b.r.ReadAt(grown[:n], b.off-n); int64(read) < n {
		return fmt.Errorf("read %d bytes at offset %d: %w", n, b.off-n, err)
	}
	copy(grown[n:], b.buf)
	b.off -= n
	b.buf = grown
	return nil
}
