package stats

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// userHZ is the unit of the CPU times in /proc/stat (USER_HZ, 100 on every
// Linux architecture the kubelet runs on).
const userHZ = 100

// fileBufs are read buffers for the many small virtual files (procfs,
// cgroupfs) a summary reads: their sizes read as 0, so os.ReadFile would
// grow a fresh buffer for each.
var fileBufs = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// readFile reads the file at path into a pooled buffer and passes it to
// parse, which must not keep it.
func readFile(path string, parse func(data []byte) error) error {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	bp := fileBufs.Get().(*[]byte)
	defer fileBufs.Put(bp)
	buf := (*bp)[:0]
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	*bp = buf
	return parse(buf)
}

// scanKeyValues calls fn for each "key value" line of a file (memory.stat,
// cpu.stat, /proc/vmstat) whose value is an unsigned integer.
func scanKeyValues(path string, fn func(key []byte, v uint64)) error {
	return readFile(path, func(data []byte) error {
		for line := range bytes.Lines(data) {
			key, value, ok := bytes.Cut(bytes.TrimSpace(line), []byte{' '})
			if !ok {
				continue
			}
			if v, ok := parseUint(bytes.TrimSpace(value)); ok {
				fn(key, v)
			}
		}
		return nil
	})
}

// parseUint parses a decimal unsigned integer without allocating.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// readUint reads a file holding one unsigned integer (cpuacct.usage,
// memory.current). "max" (cgroup v2's unlimited) reads as ok=false.
func readUint(path string) (v uint64, ok bool, err error) {
	err = readFile(path, func(data []byte) error {
		s := bytes.TrimSpace(data)
		if string(s) == "max" {
			return nil
		}
		if v, ok = parseUint(s); !ok {
			return fmt.Errorf("%s: not a number: %q", path, s)
		}
		return nil
	})
	return v, ok, err
}

// meminfo holds the /proc/meminfo fields the node figures need, in bytes.
type meminfo struct {
	total, free, inactiveFile, anon, swapTotal, swapFree, hugetlb uint64
}

func readMeminfo(procRoot string) (meminfo, error) {
	var m meminfo
	err := readFile(filepath.Join(procRoot, "meminfo"), func(data []byte) error {
		for line := range bytes.Lines(data) {
			name, rest, ok := bytes.Cut(line, []byte{':'})
			if !ok {
				continue
			}
			var dst *uint64
			switch string(name) {
			case "MemTotal":
				dst = &m.total
			case "MemFree":
				dst = &m.free
			case "Inactive(file)":
				dst = &m.inactiveFile
			case "AnonPages":
				dst = &m.anon
			case "SwapTotal":
				dst = &m.swapTotal
			case "SwapFree":
				dst = &m.swapFree
			case "Hugetlb":
				dst = &m.hugetlb
			default:
				continue
			}
			num, unit, _ := bytes.Cut(bytes.TrimSpace(rest), []byte{' '})
			if v, ok := parseUint(num); ok {
				if string(bytes.TrimSpace(unit)) == "kB" {
					v *= 1024
				}
				*dst = v
			}
		}
		return nil
	})
	if err != nil {
		return m, err
	}
	if m.total == 0 {
		return m, errors.New("no MemTotal in meminfo")
	}
	return m, nil
}

// procStat holds what the node needs from /proc/stat.
type procStat struct {
	// busyNanos is the CPU time spent not idle, all CPUs summed: user, nice,
	// system, irq, softirq and steal (guest time is already in user/nice).
	busyNanos uint64
	bootTime  time.Time
}

func readProcStat(procRoot string) (procStat, error) {
	var ps procStat
	f, err := os.Open(filepath.Join(procRoot, "stat"))
	if err != nil {
		return ps, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "cpu "):
			ps.busyNanos = busyTicks(strings.Fields(line)[1:]) * uint64(time.Second/userHZ)
		case strings.HasPrefix(line, "btime "):
			secs, err := strconv.ParseInt(strings.TrimSpace(line[len("btime "):]), 10, 64)
			if err == nil {
				ps.bootTime = time.Unix(secs, 0)
			}
		}
	}
	return ps, sc.Err()
}

// busyTicks sums the non-idle columns of the aggregate "cpu" line:
// user nice system idle iowait irq softirq steal guest guest_nice.
func busyTicks(cols []string) uint64 {
	var sum uint64
	for i, c := range cols {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait, guest, guest_nice
			continue
		}
		v, _ := strconv.ParseUint(c, 10, 64)
		sum += v
	}
	return sum
}

// ignoredInterface says whether a host interface is left out of the node's
// network figures, as cAdvisor leaves out loopback, pod veths and the
// docker/nerdctl bridges.
func ignoredInterface(name string) bool {
	for _, p := range []string{"lo", "veth", "docker", "nerdctl"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// defaultInterfaceName is the interface whose figures the summary API puts at
// the top level of NetworkStats, as upstream does.
const defaultInterfaceName = "eth0"

// readNetDev parses a /proc/net/dev file into the summary's interface
// figures, in file order, leaving out the ignored interfaces.
func readNetDev(path string) ([]statsapi.InterfaceStats, error) {
	var out []statsapi.InterfaceStats
	err := readFile(path, func(data []byte) error {
		out = parseNetDev(data)
		return nil
	})
	return out, err
}

func parseNetDev(data []byte) []statsapi.InterfaceStats {
	var out []statsapi.InterfaceStats
	for line := range bytes.Lines(data) {
		name, rest, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue // the two header lines
		}
		iface := string(bytes.TrimSpace(name))
		if ignoredInterface(iface) {
			continue
		}
		// Receive: bytes packets errs drop fifo frame compressed multicast;
		// transmit: bytes packets errs drop fifo colls carrier compressed.
		f := bytes.Fields(rest)
		if len(f) < 16 {
			continue
		}
		out = append(out, statsapi.InterfaceStats{
			Name:     iface,
			RxBytes:  parseUintPtr(f[0]),
			RxErrors: parseUintPtr(f[2]),
			TxBytes:  parseUintPtr(f[8]),
			TxErrors: parseUintPtr(f[10]),
		})
	}
	return out
}

func parseUintPtr(b []byte) *uint64 {
	v, ok := parseUint(b)
	if !ok {
		return nil
	}
	return &v
}

// readPSIOrZero is readPSI with zeros where the file is missing.
func readPSIOrZero(path string) *statsapi.PSIStats {
	if psi := readPSI(path); psi != nil {
		return psi
	}
	return &statsapi.PSIStats{}
}

// readPSI parses a pressure file (/proc/pressure/cpu, cpu.pressure):
//
//	some avg10=0.00 avg60=0.00 avg300=0.00 total=0
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//
// It returns nil when the file does not exist (no PSI on this kernel or
// cgroup version).
func readPSI(path string) *statsapi.PSIStats {
	var psi *statsapi.PSIStats
	_ = readFile(path, func(data []byte) error {
		psi = parsePSI(data)
		return nil
	})
	return psi
}

func parsePSI(data []byte) *statsapi.PSIStats {
	psi := &statsapi.PSIStats{}
	for line := range bytes.Lines(data) {
		f := strings.Fields(string(line))
		if len(f) == 0 {
			continue
		}
		var d *statsapi.PSIData
		switch f[0] {
		case "some":
			d = &psi.Some
		case "full":
			d = &psi.Full
		default:
			continue
		}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "avg10":
				d.Avg10, _ = strconv.ParseFloat(v, 64)
			case "avg60":
				d.Avg60, _ = strconv.ParseFloat(v, 64)
			case "avg300":
				d.Avg300, _ = strconv.ParseFloat(v, 64)
			case "total":
				d.Total, _ = strconv.ParseUint(v, 10, 64)
			}
		}
	}
	return psi
}

// readRlimit reports the node's task limit and task count as upstream does:
// the smaller of kernel.pid_max and kernel.threads-max, and the task count
// from /proc/loadavg (sysinfo(2) truncates it above 65535).
func readRlimit(procRoot string, now time.Time) (*statsapi.RlimitStats, error) {
	r := &statsapi.RlimitStats{Time: metaTime(now)}
	maxTasks := int64(-1)
	for _, name := range []string{"sys/kernel/pid_max", "sys/kernel/threads-max"} {
		v, ok, err := readUint(filepath.Join(procRoot, name))
		if err == nil && ok && (maxTasks < 0 || int64(v) < maxTasks) {
			maxTasks = int64(v)
		}
	}
	if maxTasks >= 0 {
		r.MaxPID = &maxTasks
	}
	data, err := os.ReadFile(filepath.Join(procRoot, "loadavg"))
	if err != nil {
		return nil, err
	}
	// "0.52 0.58 0.59 3/1234 56789": the fourth field is running/total.
	f := strings.Fields(string(data))
	if len(f) < 4 {
		return nil, fmt.Errorf("loadavg: unexpected content %q", data)
	}
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return nil, fmt.Errorf("loadavg: unexpected task field %q", f[3])
	}
	n, err := strconv.ParseInt(total, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("loadavg: %w", err)
	}
	r.NumOfRunningProcesses = &n
	return r, nil
}
