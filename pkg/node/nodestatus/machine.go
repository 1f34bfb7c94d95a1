package nodestatus

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MachineInfo is what the node reports about its hardware and operating system: the part
// of cAdvisor's MachineInfo and VersionInfo that upstream's node status uses.
type MachineInfo struct {
	NumCores       int
	MemoryCapacity uint64 // MemTotal, bytes
	SwapCapacity   uint64 // SwapTotal, bytes
	HugePages      []HugePages
	// EphemeralStorage is the capacity of the filesystem holding the kubelet's root
	// directory, in bytes; nil when it could not be read.
	EphemeralStorage *uint64
	MachineID        string
	SystemUUID       string
	BootID           string
	KernelVersion    string
	OSImage          string
	// RunningInUserNamespace is true when nodelet runs in a user namespace that does not
	// map the whole uid range (rootless, or a container with user namespaces).
	RunningInUserNamespace bool
}

// HugePages is one huge page size and how many pages of it the kernel has reserved.
type HugePages struct {
	PageSizeKiB uint64
	NumPages    uint64
}

// hostFiles reads the host's /proc, /sys and /etc under root ("/" on a real node, a
// fixture directory in tests).
type hostFiles struct{ root string }

func (h hostFiles) path(p string) string { return filepath.Join(h.root, p) }

func (h hostFiles) read(p string) ([]byte, error) { return os.ReadFile(h.path(p)) }

// firstOf returns the trimmed content of the first of paths that can be read, or "".
func (h hostFiles) firstOf(paths ...string) string {
	for _, p := range paths {
		if b, err := h.read(p); err == nil {
			return strings.TrimSpace(strings.TrimRight(string(b), "\x00"))
		}
	}
	return ""
}

// ReadMachineInfo reads the machine's description from the host, with the capacity of
// rootDir's filesystem as ephemeral storage. Only the CPU count and memory size are
// required; anything else that cannot be read is left empty, as cAdvisor does.
func ReadMachineInfo(rootDir string) (*MachineInfo, error) {
	info, err := hostFiles{root: "/"}.machineInfo()
	if err != nil {
		return nil, err
	}
	if size, err := filesystemCapacity(rootDir); err == nil {
		info.EphemeralStorage = &size
	}
	info.KernelVersion = kernelRelease()
	return info, nil
}

func (h hostFiles) machineInfo() (*MachineInfo, error) {
	meminfo, err := h.read("/proc/meminfo")
	if err != nil {
		return nil, fmt.Errorf("reading memory size: %w", err)
	}
	mem, err := parseMeminfo(meminfo)
	if err != nil {
		return nil, err
	}
	hugePages, err := h.hugePages()
	if err != nil {
		return nil, err
	}
	info := &MachineInfo{
		NumCores:               h.numCores(),
		MemoryCapacity:         mem["MemTotal"],
		SwapCapacity:           mem["SwapTotal"],
		HugePages:              hugePages,
		MachineID:              h.firstOf("/etc/machine-id", "/var/lib/dbus/machine-id"),
		SystemUUID:             h.systemUUID(),
		BootID:                 h.firstOf("/proc/sys/kernel/random/boot_id"),
		OSImage:                h.osImage(),
		RunningInUserNamespace: h.inUserNamespace(),
	}
	return info, nil
}

// numCores counts the online CPUs (what cAdvisor counts from sysfs topology), falling
// back to the CPUs this process may run on.
func (h hostFiles) numCores() int {
	if b, err := h.read("/sys/devices/system/cpu/online"); err == nil {
		if n, err := countCPUList(strings.TrimSpace(string(b))); err == nil && n > 0 {
			return n
		}
	}
	return goruntime.NumCPU()
}

// countCPUList counts the CPUs in a kernel cpu list such as "0-3,6,8-9".
func countCPUList(list string) (int, error) {
	if list == "" {
		return 0, errors.New("empty cpu list")
	}
	n := 0
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("cpu list %q: %w", list, err)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil {
				return 0, fmt.Errorf("cpu list %q: %w", list, err)
			}
		}
		if last < first {
			return 0, fmt.Errorf("cpu list %q: range %s is reversed", list, part)
		}
		n += last - first + 1
	}
	return n, nil
}

// parseMeminfo returns /proc/meminfo's values in bytes; MemTotal is required.
func parseMeminfo(data []byte) (map[string]uint64, error) {
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) > 1 && fields[1] == "kB" {
			v *= 1024
		}
		out[key] = v
	}
	if _, ok := out["MemTotal"]; !ok {
		return nil, errors.New("no MemTotal in /proc/meminfo")
	}
	return out, nil
}

// hugePages lists /sys/kernel/mm/hugepages/hugepages-<size>kB/nr_hugepages. A kernel
// without huge pages has no such directory, which is not an error.
func (h hostFiles) hugePages() ([]HugePages, error) {
	dir := "/sys/kernel/mm/hugepages"
	entries, err := os.ReadDir(h.path(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading huge pages: %w", err)
	}
	var out []HugePages
	for _, e := range entries {
		size, err := parseHugePageDir(e.Name())
		if err != nil {
			return nil, err
		}
		b, err := h.read(filepath.Join(dir, e.Name(), "nr_hugepages"))
		if err != nil {
			return nil, fmt.Errorf("reading huge pages: %w", err)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("huge pages %s: %w", e.Name(), err)
		}
		out = append(out, HugePages{PageSizeKiB: size, NumPages: n})
	}
	return out, nil
}

// parseHugePageDir reads the page size from a name such as "hugepages-2048kB".
func parseHugePageDir(name string) (uint64, error) {
	num, ok := strings.CutPrefix(name, "hugepages-")
	if ok {
		num, ok = strings.CutSuffix(num, "kB")
	}
	if !ok {
		return 0, fmt.Errorf("unexpected huge pages directory %q", name)
	}
	size, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("unexpected huge pages directory %q: %w", name, err)
	}
	return size, nil
}

// systemUUID is the firmware's product UUID, where the platform exposes one, and else the
// machine ID: cAdvisor's last fallback (meant for s390x) reads /etc/machine-id, so on a VM
// without DMI tables upstream reports the machine ID, and the node object must not change
// when one kubelet replaces the other.
func (h hostFiles) systemUUID() string {
	return h.firstOf("/sys/class/dmi/id/product_uuid",
		"/proc/device-tree/system-id", "/proc/device-tree/vm,uuid", "/etc/machine-id")
}

// osImage is PRETTY_NAME from os-release; "Linux" when the file has none and "Unknown"
// when there is no file, as cAdvisor reports it.
func (h hostFiles) osImage() string {
	data, err := h.read("/etc/os-release")
	if errors.Is(err, os.ErrNotExist) {
		data, err = h.read("/usr/lib/os-release")
	}
	if err != nil {
		return "Unknown"
	}
	return prettyName(data)
}

func prettyName(osRelease []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(osRelease))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return "Linux"
}

// inUserNamespace reports whether /proc/self/uid_map maps less than the full uid range.
func (h hostFiles) inUserNamespace() bool {
	data, err := h.read("/proc/self/uid_map")
	if err != nil {
		return false
	}
	return !isFullUIDMap(data)
}

func isFullUIDMap(uidMap []byte) bool {
	lines := strings.Split(strings.TrimSpace(string(uidMap)), "\n")
	if len(lines) != 1 {
		return false
	}
	f := strings.Fields(lines[0])
	return len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295"
}

// filesystemCapacity is the size of the filesystem holding path (blocks × block size,
// as cAdvisor's RootFsInfo reports it).
func filesystemCapacity(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Blocks * uint64(st.Bsize), nil
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "Unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}
