package hostile

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Run measures a running nodelet (PID) whose static pod directory is Dir and whose valid
// pods are already running: first its baseline (RSS, and CPU over Baseline), then it
// writes the mix over WriteOver, waits Settle, and measures the same again while the bad
// files sit unchanged for Quiet, plus the log bytes written from the first bad file on.
type Run struct {
	PID      int
	LogBytes func() int64
	Mix      Options

	Baseline time.Duration
	Settle   time.Duration
	Quiet    time.Duration
}

// Result holds the figures of one Run.
type Result struct {
	Entries []Entry

	BaselineRSSMiB float64
	RSSMiB         float64
	// PeakRSSMiB is the highest RSS sampled every 200 ms while writing and settling.
	PeakRSSMiB float64

	BaselineCPUPerMin float64
	QuietCPUPerMin    float64

	LogBytes           int64
	LogBytesPerBadFile float64
}

// Measure runs the scenario.
func (r Run) Measure() (Result, error) {
	var res Result
	var err error
	if res.BaselineCPUPerMin, err = cpuPerMinute(r.PID, r.Baseline); err != nil {
		return res, err
	}
	if res.BaselineRSSMiB, err = RSSMiB(r.PID); err != nil {
		return res, err
	}
	logStart := r.LogBytes()
	stop := make(chan struct{})
	peak := make(chan float64)
	go func() { peak <- samplePeakRSS(r.PID, stop) }()
	res.Entries, err = Write(r.Mix)
	if err == nil {
		time.Sleep(r.Settle)
	}
	close(stop)
	res.PeakRSSMiB = <-peak
	if err != nil {
		return res, err
	}
	if res.QuietCPUPerMin, err = cpuPerMinute(r.PID, r.Quiet); err != nil {
		return res, err
	}
	if res.RSSMiB, err = RSSMiB(r.PID); err != nil {
		return res, err
	}
	res.LogBytes = r.LogBytes() - logStart
	res.LogBytesPerBadFile = float64(res.LogBytes) / float64(len(res.Entries))
	return res, nil
}

// String is the figures, one per line.
func (res Result) String() string {
	return fmt.Sprintf("RSS: baseline %.1f MiB, with %d bad entries %.1f MiB (%+.1f MiB), peak while writing %.1f MiB\n"+
		"CPU per quiet minute: baseline %.3f s, with the bad entries %.3f s (%+.3f s)\n"+
		"log: %d bytes, %.0f bytes per bad entry",
		res.BaselineRSSMiB, len(res.Entries), res.RSSMiB, res.RSSMiB-res.BaselineRSSMiB, res.PeakRSSMiB,
		res.BaselineCPUPerMin, res.QuietCPUPerMin, res.QuietCPUPerMin-res.BaselineCPUPerMin,
		res.LogBytes, res.LogBytesPerBadFile)
}

func cpuPerMinute(pid int, window time.Duration) (float64, error) {
	before, err := CPUSeconds(pid)
	if err != nil {
		return 0, err
	}
	time.Sleep(window)
	after, err := CPUSeconds(pid)
	if err != nil {
		return 0, err
	}
	return (after - before) * float64(time.Minute) / float64(window), nil
}

func samplePeakRSS(pid int, stop <-chan struct{}) float64 {
	peak := 0.0
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		if rss, err := RSSMiB(pid); err == nil {
			peak = max(peak, rss)
		}
		select {
		case <-stop:
			return peak
		case <-t.C:
		}
	}
}

// CPUSeconds is the user and system CPU time a process has used, from /proc.
func CPUSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	const clockTicks = 100 // USER_HZ on Linux
	return (utime + stime) / clockTicks, nil
}

// RSSMiB is a process's resident set size, from /proc.
func RSSMiB(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// IsWarningOrWorse reports whether a klog text line is at warning level or above: its
// header starts with W, E or F followed by the date (e.g. "E0521 10:00:00.000000").
func IsWarningOrWorse(line string) bool {
	if len(line) < 5 || !strings.ContainsRune("WEF", rune(line[0])) {
		return false
	}
	for _, c := range line[1:5] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
