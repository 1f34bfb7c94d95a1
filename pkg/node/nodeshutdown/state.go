package nodeshutdown

import (
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/pkg/atomicfile"
)

// StateFile is the file, in the kubelet's root directory, that keeps when
// the last graceful shutdown started and ended, so that the metrics below
// survive the reboot that follows it.
const StateFile = "graceful_node_shutdown_state"

// The graceful shutdown metrics, upstream's (pkg/kubelet/metrics). Upstream
// registers them whenever the GracefulNodeShutdownBasedOnPodPriority gate is
// on (the default), whether or not shutdown grace periods are configured.
var (
	GracefulShutdownStartTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: "kubelet",
		Name:      "graceful_shutdown_start_time_seconds",
		Help:      "[ALPHA] Last graceful shutdown start time since unix epoch in seconds",
	})
	GracefulShutdownEndTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: "kubelet",
		Name:      "graceful_shutdown_end_time_seconds",
		Help:      "[ALPHA] Last graceful shutdown end time since unix epoch in seconds",
	})
)

// Collectors returns the metrics above, to register on /metrics.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{GracefulShutdownStartTime, GracefulShutdownEndTime}
}

// state is the state file's content, in upstream's JSON:
// {"startTime":"<RFC 3339>","endTime":"<RFC 3339>"}, a zero time while a
// shutdown is under way.
type state struct {
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime"`
}

// loadState reads the state file; a missing file is the zero state.
func loadState(path string) (state, error) {
	var s state
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}

// storeState replaces the state file in one rename, so that a shutdown
// cutting the write short leaves the previous state, not half of one.
func storeState(path string, s state) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, b, 0o644)
}

// unixSeconds is a time as the metrics hold it: 0 for the zero time.
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.Unix())
}
