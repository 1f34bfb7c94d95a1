package cm

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

const (
	// DefaultCgroupFS is where the cgroup hierarchies are mounted.
	DefaultCgroupFS   = "/sys/fs/cgroup"
	defaultHugePages  = "/sys/kernel/mm/hugepages"
	cgroupControllers = "cgroup.controllers"
	cgroupSubtree     = "cgroup.subtree_control"
	cgroupProcs       = "cgroup.procs"
)

// requiredV1 are the cgroup v1 hierarchies a cgroup must be in to exist (upstream's
// list; hugetlb counts where it is mounted).
var requiredV1 = []string{"cpu", "cpuacct", "cpuset", "memory", "systemd", "pids", "hugetlb"}

// requiredV2 are the cgroup v2 controllers a cgroup must have, where the root offers them.
var requiredV2 = []string{"cpu", "cpuset", "memory", "hugetlb", "pids"}

// cgroupFS reads and writes cgroups on the mounted cgroup filesystem: the unified tree
// (cgroup v2) or one hierarchy per v1 controller group.
type cgroupFS struct {
	root    string
	unified bool
	// controllers maps a v1 controller to its hierarchy's mount point ("cpu" ->
	// <root>/cpu,cpuacct); on v2 it holds the controllers the root offers, all at root.
	controllers map[string]string
	// hierarchies are every mount point a cgroup is created in and removed from.
	hierarchies []string
	// hugePageSizes are the host's huge page sizes in bytes.
	hugePageSizes []int64
}

// openCgroupFS inspects the cgroup filesystem at root. It is cgroup v2 when root
// holds cgroup.controllers (only the unified hierarchy's root has it); otherwise each
// directory under root is a v1 hierarchy named after its controllers ("cpu,cpuacct",
// "memory", "systemd" for name=systemd, "unified" for a hybrid host's v2 tree).
func openCgroupFS(root, hugePagesDir string) (*cgroupFS, error) {
	c := &cgroupFS{root: root, controllers: map[string]string{}, hugePageSizes: readHugePageSizes(hugePagesDir)}
	if data, err := os.ReadFile(filepath.Join(root, cgroupControllers)); err == nil {
		c.unified = true
		c.hierarchies = []string{root}
		for _, ctrl := range strings.Fields(string(data)) {
			c.controllers[ctrl] = root
		}
		return c, nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("failed to find cgroup mounts: %w", err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue
		}
		if st, err := os.Stat(real); err != nil || !st.IsDir() {
			continue
		}
		for _, ctrl := range strings.Split(e.Name(), ",") {
			if _, dup := c.controllers[ctrl]; !dup {
				c.controllers[ctrl] = real
			}
		}
		if !seen[real] {
			seen[real] = true
			c.hierarchies = append(c.hierarchies, real)
		}
	}
	if len(c.hierarchies) == 0 {
		return nil, fmt.Errorf("failed to find cgroup mounts under %s", root)
	}
	return c, nil
}

// readHugePageSizes lists the host's huge page sizes from sysfs ("hugepages-2048kB").
func readHugePageSizes(dir string) []int64 {
	entries, _ := os.ReadDir(dir)
	var sizes []int64
	for _, e := range entries {
		s, ok := strings.CutPrefix(e.Name(), "hugepages-")
		if kb, err := strconv.ParseInt(strings.TrimSuffix(s, "kB"), 10, 64); ok && err == nil {
			sizes = append(sizes, kb*1024)
		}
	}
	slices.Sort(sizes)
	return sizes
}

// dir is a cgroup's directory in the hierarchy of controller, "" when it is not mounted.
func (c *cgroupFS) dir(controller, cgroup string) string {
	mount, ok := c.controllers[controller]
	if !ok {
		return ""
	}
	return filepath.Join(mount, cgroup)
}

// validate says whether the cgroup exists: in every required hierarchy (v1), or with
// every required controller the root offers (v2). name is how errors call it.
func (c *cgroupFS) validate(cgroup string, name cgroupName) error {
	var missing []string
	if c.unified {
		data, err := os.ReadFile(filepath.Join(c.root, cgroup, cgroupControllers))
		if err != nil {
			return fmt.Errorf("could not read controllers for cgroup %q: %w", []string(name), err)
		}
		have := strings.Fields(string(data))
		for _, ctrl := range requiredV2 {
			if _, offered := c.controllers[ctrl]; offered && !slices.Contains(have, ctrl) {
				missing = append(missing, ctrl)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("cgroup %q has some missing controllers: %v", []string(name), strings.Join(missing, ", "))
		}
		return nil
	}
	for _, ctrl := range requiredV1 {
		if d := c.dir(ctrl, cgroup); d != "" {
			if _, err := os.Stat(d); err != nil {
				missing = append(missing, d)
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("cgroup %q has some missing paths: %v", []string(name), strings.Join(missing, ", "))
	}
	return nil
}

// create makes the cgroup, and its missing parents, in every hierarchy.
func (c *cgroupFS) create(cgroup string) error {
	parts := parseCgroupfs(cgroup)
	if c.unified {
		return c.createV2(parts)
	}
	var errs []error
	for _, h := range c.hierarchies {
		errs = append(errs, c.createV1(h, parts))
	}
	return errors.Join(errs...)
}

// createV1 makes the directories one level at a time, so that a new cpuset cgroup
// gets its parent's CPUs and memory nodes: the kernel leaves them empty, and an empty
// cpuset cannot hold tasks.
func (c *cgroupFS) createV1(hierarchy string, parts []string) error {
	dir := hierarchy
	for _, p := range parts {
		parent := dir
		dir = filepath.Join(dir, p)
		if err := os.Mkdir(dir, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				continue
			}
			return err
		}
		if hierarchy == c.controllers["cpuset"] {
			if err := inheritCpuset(parent, dir); err != nil {
				return err
			}
		}
	}
	return nil
}

func inheritCpuset(parent, dir string) error {
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		if cur, err := os.ReadFile(filepath.Join(dir, f)); err == nil && strings.TrimSpace(string(cur)) != "" {
			continue
		}
		v, err := os.ReadFile(filepath.Join(parent, f))
		if err != nil {
			continue
		}
		if err := writeFile(dir, f, strings.TrimSpace(string(v))); err != nil {
			return err
		}
	}
	return nil
}

// createV2 makes the directories and, in each ancestor, enables every controller it
// offers for its children, as runc does: a controller's files appear in a cgroup only
// once its parent enables it.
func (c *cgroupFS) createV2(parts []string) error {
	dir := c.root
	for _, p := range parts {
		enableControllers(dir)
		dir = filepath.Join(dir, p)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// enableControllers adds the controllers dir offers to its subtree_control. Failures
// are left for the writes that need the controller to report.
func enableControllers(dir string) {
	offered, err := os.ReadFile(filepath.Join(dir, cgroupControllers))
	if err != nil {
		return
	}
	enabled, _ := os.ReadFile(filepath.Join(dir, cgroupSubtree))
	// The kernel lists enabled controllers bare; a plain file (tests) keeps the "+".
	have := strings.Fields(strings.ReplaceAll(string(enabled), "+", ""))
	for _, ctrl := range strings.Fields(string(offered)) {
		if !slices.Contains(have, ctrl) {
			if err := appendFile(dir, cgroupSubtree, "+"+ctrl); err != nil {
				klog.V(4).InfoS("Cannot enable cgroup controller", "cgroup", dir, "controller", ctrl, "err", err)
			}
		}
	}
}

// set writes the configuration's non-nil values to the cgroup.
func (c *cgroupFS) set(cgroup string, cfg *ResourceConfig) error {
	if c.unified {
		return c.setV2(filepath.Join(c.root, cgroup), cfg)
	}
	return c.setV1(cgroup, cfg)
}

func (c *cgroupFS) setV1(cgroup string, cfg *ResourceConfig) error {
	var errs []error
	if d := c.dir("cpu", cgroup); d != "" {
		if cfg.CPUShares != nil {
			errs = append(errs, writeFile(d, "cpu.shares", strconv.FormatUint(*cfg.CPUShares, 10)))
		}
		errs = append(errs, setCFSv1(d, cfg.CPUQuota, cfg.CPUPeriod))
	}
	if d := c.dir("memory", cgroup); d != "" && cfg.Memory != nil && *cfg.Memory != 0 {
		errs = append(errs, writeFile(d, "memory.limit_in_bytes", strconv.FormatInt(*cfg.Memory, 10)))
	}
	if d := c.dir("pids", cgroup); d != "" && cfg.PidsLimit != nil {
		errs = append(errs, writeFile(d, "pids.max", pidsMax(*cfg.PidsLimit)))
	}
	if d := c.dir("hugetlb", cgroup); d != "" {
		errs = append(errs, c.setHugePages(d, cfg.HugePageLimit, "hugetlb.%s.limit_in_bytes"))
	}
	return errors.Join(errs...)
}

// setCFSv1 writes the CFS period, then the quota. The kernel refuses a period that the
// current quota does not fit; then the quota goes first.
func setCFSv1(dir string, quota *int64, period *uint64) error {
	writeQuota := func() error {
		if quota == nil {
			return nil
		}
		return writeFile(dir, "cpu.cfs_quota_us", strconv.FormatInt(*quota, 10))
	}
	if period != nil && *period != 0 {
		p := strconv.FormatUint(*period, 10)
		if err := writeFile(dir, "cpu.cfs_period_us", p); err != nil {
			if qerr := writeQuota(); qerr != nil {
				return errors.Join(err, qerr)
			}
			return writeFile(dir, "cpu.cfs_period_us", p)
		}
	}
	return writeQuota()
}

func (c *cgroupFS) setV2(dir string, cfg *ResourceConfig) error {
	var errs []error
	if cfg.CPUShares != nil {
		errs = append(errs, writeFile(dir, "cpu.weight", strconv.FormatUint(CPUSharesToWeight(*cfg.CPUShares), 10)))
	}
	if max := cpuMax(cfg.CPUQuota, cfg.CPUPeriod); max != "" {
		errs = append(errs, writeFile(dir, "cpu.max", max))
	}
	if cfg.Memory != nil && *cfg.Memory != 0 {
		errs = append(errs, writeFile(dir, "memory.max", limitString(*cfg.Memory)))
	}
	if cfg.PidsLimit != nil {
		errs = append(errs, writeFile(dir, "pids.max", pidsMax(*cfg.PidsLimit)))
	}
	if _, ok := c.controllers["hugetlb"]; ok {
		errs = append(errs, c.setHugePages(dir, cfg.HugePageLimit, "hugetlb.%s.max"))
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Unified)) {
		errs = append(errs, writeFile(dir, k, cfg.Unified[k]))
	}
	return errors.Join(errs...)
}

// cpuMax is cgroup v2's cpu.max ("<quota|max> <period>"), "" when neither is set.
func cpuMax(quota *int64, period *uint64) string {
	q, p := int64(0), uint64(0)
	if quota != nil {
		q = *quota
	}
	if period != nil {
		p = *period
	}
	if q == 0 && p == 0 {
		return ""
	}
	s := "max"
	if q > 0 {
		s = strconv.FormatInt(q, 10)
	}
	if p != 0 {
		s += " " + strconv.FormatUint(p, 10)
	}
	return s
}

func limitString(v int64) string {
	if v < 0 {
		return "max"
	}
	return strconv.FormatInt(v, 10)
}

func pidsMax(v int64) string {
	if v <= 0 {
		return "max"
	}
	return strconv.FormatInt(v, 10)
}

// setHugePages writes a limit for each of the host's page sizes: the configured one,
// or 0 for a size the configuration omits. A nil map leaves them alone.
func (c *cgroupFS) setHugePages(dir string, limits map[int64]int64, fileFormat string) error {
	if limits == nil {
		return nil
	}
	var errs []error
	for _, size := range c.hugePageSizes {
		errs = append(errs, writeFile(dir, fmt.Sprintf(fileFormat, hugePageUnit(size)), strconv.FormatInt(limits[size], 10)))
	}
	return errors.Join(errs...)
}

// unboundedHugePageLimits lifts the huge page limits of every page size.
func (c *cgroupFS) unboundedHugePageLimits() map[int64]int64 {
	limits := map[int64]int64{}
	for _, size := range c.hugePageSizes {
		limits[size] = unboundedHugePages
	}
	return limits
}

// cgroupCPU is a cgroup's CPU settings as its files hold them.
type cgroupCPU struct {
	shares uint64 // cpu.shares (cgroup v1)
	weight uint64 // cpu.weight (cgroup v2)
	quota  int64  // µs per period; -1 is no limit
	period uint64 // µs
}

// readCPU reads the cgroup's CPU weight or shares, CFS quota and period.
func (c *cgroupFS) readCPU(cgroup string) (cgroupCPU, error) {
	if c.unified {
		return readCPUv2(filepath.Join(c.root, cgroup))
	}
	dir := c.dir("cpu", cgroup)
	shares, err1 := readUint(dir, "cpu.shares")
	quota, err2 := readInt(dir, "cpu.cfs_quota_us")
	period, err3 := readUint(dir, "cpu.cfs_period_us")
	return cgroupCPU{shares: shares, quota: quota, period: period}, errors.Join(err1, err2, err3)
}

func readCPUv2(dir string) (cgroupCPU, error) {
	weight, err1 := readUint(dir, "cpu.weight")
	cpuMax, err2 := readString(dir, "cpu.max")
	if err := errors.Join(err1, err2); err != nil {
		return cgroupCPU{}, err
	}
	fields := strings.Fields(cpuMax)
	if len(fields) != 2 {
		return cgroupCPU{}, fmt.Errorf("unexpected cpu.max %q in %s", cpuMax, dir)
	}
	quota := int64(-1)
	if fields[0] != "max" {
		q, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return cgroupCPU{}, fmt.Errorf("parsing cpu.max in %s: %w", dir, err)
		}
		quota = q
	}
	period, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil {
		return cgroupCPU{}, fmt.Errorf("parsing cpu.max in %s: %w", dir, err)
	}
	return cgroupCPU{weight: weight, quota: quota, period: period}, nil
}

// readMemoryLimit reads the cgroup's memory limit in bytes as the cgroup holds it:
// cgroup v1 spells "no limit" as its largest page-aligned value, v2's "max" reads as
// math.MaxInt64.
func (c *cgroupFS) readMemoryLimit(cgroup string) (int64, error) {
	if c.unified {
		return readInt(filepath.Join(c.root, cgroup), "memory.max")
	}
	return readInt(c.dir("memory", cgroup), "memory.limit_in_bytes")
}

// readCPUAndMemory reads back the cgroup's CPU shares (cgroup v2's weight as the fewest
// shares that map to it), quota, period and memory limit; "no limit" reads as -1 quota
// and math.MaxInt64 memory.
func (c *cgroupFS) readCPUAndMemory(cgroup string) (*ResourceConfig, error) {
	cpu, err1 := c.readCPU(cgroup)
	memory, err2 := c.readMemoryLimit(cgroup)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	shares := cpu.shares
	if c.unified {
		shares = cpuWeightToShares(cpu.weight)
	}
	if memory >= math.MaxInt64-1<<20 {
		memory = math.MaxInt64
	}
	return &ResourceConfig{CPUShares: &shares, CPUQuota: &cpu.quota, CPUPeriod: &cpu.period, Memory: &memory}, nil
}

// memoryUsage is the cgroup's memory usage in bytes (what cAdvisor reports as usage).
func (c *cgroupFS) memoryUsage(cgroup string) (int64, error) {
	if c.unified {
		return readInt(filepath.Join(c.root, cgroup), "memory.current")
	}
	return readInt(c.dir("memory", cgroup), "memory.usage_in_bytes")
}

// destroy kills what still runs in the cgroup, in any hierarchy, and removes it and
// its children. It fails while the killed processes have not exited yet.
func (c *cgroupFS) destroy(cgroup string) error {
	dirs := make([]string, 0, len(c.hierarchies))
	for _, h := range c.hierarchies {
		dirs = append(dirs, filepath.Join(h, cgroup))
	}
	killed := 0
	for _, d := range dirs {
		killed += killProcesses(d)
	}
	var err error
	for attempt, delay := 0, 10*time.Millisecond; attempt < 5; attempt, delay = attempt+1, delay*2 {
		var errs []error
		for _, d := range dirs {
			errs = append(errs, removeTree(d))
		}
		if err = errors.Join(errs...); err == nil || killed == 0 {
			return err
		}
		time.Sleep(delay)
	}
	return err
}

// killProcesses sends SIGKILL to every process in the cgroup tree; it returns how many.
func killProcesses(dir string) int {
	killed := 0
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		for _, pid := range readPids(filepath.Join(p, cgroupProcs)) {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		return nil
	})
	return killed
}

func readPids(file string) []int {
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	var pids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// removeTree removes a cgroup directory bottom-up: cgroup directories go with rmdir
// although they hold control files. On a plain directory tree (tests) the files are
// removed too.
func removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	err = os.Remove(dir)
	if errors.Is(err, syscall.ENOTEMPTY) && !isCgroupFS(dir) {
		err = os.RemoveAll(dir)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func isCgroupFS(dir string) bool {
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil {
		return false
	}
	const cgroupMagic, cgroup2Magic = 0x27e0eb, 0x63677270
	return st.Type == cgroupMagic || st.Type == cgroup2Magic
}

// listChildren lists the directory names under a cgroup in every hierarchy.
func (c *cgroupFS) listChildren(cgroup string) map[string]bool {
	names := map[string]bool{}
	for _, h := range c.hierarchies {
		entries, _ := os.ReadDir(filepath.Join(h, cgroup))
		for _, e := range entries {
			if e.IsDir() {
				names[e.Name()] = true
			}
		}
	}
	return names
}

// writeFile writes one cgroup control file.
func writeFile(dir, name, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(value); err != nil {
		f.Close()
		return fmt.Errorf("failed to write %q to %s: %w", value, filepath.Join(dir, name), err)
	}
	return f.Close()
}

// appendFile writes without truncating, as cgroup.subtree_control changes are written.
func appendFile(dir, name, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value + "\n")
	return errors.Join(err, f.Close())
}

func readString(dir, name string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, name))
	return strings.TrimSpace(string(data)), err
}

func readUint(dir, name string) (uint64, error) {
	s, err := readString(dir, name)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(s, 10, 64)
}

// readInt reads an integer; "max" is math.MaxInt64.
func readInt(dir, name string) (int64, error) {
	s, err := readString(dir, name)
	if err != nil {
		return 0, err
	}
	if s == "max" {
		return math.MaxInt64, nil
	}
	return strconv.ParseInt(s, 10, 64)
}
