// Package logs reads container log files written by a CRI runtime and rotates them.
//
// A CRI runtime writes each container's stdout and stderr to one file, one
// record per line:
//
//	2026-11-25T22:38:40.153982685Z stdout F text
//
// (RFC3339Nano timestamp, stream, tag, content). The tag is F for the last
// fragment of a line and P for an earlier one: the runtime splits long lines
// (16 KiB in containerd) into P fragments followed by one F fragment.
package logs

import (
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// LogOptions says which part of a container log ReadLogs writes and how.
type LogOptions struct {
	tail      int64     // count of log lines from the end; -1 means all
	bytes     int64     // most bytes to write, both streams together; -1 means no limit
	since     time.Time // lines stamped before this are left out
	follow    bool      // keep writing new lines until the container stops
	timestamp bool      // prefix each line with its timestamp
	stream    string    // v1.LogStreamStdout or v1.LogStreamStderr; empty means both
}

// NewLogOptions converts the API's log options, with now as the reference
// time for SinceSeconds. When both SinceSeconds and SinceTime are set the
// later of the two wins.
func NewLogOptions(apiOpts *v1.PodLogOptions, now time.Time) *LogOptions {
	opts := &LogOptions{tail: -1, bytes: -1}
	if apiOpts == nil {
		return opts
	}
	opts.follow = apiOpts.Follow
	opts.timestamp = apiOpts.Timestamps
	if apiOpts.TailLines != nil {
		opts.tail = *apiOpts.TailLines
	}
	if apiOpts.LimitBytes != nil {
		opts.bytes = *apiOpts.LimitBytes
	}
	if apiOpts.SinceSeconds != nil {
		opts.since = now.Add(-time.Duration(*apiOpts.SinceSeconds) * time.Second)
	}
	if apiOpts.SinceTime != nil && apiOpts.SinceTime.After(opts.since) {
		opts.since = apiOpts.SinceTime.Time
	}
	if apiOpts.Stream != nil && *apiOpts.Stream != v1.LogStreamAll {
		opts.stream = *apiOpts.Stream
	}
	return opts
}

// wants reports whether lines of the given stream belong in the output.
func (o *LogOptions) wants(stream runtimeapi.LogStreamType) bool {
	switch o.stream {
	case v1.LogStreamStdout:
		return stream == runtimeapi.Stdout
	case v1.LogStreamStderr:
		return stream == runtimeapi.Stderr
	default:
		return true
	}
}
