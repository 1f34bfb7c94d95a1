// Package host holds what the benchmarks need from the machine: a cgroup root of their own
// in every hierarchy, the CPU time processes have used, the lock on the shared control
// plane, and pauses that Ctrl-C cuts short.
package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CgroupFS is where the cgroup hierarchies are mounted (v1 controllers, or the unified one).
const CgroupFS = "/sys/fs/cgroup"

// hierarchies are the mounted hierarchies: CgroupFS itself on cgroup v2, its controller
// directories on v1 (symlinks such as cpu -> cpu,cpuacct are skipped).
func hierarchies() ([]string, error) {
	if _, err := os.Stat(filepath.Join(CgroupFS, "cgroup.controllers")); err == nil {
		return []string{CgroupFS}, nil
	}
	entries, err := os.ReadDir(CgroupFS)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(CgroupFS, e.Name()))
		}
	}
	return out, nil
}

// MakeCgroupRoot creates the cgroup /name in every hierarchy, as an operator does before
// starting a kubelet with a cgroupRoot of its own (a missing one is refused). A v1 cpuset
// needs its CPUs and memory nodes set before anything can join it.
func MakeCgroupRoot(name string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := filepath.Join(h, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if filepath.Base(h) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(h, f))
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, f), v, 0o644)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// RemoveCgroupRoot removes /name and every cgroup under it in every hierarchy, deepest
// first. Run it once nothing runs there any more; a cgroup whose last task has just
// exited may take a moment to be removable, hence the retries.
func RemoveCgroupRoot(name string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		errs = append(errs, removeTree(filepath.Join(h, name)))
	}
	return errors.Join(errs...)
}

func removeTree(root string) error {
	var dirs []string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		err = nil
		for i := len(dirs) - 1; i >= 0; i-- {
			if e := os.Remove(dirs[i]); e != nil && !errors.Is(e, os.ErrNotExist) {
				err = e
			}
		}
		if err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// UnmountUnder unmounts dir and whatever is mounted under it, deepest first, with the
// given unmount(2) flags (upstream's kubelet bind-mounts its root dir onto itself).
func UnmountUnder(dir string, flags int) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var mounts []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			mounts = append(mounts, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m, flags); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times on Linux.
const clockTicks = 100

// CPUSeconds is the user+system CPU time process pid has used, from /proc/<pid>/stat.
func CPUSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return (utime + stime) / clockTicks, nil
}

// SelfCPU is the CPU time this process has used (all threads), at microsecond resolution.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// PIDsWithArgs lists the processes whose command line has the arguments args in a row,
// e.g. the containerd shims of one containerd: "-address", "/run/x/containerd.sock".
func PIDsWithArgs(args ...string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		if hasArgs(strings.Split(string(cmdline), "\x00"), args) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

func hasArgs(argv, want []string) bool {
	for i := 0; i+len(want) <= len(argv); i++ {
		match := true
		for j := range want {
			if argv[i+j] != want[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// CPUSecondsOf sums the CPU time of the processes; one that has exited counts nothing.
func CPUSecondsOf(pids []int) float64 {
	total := 0.0
	for _, pid := range pids {
		if s, err := CPUSeconds(pid); err == nil {
			total += s
		}
	}
	return total
}

// MachineBusyCPU is the CPU time all the machine's CPUs have spent busy since boot (user,
// nice, system, irq, softirq and steal; not idle or iowait), from /proc/stat.
func MachineBusyCPU() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseBusyCPU(string(data))
}

// parseBusyCPU reads the busy time from /proc/stat's first line,
// "cpu user nice system idle iowait irq softirq steal ...", in USER_HZ ticks.
func parseBusyCPU(stat string) (time.Duration, error) {
	line, _, _ := strings.Cut(stat, "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		n, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// ControlPlaneComponents are the processes hack/controlplane.sh starts, each with a PID
// file under <its state dir>/run.
var ControlPlaneComponents = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// ControlPlanePIDs reads the PID files of the control plane whose state dir is dir.
func ControlPlanePIDs(dir string) ([]int, error) {
	var pids []int
	for _, c := range ControlPlaneComponents {
		data, err := os.ReadFile(filepath.Join(dir, "run", c+".pid"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c, err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			return nil, fmt.Errorf("%s's PID file: %w", c, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}
