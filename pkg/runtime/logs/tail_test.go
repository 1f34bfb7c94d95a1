package logs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// naiveTailStart is findTailStart done forwards over the whole file.
func naiveTailStart(data []byte, opts *LogOptions) int64 {
	var ends []int64 // offsets just past each counted log line
	var off int64
	for _, line := range bytes.SplitAfter(data, []byte{'\n'}) {
		off += int64(len(line))
		if endsLogLine(line, opts) {
			ends = append(ends, off)
		}
	}
	if opts.tail < 0 || int64(len(ends)) <= opts.tail {
		return 0
	}
	return ends[int64(len(ends))-opts.tail-1]
}

// TestFindTailStartMatchesForwardScan compares the backward scan with a
// forward one on random logs whose records straddle block boundaries.
func TestFindTailStartMatchesForwardScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, tailBlockSize - 40, tailBlockSize - 39, tailBlockSize, 2*tailBlockSize + 7}
	for round := range 50 {
		var log bytes.Buffer
		for range rng.IntN(60) {
			stream := []string{"stdout", "stderr"}[rng.IntN(2)]
			tag := []string{"F", "P"}[rng.IntN(2)]
			text := strings.Repeat("y", sizes[rng.IntN(len(sizes))])
			if rng.IntN(20) == 0 {
				log.WriteString("garbage line\n")
				continue
			}
			fmt.Fprintf(&log, "%s %s %s %s\n", baseTime.Format(time.RFC3339Nano), stream, tag, text)
		}
		if rng.IntN(3) == 0 {
			log.WriteString(baseTime.Format(time.RFC3339Nano) + " stdout F unterminated")
		}
		data := log.Bytes()
		for _, tail := range []int64{-1, 0, 1, 2, 5, 30, 100} {
			for _, stream := range []string{v1.LogStreamAll, v1.LogStreamStdout, v1.LogStreamStderr} {
				opts := options(v1.PodLogOptions{TailLines: ptr.To(tail), Stream: ptr.To(stream)})
				got, err := findTailStart(bytes.NewReader(data), int64(len(data)), opts)
				if err != nil {
					t.Fatal(err)
				}
				if want := naiveTailStart(data, opts); got != want {
					t.Fatalf("round %d, tail %d, stream %s: start %d, want %d", round, tail, stream, got, want)
				}
			}
		}
	}
}
