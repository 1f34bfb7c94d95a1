package stats

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// userHZ is the unit of the CPU times in /proc/stat (USER_HZ, 100 on every
// Linux architecture the kubelet runs on).
const userHZ = 100

// readKeyValues parses a file of "key value" lines (memory.stat, cpu.stat,
// /proc/vmstat) into a map. Values that are not unsigned integers are skipped.
func readKeyValues(path string) (map[string]uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, 64)
	for line := range bytes.Lines(data) {
		key, value, ok := bytes.Cut(bytes.TrimSpace(line), []byte{' '})
		if !ok {
			continue
		}
		if v, err := strconv.ParseUint(string(bytes.TrimSpace(value)), 10, 64); err == nil {
			out[string(key)] = v
		}
	}
	return out, nil
}

// readUint reads a file holding one unsigned integer (cpuacct.usage,
// memory.current). "max" (cgroup v2's unlimited) reads as ok=false.
func readUint(path string) (v uint64, ok bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false, err
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, false, nil
	}
	v, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", path, err)
	}
	return v, true, nil
}

// meminfo holds the /proc/meminfo fields the node figures need, in bytes.
type meminfo struct {
	total, free, inactiveFile, anon, swapTotal, swapFree, hugetlb uint64
}

func readMeminfo(procRoot string) (meminfo, error) {
	var m meminfo
	data, err := os.ReadFile(filepath.Join(procRoot, "meminfo"))
	if err != nil {
		return m, err
	}
	fields := map[string]*uint64{
		"MemTotal:": &m.total, "MemFree:": &m.free, "Inactive(file):": &m.inactiveFile,
		"AnonPages:": &m.anon, "SwapTotal:": &m.swapTotal, "SwapFree:": &m.swapFree,
		"Hugetlb:": &m.hugetlb,
	}
	for line := range bytes.Lines(data) {
		f := bytes.Fields(line)
		if len(f) < 2 {
			continue
		}
		dst, ok := fields[string(f[0])]
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(string(f[1]), 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 2 && string(f[2]) == "kB" {
			v *= 1024
		}
		*dst = v
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
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
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
	return out, nil
}

func parseUintPtr(b []byte) *uint64 {
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return nil
	}
	return &v
}

// readPSI parses a pressure file (/proc/pressure/cpu, cpu.pressure):
//
//	some avg10=0.00 avg60=0.00 avg300=0.00 total=0
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//
// It returns nil when the file does not exist (no PSI on this kernel or
// cgroup version).
func readPSI(path string) *statsapi.PSIStats {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
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
