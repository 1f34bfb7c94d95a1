package logs

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

func TestParseCRILog(t *testing.T) {
	stamp := time.Date(2026, 11, 25, 22, 38, 40, 153982685, time.UTC)
	tests := []struct {
		name string
		line string
		want logMessage
	}{
		{"full line keeps its newline", "2026-11-25T22:38:40.153982685Z stdout F text\n",
			logMessage{timestamp: stamp, stream: runtimeapi.Stdout, log: []byte("text\n")}},
		{"partial line loses its newline", "2026-11-25T22:38:40.153982685Z stderr P part\n",
			logMessage{timestamp: stamp, stream: runtimeapi.Stderr, partial: true, log: []byte("part")}},
		{"content keeps its spaces", "2026-11-25T22:38:40.153982685Z stdout F  a  b \n",
			logMessage{timestamp: stamp, stream: runtimeapi.Stdout, log: []byte(" a  b \n")}},
		{"empty line", "2026-11-25T22:38:40.153982685Z stdout F \n",
			logMessage{timestamp: stamp, stream: runtimeapi.Stdout, log: []byte("\n")}},
		{"more tags after the first", "2026-11-25T22:38:40.153982685Z stdout P:x:y part\n",
			logMessage{timestamp: stamp, stream: runtimeapi.Stdout, partial: true, log: []byte("part")}},
		{"short fraction and offset", "2026-11-25T23:38:40.1+01:00 stdout F t\n",
			logMessage{timestamp: time.Date(2026, 11, 25, 22, 38, 40, 100000000, time.UTC), stream: runtimeapi.Stdout, log: []byte("t\n")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got logMessage
			if err := parseCRILog([]byte(tc.line), &got); err != nil {
				t.Fatalf("parse: %v", err)
			}
			if !got.timestamp.Equal(tc.want.timestamp) || got.stream != tc.want.stream ||
				got.partial != tc.want.partial || string(got.log) != string(tc.want.log) {
				t.Errorf("got %+v (log %q), want %+v (log %q)", got, got.log, tc.want, tc.want.log)
			}
		})
	}
}

func TestParseCRILogRejectsMalformedLines(t *testing.T) {
	for _, line := range []string{
		"",
		"garbage\n",
		"not-a-time stdout F text\n",
		"2026-11-25T22:38:40.153982685Z\n",
		"2026-11-25T22:38:40.153982685Z stdin F text\n",
		"2026-11-25T22:38:40.153982685Z stdout\n",
		"2026-11-25T22:38:40.153982685Z stdout F\n",
		`{"log":"docker json","stream":"stdout","time":"2026-11-25T22:38:40Z"}` + "\n",
	} {
		var msg logMessage
		if err := parseCRILog([]byte(line), &msg); err == nil {
			t.Errorf("parse of %q succeeded: %+v", line, msg)
		}
	}
}

func TestNewLogOptions(t *testing.T) {
	now := baseTime
	older := metav1.NewTime(now.Add(-time.Hour))
	newer := metav1.NewTime(now.Add(-time.Second))
	tests := []struct {
		name string
		api  *v1.PodLogOptions
		want LogOptions
	}{
		{"nil", nil, LogOptions{tail: -1, bytes: -1}},
		{"defaults", &v1.PodLogOptions{}, LogOptions{tail: -1, bytes: -1}},
		{"all set", &v1.PodLogOptions{Follow: true, Timestamps: true, TailLines: ptr.To[int64](3), LimitBytes: ptr.To[int64](10), SinceSeconds: ptr.To[int64](60)},
			LogOptions{tail: 3, bytes: 10, since: now.Add(-time.Minute), follow: true, timestamp: true}},
		{"later sinceTime wins", &v1.PodLogOptions{SinceSeconds: ptr.To[int64](60), SinceTime: &newer},
			LogOptions{tail: -1, bytes: -1, since: newer.Time}},
		{"later sinceSeconds wins", &v1.PodLogOptions{SinceSeconds: ptr.To[int64](60), SinceTime: &older},
			LogOptions{tail: -1, bytes: -1, since: now.Add(-time.Minute)}},
		{"stream", &v1.PodLogOptions{Stream: ptr.To(v1.LogStreamStderr)}, LogOptions{tail: -1, bytes: -1, stream: v1.LogStreamStderr}},
		{"stream all", &v1.PodLogOptions{Stream: ptr.To(v1.LogStreamAll)}, LogOptions{tail: -1, bytes: -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NewLogOptions(tc.api, now); *got != tc.want {
				t.Errorf("got %+v, want %+v", *got, tc.want)
			}
		})
	}
}
